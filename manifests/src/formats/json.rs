//! `format "json"`: records as a table, their keys the columns (an array of records, or
//! JSON Lines).

use super::{FormatDescription, FormatKind};

pub static JSON: FormatDescription = FormatDescription {
    name: "json",
    title: "JSON",
    doc: "records as a table, keys the columns: an array of records (`.json`) or one a line (`.jsonl`, `.ndjson`), plain or gzip",
    extensions: &[".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz"],
    kind: FormatKind::Table {
        text: false,
        streams: false,
    },
};
