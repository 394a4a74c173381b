//! `predict`: its keys and its lowering.

use super::{FROM_DOC, NEEDS_DOC};
use crate::lower::path;
use crate::reader::{Fields, Reader};
use crate::schema::{int, key, required, section, Section, Ty, Val, MAX_BATCH, MAX_SKIP_ROWS};
use crate::{PredictSpec, PredictionFormat, Spanned};
use std::path::PathBuf;

pub const SECTION: Section = section(
    "predict",
    &["name"],
    &[
        key(
            "name",
            Ty::Text,
            Some(Val::Text("predict")),
            "The stage's name (letters, digits, `-` and `_`).",
        ),
        key("needs", Ty::Texts, None, NEEDS_DOC),
        required(
            "source",
            Ty::Path,
            "The samples to predict, without labels (a label column, when there, is ignored): read as the data file is (`.csv`, `.csv.gz`, `.parquet`, `.npy`, `.npz` or `.safetensors`, by its name), with the training's columns matched by name when it has a header (others, such as an id, ignored), by position otherwise (the training's features alone, or laid out as the data file, its labels ignored); missing values filled and features scaled with the training split's statistics. Its content is in the cache key.",
        ),
        key(
            "skip-rows",
            int(0, MAX_SKIP_ROWS),
            Some(Val::Int(0)),
            "Lines skipped at the top of `source`, before its header or first row (the data's `skip-rows` is the data file's own).",
        ),
        key(
            "output",
            Ty::Path,
            None,
            "Where the predictions go (default: `<name>.csv` in the run directory), one row per sample in the source's order. `.csv`: `row`, then the predicted class (by its name when the labels were text) under the label column's name and `prob_CLASS` for each class; for `bce-with-logits` each output's 0/1 (1 above a probability of 0.5) and `prob_LABEL`; for a regression the outputs under the label columns' names. `.npy`: one float64 array, samples × outputs (the class probabilities, or the outputs). Only a file `pipeline` wrote is ever replaced.",
        ),
        key(
            "batch-size",
            int(1, MAX_BATCH),
            Some(Val::Int(256)),
            "Samples per forward pass.",
        ),
        key("from", Ty::Text, Some(Val::Text("last")), FROM_DOC),
    ],
    "A stage that applies a trained model to new samples, as training saw them (scaling, filling, class names, precision), and writes the predictions.",
);

impl Reader<'_> {
    pub(crate) fn predict(&mut self, f: &Fields) -> PredictSpec {
        let output = path(f, "output");
        let format = match &output {
            Some(out) => self.prediction_format(out),
            None => PredictionFormat::Csv,
        };
        PredictSpec {
            // Not reached without `source`: it is required.
            source: path(f, "source").unwrap_or(Spanned {
                value: PathBuf::new(),
                span: f.span,
            }),
            output,
            format,
            skip_rows: f.int("skip-rows") as u64,
            from: self.weights_from(f),
            batch_size: f.int("batch-size") as u64,
        }
    }
}
