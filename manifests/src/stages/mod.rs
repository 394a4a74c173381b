//! Stage kinds, one file each: a kind's keys (its schema section, with their
//! documentation) and its lowering into its spec. What a kind reads, writes, stores and
//! keys is its file in `pipeline_core::stages`, its execution its file in
//! `backends/src/runner/`. [`crate::schema::stage`] gives each kind's section.

pub(crate) mod checkpoint;
pub(crate) mod eval;
pub(crate) mod predict;
pub(crate) mod train;

use crate::reader::{Fields, Reader};
use crate::{Diagnostic, PredictionFormat, Spanned, StageConfig, StageKind, WeightsFrom};
use std::path::PathBuf;

pub(crate) const NEEDS_DOC: &str = "The stages that must finish first; an `eval`, `checkpoint` or `predict` stage takes its model from the `train` stage it needs.";

pub(crate) const FROM_DOC: &str = "Which weights of the `train` stage it needs: `last` (those training ended with), or `best`, `best-2`, … (the best its `keep-best` kept, the best first).";

impl Reader<'_> {
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
