//! `format "parquet"`: Apache Parquet, columns named and typed in the file; streamed by
//! row groups.

use super::{FormatDescription, FormatKind};

pub static PARQUET: FormatDescription = FormatDescription {
    name: "parquet",
    title: "Parquet",
    doc: "a Parquet file (`.parquet`, `.pq`): a row per sample, the label a column",
    extensions: &[".parquet", ".pq"],
    kind: FormatKind::Table {
        text: false,
        streams: true,
    },
};
