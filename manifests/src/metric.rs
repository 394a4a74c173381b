//! `metric "brier" { torchscript "brier.pt"; mode "min" }`: metrics scripted in Python,
//! defined once at the top level and then named wherever a built-in metric may be.

use crate::diagnostic::Diagnostic;
use crate::lower::{path, valid_stage_name};
use crate::manifest::{MetricSpec, Mode, Spanned, TorchScriptSpec};
use crate::reader::Reader;
use crate::schema;
use kdl::KdlNode;
use std::path::Path;

impl Reader<'_> {
    /// Every `metric` node, read; one with a problem is reported and left out.
    pub(crate) fn scripted_metrics(
        &mut self,
        nodes: &[&KdlNode],
        base_dir: &Path,
    ) -> Vec<MetricSpec> {
        let mut metrics: Vec<MetricSpec> = Vec::new();
        for &node in nodes {
            let section = &schema::METRIC;
            let f = self.read(
                Some(node),
                section,
                &[section.name.to_string()],
                section.name,
            );
            // A missing or refused key has been reported by the reader.
            let (Some(name), Some(file), Some(mode)) = (
                f.opt_text("name"),
                path(&f, "torchscript"),
                f.opt_text("mode").and_then(|m| Mode::parse(&m)),
            ) else {
                continue;
            };
            let name = Spanned {
                value: name,
                span: f.span("name"),
            };
            if !valid_stage_name(&name.value) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::metric::bad_name",
                        format!("`{}` is not a valid metric name", name.value),
                    )
                    .label_opt(name.span, "invalid name")
                    .help("use letters, digits, `-` and `_`: the name is also written as `val.NAME` in a monitor"),
                );
                continue;
            }
            if let Some(first) = metrics.iter().find(|m| m.name.value == name.value) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::metric::duplicate",
                        format!("the metric `{}` is defined twice", name.value),
                    )
                    .label_opt(name.span, "defined again here")
                    .label_opt(first.name.span, "first defined here")
                    .help("rename one of them"),
                );
                continue;
            }
            metrics.push(MetricSpec {
                name,
                script: TorchScriptSpec {
                    file: base_dir.join(&file.value),
                    path: file,
                },
                mode,
                span: f.span,
            });
        }
        metrics
    }
}
