//! `eval`: measures the loss and metrics of a trained model on a split of the data, or
//! on a `source` of its own; writes the predictions too when it has an `output`.

use super::{
    data_files, format_of_key, loss_script, predictions_required, tokenizer, Delivery, KeyParts,
    Kind, OwnInput, StageMember,
};
use crate::fingerprint::{source_input_role, SOURCE_ROLE};
use manifests::{EvalSpec, Manifest, StageKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) const KIND: Kind = Kind {
    kind: StageKind::Eval,
    required_of_key: |stage| predictions_required(format_of_key(stage, "predictions")),
    dot_shape: "ellipse",
    mermaid_shape: ("([", "])"),
};

impl StageMember for EvalSpec {
    fn own_input(&self) -> Option<OwnInput<'_>> {
        self.source.as_ref().map(|path| OwnInput {
            role: "the source",
            path,
            may_be_url: false,
        })
    }

    fn delivery(&self) -> Delivery<'_> {
        match self.predictions {
            Some(format) => Delivery::Predictions {
                output: self.output.as_ref(),
                format,
            },
            None => Delivery::Nothing,
        }
    }

    fn key_inputs(&self, manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>) {
        match &self.source {
            // Its own labelled file, read with the data's settings (`check` refuses a
            // labels file or other inputs beside it).
            Some(source) => {
                files.insert(SOURCE_ROLE.into(), manifest.resolve(&source.value));
                for input in &self.inputs {
                    files.insert(
                        source_input_role(&input.name.value),
                        manifest.resolve(&input.source.value),
                    );
                }
            }
            // The scores depend on the labels as much as on the features.
            None => data_files(manifest, files),
        }
        tokenizer(manifest, files);
        loss_script(manifest, files);
    }

    fn key_spec(&self, manifest: &Manifest, parts: KeyParts) -> Value {
        let loss = crate::fingerprint::to_value(&manifest.loss);
        json!({ "stage": parts.stage, "data": parts.data, "loss": loss })
    }

    fn required_outputs(&self) -> &'static [&'static str] {
        predictions_required(self.predictions)
    }

    fn main_output(&self) -> Option<&'static str> {
        // Its result is its metrics (predictions, when it writes them, are required).
        None
    }

    fn reported_metrics(&self, manifest: &Manifest, _classification: bool) -> Vec<String> {
        let mut names: Vec<String> = vec!["loss".into(), "samples".into()];
        if manifest.loss.kind.is_classification() {
            names.push("accuracy".into());
        }
        for m in &self.metrics {
            if !names.contains(&m.value) {
                names.push(m.value.clone());
            }
        }
        names
    }
}
