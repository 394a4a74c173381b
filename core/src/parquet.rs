//! Parquet files (`data.format "parquet"`, `.parquet`) read into the same [`Table`] as
//! CSV, through the Apache Arrow project's `parquet` crate: its row reader, so that any
//! physical type, encoding and compression pandas or pyarrow write is decoded by the
//! reference implementation. Columns are chosen by the same `label` and `features` keys
//! (names, indices, ranges, over the top-level columns); a null is a missing value.
//! `check` reads the schema only, from the file's footer.

use crate::table::{resolve, Layout, Table, TableError};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use std::fs::File;
use std::path::Path;

/// The file's reader and its top-level column names; a nested column (a list, a map,
/// a struct) is refused, naming it.
fn open(path: &Path) -> Result<(SerializedFileReader<File>, Vec<String>), TableError> {
    let file = File::open(path).map_err(|e| TableError::Io(e.to_string()))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| TableError::Io(format!("not a readable Parquet file: {e}")))?;
    let schema = reader.metadata().file_metadata().schema_descr();
    let mut names = Vec::new();
    for field in schema.root_schema().get_fields() {
        if field.is_group() {
            return Err(TableError::Columns(format!(
                "column `{}` is nested (a list, map or struct); only flat columns of numbers or text can be read",
                field.name()
            )));
        }
        names.push(field.name().to_string());
    }
    Ok((reader, names))
}

/// How many features a sample has, from the schema alone.
pub fn peek_features(path: &Path, layout: Layout<'_>) -> Option<usize> {
    let (_, names) = open(path).ok()?;
    let columns = resolve(layout, names.len(), Some(&names)).ok()?;
    Some(columns.features.len())
}

/// A cell as text (labels), or `None` when null.
fn text(field: &Field) -> Option<String> {
    match field {
        Field::Null => None,
        Field::Str(s) => Some(s.clone()),
        other => number(other).map(|v| v.to_string()),
    }
}

/// A cell as a number, or `None` when it is not one.
fn number(field: &Field) -> Option<f64> {
    Some(match field {
        Field::Bool(b) => f64::from(u8::from(*b)),
        Field::Byte(v) => f64::from(*v),
        Field::Short(v) => f64::from(*v),
        Field::Int(v) => f64::from(*v),
        Field::Long(v) => *v as f64,
        Field::UByte(v) => f64::from(*v),
        Field::UShort(v) => f64::from(*v),
        Field::UInt(v) => f64::from(*v),
        Field::ULong(v) => *v as f64,
        Field::Float16(v) => f64::from(*v),
        Field::Float(v) => f64::from(*v),
        Field::Double(v) => *v,
        _ => return None,
    })
}

/// Reads the whole table; `Table::lines` holds each row's 0-based index.
pub fn read(path: &Path, layout: Layout<'_>) -> Result<Table, TableError> {
    let (reader, names) = open(path)?;
    let columns = resolve(layout, names.len(), Some(&names))?;
    let mut table = Table {
        feature_names: columns.features.iter().map(|&i| names[i].clone()).collect(),
        features: Vec::new(),
        label_names: columns.labels.iter().map(|&i| names[i].clone()).collect(),
        labels: vec![Vec::new(); columns.labels.len()],
        lines: Vec::new(),
    };
    let rows = reader
        .get_row_iter(None)
        .map_err(|e| TableError::Io(e.to_string()))?;
    for (row_index, row) in rows.enumerate() {
        let row = row.map_err(|e| TableError::Line {
            line: row_index,
            message: format!("cannot read the row: {e}"),
        })?;
        let fields: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
        for (k, &c) in columns.labels.iter().enumerate() {
            table.labels[k].push(text(fields[c]));
        }
        for (k, &c) in columns.features.iter().enumerate() {
            let value = match fields[c] {
                Field::Null => f32::NAN,
                field => match number(field) {
                    Some(v) => v as f32,
                    None => {
                        return Err(TableError::Line {
                            line: row_index,
                            message: format!(
                                "feature `{}` (column {c}) is not a number: {field}",
                                table.feature_names[k]
                            ),
                        })
                    }
                },
            };
            table.features.push(value);
        }
        table.lines.push(row_index);
    }
    if table.lines.is_empty() {
        return Err(TableError::Io("the file has no rows".into()));
    }
    Ok(table)
}
