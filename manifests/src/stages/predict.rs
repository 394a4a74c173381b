//! `predict`: its keys and its lowering.

use super::{FROM_DOC, NEEDS_DOC};
use crate::lower::path;
use crate::reader::{Fields, Reader};
use crate::schema::{
    int, key, required, section, Children, Section, Ty, Val, MAX_BATCH, MAX_SKIP_ROWS,
};
use crate::{DataFormat, Diagnostic, PredictSpec, PredictionFormat, Spanned};
use std::path::PathBuf;

pub const SECTION: Section = Section {
    children: Children::Repeated(&[&super::INPUT_FILE]),
    ..section(
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
            "id",
            Ty::Text,
            None,
            "A column of the source, by its header's name, copied into the `.csv` predictions after `row`, under its own name, as written (an id, a name, a date): so that each prediction says which sample it is for. Not a feature unless the training's features name it.",
        ),
        key(
            "batch-size",
            int(1, MAX_BATCH),
            Some(Val::Int(256)),
            "Samples per forward pass.",
        ),
        key("from", Ty::Text, Some(Val::Text("last")), FROM_DOC),
    ],
    "A stage that applies a trained model to new samples, as training saw them (scaling, filling, class names, precision), and writes the predictions. With `data.inputs`, an `input \"NAME\" \"FILE\"` node per input gives its file for these samples.",
)
};

impl Reader<'_> {
    pub(crate) fn predict(&mut self, f: &Fields) -> PredictSpec {
        let output = path(f, "output");
        let format = match &output {
            Some(out) => self.prediction_format(out),
            None => PredictionFormat::Csv,
        };
        let source = path(f, "source");
        let id = f.opt_text("id").map(|value| Spanned {
            value,
            span: f.span("id"),
        });
        if let Some(id) = &id {
            self.id_needs_tables(id, source.as_ref(), output.as_ref(), format);
        }
        PredictSpec {
            // Not reached without `source`: it is required.
            source: source.unwrap_or(Spanned {
                value: PathBuf::new(),
                span: f.span,
            }),
            output,
            format,
            id,
            skip_rows: f.int("skip-rows") as u64,
            from: self.weights_from(f),
            batch_size: f.int("batch-size") as u64,
            // Read from the stage's `input` nodes (`Reader::stage_inputs`).
            inputs: Vec::new(),
        }
    }

    /// `id` copies a column of a table into a table: refused for predictions written as
    /// `.npy` (an array of numbers) and for a source that has no columns (`.npy`, `.npz`,
    /// images).
    fn id_needs_tables(
        &mut self,
        id: &Spanned<String>,
        source: Option<&Spanned<PathBuf>>,
        output: Option<&Spanned<PathBuf>>,
        format: PredictionFormat,
    ) {
        let refuse = |what: String, label: &str, span| {
            Diagnostic::error(
                "pipeline::predict::id_without_table",
                format!("`id \"{}\"`: {what}", id.value),
            )
            .label_opt(id.span, "copied from the source")
            .label_opt(span, label.to_string())
            .help("`id` copies a column of a CSV, Parquet or JSON source into `.csv` predictions: name the output `….csv`, or leave `id` out")
        };
        if format == PredictionFormat::Npy {
            let d = refuse(
                "predictions written as `.npy` are one array of numbers, with no column for it"
                    .into(),
                "an array",
                output.and_then(|o| o.span),
            );
            self.diags.push(d);
        }
        let table =
            |s: &Spanned<PathBuf>| DataFormat::of_name(&s.value).is_none_or(|f| f.is_table());
        if let Some(source) = source.filter(|s| !table(s)) {
            let d = refuse(
                format!(
                    "{} is not a table: it has no columns",
                    source.value.display()
                ),
                "not a table",
                source.span,
            );
            self.diags.push(d);
        }
    }
}
