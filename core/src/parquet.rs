//! Parquet files (`data.format "parquet"`, `.parquet`) read into the same [`Table`] as
//! CSV, through the Apache Arrow project's `parquet` crate: its row reader, so that any
//! physical type, encoding and compression pandas or pyarrow write is decoded by the
//! reference implementation. Columns are chosen by the same `label` and `features` keys
//! (names, indices, ranges, over the top-level columns); a null is a missing value.
//! The columns pandas stores its index in (`df.to_parquet()` after a filter or a sort
//! writes `__index_level_0__` last) are not data, and are left out. `check` reads the
//! schema only, from the file's footer.

use crate::table::{resolve, Layout, Table, TableError};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use std::fs::File;
use std::path::Path;

/// The file's data columns: their names, and where each is among the file's columns.
struct Columns {
    names: Vec<String>,
    positions: Vec<usize>,
}

/// The columns pandas wrote its index to, from the file's `pandas` metadata.
fn pandas_index(reader: &SerializedFileReader<File>) -> Vec<String> {
    let metadata = reader.metadata().file_metadata().key_value_metadata();
    let Some(pandas) = metadata
        .into_iter()
        .flatten()
        .find(|kv| kv.key == "pandas")
        .and_then(|kv| kv.value.as_deref())
    else {
        return Vec::new();
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(pandas) else {
        return Vec::new();
    };
    // A RangeIndex is described (`{"kind": "range", …}`), not stored: no column.
    json["index_columns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect()
}

/// The file's reader and its data columns; a nested column (a list, a map, a struct) is
/// refused, naming it.
fn open(path: &Path) -> Result<(SerializedFileReader<File>, Columns), TableError> {
    let file = File::open(path).map_err(|e| TableError::Io(e.to_string()))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| TableError::Io(format!("not a readable Parquet file: {e}")))?;
    let index = pandas_index(&reader);
    let schema = reader.metadata().file_metadata().schema_descr();
    let mut columns = Columns {
        names: Vec::new(),
        positions: Vec::new(),
    };
    for (position, field) in schema.root_schema().get_fields().iter().enumerate() {
        if index.iter().any(|i| i == field.name()) {
            continue;
        }
        if field.is_group() {
            return Err(TableError::Columns(format!(
                "column `{}` is nested (a list, map or struct); only flat columns of numbers or text can be read",
                field.name()
            )));
        }
        columns.names.push(field.name().to_string());
        columns.positions.push(position);
    }
    Ok((reader, columns))
}

/// How many features a sample has, from the schema alone.
pub fn peek_features(path: &Path, layout: Layout<'_>) -> Option<usize> {
    let (_, data) = open(path).ok()?;
    let columns = resolve(layout, data.names.len(), Some(&data.names)).ok()?;
    Some(columns.features.len())
}

/// A cell as a label's text, `None` when null; a type that is neither a number nor text
/// (a date, a decimal) is refused rather than read as missing.
fn text(field: &Field) -> Result<Option<String>, TableError> {
    Ok(match field {
        Field::Null => None,
        Field::Str(s) => Some(s.clone()),
        Field::Bytes(b) => Some(String::from_utf8_lossy(b.data()).into_owned()),
        other => match number(other) {
            Some(v) => Some(v.to_string()),
            None => {
                return Err(TableError::Columns(format!(
                    "a label is {other}, neither a number nor text: convert the column before saving it"
                )))
            }
        },
    })
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
    let (reader, data) = open(path)?;
    let names = &data.names;
    let columns = resolve(layout, names.len(), Some(names))?;
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
        let field = |c: usize| {
            fields
                .get(data.positions[c])
                .copied()
                .ok_or_else(|| TableError::Line {
                    line: row_index,
                    message: format!("the row has no column `{}`", names[c]),
                })
        };
        for (k, &c) in columns.labels.iter().enumerate() {
            table.labels[k].push(text(field(c)?)?);
        }
        for (k, &c) in columns.features.iter().enumerate() {
            let value = match field(c)? {
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
