//! Stage kinds, one file each: a kind's keys (its schema section, with their
//! documentation) and its lowering into its spec. What a kind reads, writes, stores and
//! keys is its file in `pipeline_core::stages`, its execution its file in
//! `backends/src/runner/`. [`crate::schema::stage`] gives each kind's section.

pub(crate) mod checkpoint;
pub(crate) mod eval;
pub(crate) mod predict;
pub(crate) mod train;

use crate::reader::{Fields, Reader};
use crate::schema::{required, section, Section, Ty};
use crate::{
    Diagnostic, InputFile, PredictionFormat, Spanned, StageConfig, StageKind, WeightsFrom,
};
use kdl::KdlNode;
use std::path::PathBuf;

pub(crate) const NEEDS_DOC: &str = "The stages that must finish first; an `eval`, `checkpoint` or `predict` stage takes its model from the `train` stage it needs.";

pub(crate) const FROM_DOC: &str = "Which weights of the `train` stage it needs: `last` (those training ended with), or `best`, `best-2`, … (the best its `keep-best` kept, the best first).";

/// An `input` node of an `eval` or `predict` stage: a file of `data.inputs` for the
/// stage's own samples.
pub const INPUT_FILE: Section = section(
    "input",
    &["name", "source"],
    &[
        required(
            "name",
            Ty::Text,
            "The input, as `data.inputs` names it.",
        ),
        required(
            "source",
            Ty::Path,
            "Its file for the stage's `source`: one row per sample, in the source's order, read as the data's input file is (its format by its name, the same columns). Its content is in the cache key.",
        ),
    ],
    "The file of one of `data.inputs` for the samples of the stage's `source`: `input \"meta\" \"new-meta.csv\"`. Every input of `data.inputs` needs one; the training's files hold the training's samples.",
);

impl Reader<'_> {
    /// The `input` nodes of the stage `node`.
    pub(crate) fn stage_inputs(&mut self, node: &KdlNode, stage: &str) -> Vec<InputFile> {
        let nodes = node
            .children()
            .map_or(&[][..], |c| c.nodes())
            .iter()
            .filter(|n| n.name().value() == INPUT_FILE.name);
        let mut out: Vec<InputFile> = Vec::new();
        for (i, child) in nodes.enumerate() {
            // `--set` cannot reach one: the path has a space.
            let path = [stage.to_string(), format!("input {i}")];
            let f = self.read(Some(child), &INPUT_FILE, &path, &format!("{stage}.input"));
            let name = Spanned {
                value: f.text("name"),
                span: f.span("name"),
            };
            if let Some(first) = out.iter().find(|i| i.name.value == name.value) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::stage::unknown_input",
                        format!("the input `{}` is given two files", name.value),
                    )
                    .label_opt(first.name.span, "first")
                    .label_opt(name.span, "again")
                    .help("give each input one file"),
                );
                continue;
            }
            if let Some(source) = crate::lower::path(&f, "source") {
                out.push(InputFile { name, source });
            }
        }
        out
    }

    /// The settings of a stage of `kind`, lowered by its member.
    pub(crate) fn stage_config(&mut self, f: &Fields, kind: StageKind) -> StageConfig {
        match kind {
            StageKind::Train => StageConfig::Train(self.train(f)),
            StageKind::Eval => StageConfig::Eval(self.eval(f)),
            StageKind::Checkpoint => StageConfig::Checkpoint(self.checkpoint(f)),
            StageKind::Predict => StageConfig::Predict(self.predict(f)),
        }
    }

    /// An `eval` or `checkpoint` stage's `from`: `last`, `best` or `best-N`.
    pub(crate) fn weights_from(&mut self, f: &Fields) -> Spanned<WeightsFrom> {
        let span = f.span("from");
        let text = f.text("from");
        let value = WeightsFrom::parse(&text).unwrap_or_else(|| {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::stage::bad_from",
                    format!("`from \"{text}\"` names no weights of a train stage"),
                )
                .label_opt(span, "not `last`, `best` or `best-N`")
                .help("`from \"last\"`: the weights training ended with; `from \"best\"` (or `\"best-2\"`, …): the best the train stage's `keep-best` kept"),
            );
            WeightsFrom::Last
        });
        Spanned { value, span }
    }

    /// How the predictions written to `output` are written, by its name.
    pub(crate) fn prediction_format(&mut self, out: &Spanned<PathBuf>) -> PredictionFormat {
        PredictionFormat::of_name(&out.value).unwrap_or_else(|| {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::predictions::bad_output",
                    format!(
                        "predictions are written as .csv or .npy, not as {}",
                        out.value.display()
                    ),
                )
                .label_opt(out.span, "not .csv or .npy")
                .help("name the output `….csv` (a table with a header) or `….npy` (one array)"),
            );
            PredictionFormat::Csv
        })
    }
}
