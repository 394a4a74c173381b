//! `format "csv"`: comma-separated text (or the `delimiter`), plain or gzip.

use super::{FormatDescription, FormatKind};

pub static CSV: FormatDescription = FormatDescription {
    name: "csv",
    title: "CSV",
    doc: "a CSV file (`.csv`, `.csv.gz`): a row per sample, the label a column",
    extensions: &[".csv", ".csv.gz"],
    kind: FormatKind::Table {
        text: true,
        streams: false,
    },
};
