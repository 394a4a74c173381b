//! `eval`: its keys and its lowering.

use super::{FROM_DOC, NEEDS_DOC};
use crate::lower::path;
use crate::reader::{Fields, Reader};
use crate::schema::{int, key, section, Children, Section, Ty, Val, MAX_BATCH, MAX_SKIP_ROWS};
use crate::{EvalSpec, Spanned, SplitName};

pub const SECTION: Section = Section {
    children: Children::Repeated(&[&super::INPUT_FILE]),
    ..section(
    "eval",
    &["name"],
    &[
        key(
            "name",
            Ty::Text,
            Some(Val::Text("eval")),
            "The stage's name (letters, digits, `-` and `_`).",
        ),
        key("needs", Ty::Texts, None, NEEDS_DOC),
        key(
            "split",
            Ty::Choice(SplitName::NAMES),
            Some(Val::Text(SplitName::Test.as_str())),
            "The split to evaluate on (not with `source`). With `data.split folds=K`, by default each fold's model on the fold it held out.",
        ),
        key(
            "source",
            Ty::Path,
            None,
            "Another file to evaluate on, whole: labelled and laid out as the data file (columns matched by name when it has a header; others ignored), read with the data's settings, its features filled and scaled with the training split's statistics, text labels mapped to the training's classes. Its content is in the cache key.",
        ),
        key(
            "skip-rows",
            int(0, MAX_SKIP_ROWS),
            Some(Val::Int(0)),
            "Lines skipped at the top of `source`, before its header or first row (the data's `skip-rows` is the data file's own).",
        ),
        key(
            "batch-size",
            int(1, MAX_BATCH),
            Some(Val::Int(256)),
            "Samples per forward pass.",
        ),
        key(
            "output",
            Ty::Path,
            None,
            "Where to write the predictions of the samples evaluated, as a `predict` stage writes them (`.csv` or `.npy`), `row` naming each sample's data row in the file: none are written without it. Only a file `pipeline` wrote is ever replaced.",
        ),
        key(
            "metrics",
            Ty::Metrics,
            None,
            "Metrics besides the loss, each computed exactly over the whole split and equal to scikit-learn's on the same predictions, listed below: a `per-class` one gives one value per class (named by the class), `confusion-matrix` is written to the run directory as `STAGE-confusion-matrix.json`, regression metrics are averaged over the outputs, and for `bce-with-logits` (multi-label) `precision-`, `recall-`, `f1-` and `auroc` are per label, as scikit-learn computes them on the indicator matrices. A `metric` block adds one written in Python (`pipeline explain metric`); a program built on pipeline may register more (`docs/extending.md`). In the cache key.",
        ),
        key("from", Ty::Text, Some(Val::Text("last")), FROM_DOC),
    ],
    "A stage that measures a trained model's loss and accuracy, and any `metrics`. With a `source` and `data.inputs`, an `input \"NAME\" \"FILE\"` node per input gives its file for the source's samples.",
)
};

impl Reader<'_> {
    pub(crate) fn eval(&mut self, f: &Fields) -> EvalSpec {
        EvalSpec {
            split: Spanned {
                value: match (f.value("split"), self.folds) {
                    // k-fold cross-validation: each fold's model on the fold it held out.
                    (None, Some(_)) => SplitName::Val,
                    // Not reached: `split` has a default.
                    _ => SplitName::parse(&f.text("split")).unwrap_or(SplitName::Test),
                },
                span: f.span("split"),
            },
            source: path(f, "source"),
            skip_rows: f.int("skip-rows") as u64,
            predictions: path(f, "output").map(|out| self.prediction_format(&out)),
            output: path(f, "output"),
            batch_size: f.int("batch-size") as u64,
            metrics: f.texts("metrics"),
            from: self.weights_from(f),
            // Read from the stage's `input` nodes (`Reader::stage_inputs`).
            inputs: Vec::new(),
        }
    }
}
