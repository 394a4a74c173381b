//! `format "json"`: records as a table, keys its columns: an array of records (`.json`)
//! or one record a line (JSON Lines: `.jsonl`, `.ndjson`), plain or gzip. Read by
//! `serde_json`'s streaming deserializer a record at a time, each record's keys kept in
//! the file's order (the columns are the keys in the order they first appear). `null`
//! (or a key a record leaves out) is missing; `true` and `false` are 1 and 0; a nested
//! object or array is an error naming the record and the key. A record's place is its
//! 0-based index.

use super::TableFormat;
use crate::table::{self, Cell, FeatureCells, Hint, Layout, Table, TableError};
use manifests::formats::{FormatDescription, JSON};
use manifests::Dialect;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::io::BufRead;
use std::path::Path;

pub struct Json;

impl TableFormat for Json {
    fn describe(&self) -> &'static FormatDescription {
        &JSON
    }

    fn read(&self, path: &Path, _: &Dialect, layout: Layout<'_>) -> Result<Table, TableError> {
        let records = records(path)?;
        to_table(&records, layout)
    }

    fn peek_features(&self, path: &Path, _: &Dialect, layout: Layout<'_>) -> Option<usize> {
        // Every record is read: a key that first appears late is a column all the same.
        // Past a size, `check` leaves the shape to the run.
        let size = std::fs::metadata(path).ok()?.len();
        if size > PEEK_BYTES {
            return None;
        }
        let records = records(path).ok()?;
        to_table(&records, layout).ok()?.numeric_width(layout)
    }

    fn glance_rows(
        &self,
        path: &Path,
        _: &Dialect,
        layout: Layout<'_>,
    ) -> Result<Option<Table>, TableError> {
        // Read whole (keys may first appear late), up to the size `check` reads.
        if std::fs::metadata(path).map_or(true, |m| m.len() > PEEK_BYTES) {
            return Ok(None);
        }
        to_table(&records(path)?, layout).map(Some)
    }
}

/// The largest file `check` reads whole to know a sample's width.
const PEEK_BYTES: u64 = 16 << 20;

/// One record: its keys and values in the file's order.
struct Record(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Record, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Record;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a record (an object of keys and values)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    fields.push(entry);
                }
                Ok(Record(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// The records of an array, each handed to `each` as it is read.
struct Each<'a>(&'a mut dyn FnMut(Record));

impl<'de> DeserializeSeed<'de> for Each<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Each<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(record) = seq.next_element::<Record>()? {
            (self.0)(record);
        }
        Ok(())
    }
}

/// The records of the file: an array of records, or records one after another (JSON
/// Lines), told by the first character that is not white space.
fn records(path: &Path) -> Result<Vec<Record>, TableError> {
    let io = |e: std::io::Error| TableError::Io(e.to_string());
    let mut reader = table::open(path).map_err(io)?;
    let first = loop {
        let buffer = reader.fill_buf().map_err(io)?;
        let Some(&byte) = buffer.first() else {
            return Ok(Vec::new());
        };
        if byte.is_ascii_whitespace() {
            reader.consume(1);
        } else {
            break byte;
        }
    };
    let bad = |index: usize, e: serde_json::Error| TableError::Line {
        line: index,
        message: format!("not a record of a table: {e}"),
    };
    let mut records = Vec::new();
    if first == b'[' {
        let mut d = serde_json::Deserializer::from_reader(reader);
        let mut push = |r: Record| records.push(r);
        Each(&mut push)
            .deserialize(&mut d)
            .and_then(|()| d.end())
            .map_err(|e| bad(records.len(), e))?;
    } else {
        let stream = serde_json::Deserializer::from_reader(reader).into_iter::<Record>();
        for record in stream {
            let index = records.len();
            records.push(record.map_err(|e| bad(index, e))?);
        }
    }
    Ok(records)
}

/// The records as a table: the columns are the keys in the order they first appear.
fn to_table(records: &[Record], layout: Layout<'_>) -> Result<Table, TableError> {
    // Each key's column, so that a record is laid out in one pass over its fields.
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut names: Vec<String> = Vec::new();
    for Record(fields) in records {
        for (key, _) in fields {
            index.entry(key).or_insert_with(|| {
                names.push(key.clone());
                names.len() - 1
            });
        }
    }
    let columns = table::resolve(layout, names.len(), Some(&names))?;
    let texts = matches!(layout, Layout::Texts);
    let mut cells = FeatureCells::new(
        columns.features.iter().map(|&c| names[c].clone()).collect(),
        columns.features.clone(),
        &columns.declared,
        &columns.dated,
        match layout {
            Layout::Both { .. } => Hint::ByName,
            _ => Hint::None,
        },
    );
    let mut t = Table {
        feature_names: Vec::new(),
        features: Vec::new(),
        categorical: Vec::new(),
        dates: Vec::new(),
        columns: Vec::new(),
        label_names: columns.labels.iter().map(|&c| names[c].clone()).collect(),
        labels: vec![Vec::with_capacity(records.len()); columns.labels.len()],
        lines: (0..records.len()).collect(),
    };
    let mut laid_out: Vec<Option<&Value>> = vec![None; names.len()];
    for (row, Record(fields)) in records.iter().enumerate() {
        laid_out.fill(None);
        // A key written twice in one record: its first value.
        for (key, value) in fields.iter().rev() {
            laid_out[index[key.as_str()]] = Some(value);
        }
        let cell =
            |c: usize| -> Result<Option<&Value>, TableError> {
                match laid_out[c] {
                    Some(v @ (Value::Array(_) | Value::Object(_))) => Err(TableError::Line {
                        line: row,
                        message: format!(
                        "`{}` holds {}: a table's cell is a number, a text, true, false or null",
                        names[c],
                        if v.is_array() { "an array" } else { "an object" }
                    ),
                    }),
                    Some(Value::Null) | None => Ok(None),
                    Some(v) => Ok(Some(v)),
                }
            };
        for (k, &c) in columns.labels.iter().enumerate() {
            let text = match cell(c)? {
                None => None,
                Some(Value::String(s)) if s.is_empty() => None,
                Some(Value::String(s)) if !texts && table::is_missing(s) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Bool(b)) => Some(u8::from(*b).to_string()),
                Some(v) => Some(v.to_string()),
            };
            t.labels[k].push(text);
        }
        for (k, &c) in columns.features.iter().enumerate() {
            let written;
            let value = match cell(c)? {
                None => Cell::Missing,
                Some(Value::Number(n)) => {
                    written = n.to_string();
                    match n.as_f64() {
                        Some(v) => Cell::Number(v, &written),
                        None => Cell::Missing,
                    }
                }
                Some(Value::Bool(b)) => {
                    Cell::Number(f64::from(u8::from(*b)), if *b { "true" } else { "false" })
                }
                Some(Value::String(s)) if table::is_missing(s) => Cell::Missing,
                Some(Value::String(s)) => Cell::Text(s),
                Some(Value::Array(_) | Value::Object(_) | Value::Null) => {
                    unreachable!("refused or missing above")
                }
            };
            cells
                .push(k, value)
                .map_err(|message| TableError::Line { line: row, message })?;
        }
        cells.end_row();
    }
    let done = cells
        .finish(layout.dates())
        .map_err(|(row, message)| TableError::Line { line: row, message })?;
    t.set_features(done);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifests::Column;
    use std::io::Write;

    fn write(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// What a JSON file ignores.
    const DIALECT: Dialect = Dialect {
        delimiter: manifests::Delimiter::Auto,
        header: false,
        skip_rows: 0,
        comment: None,
    };

    fn read(path: &Path, layout: Layout<'_>) -> Result<Table, TableError> {
        Json.read(path, &DIALECT, layout)
    }

    const BOTH: Layout<'static> = Layout::Both {
        labels_are_features: false,
        label: &[Column::Last],
        features: &[],
        categorical: &[],
        dates: &[],
    };

    #[test]
    fn an_array_of_records_and_json_lines_read_alike() {
        let (_a, array) = write(
            "d.json",
            r#"[{"a": 1, "b": 2.5, "y": "cat"}, {"b": null, "a": 3, "y": "dog"}]"#,
        );
        let (_l, lines) = write(
            "d.jsonl",
            "{\"a\": 1, \"b\": 2.5, \"y\": \"cat\"}\n\n{\"b\": null, \"a\": 3, \"y\": \"dog\"}\n",
        );
        for path in [array, lines] {
            let t = read(&path, BOTH).unwrap();
            assert_eq!(t.feature_names, ["a", "b"], "{path:?}");
            assert_eq!(t.features[..3], [1.0, 2.5, 3.0]);
            assert!(t.features[3].is_nan(), "null is missing");
            assert_eq!(t.label_names, ["y"]);
            assert_eq!(t.labels[0], [Some("cat".into()), Some("dog".into())]);
            assert_eq!(t.lines, [0, 1]);
        }
    }

    #[test]
    fn gzip_is_read_and_a_late_key_is_a_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl.gz");
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&path).unwrap(),
            flate2::Compression::default(),
        );
        gz.write_all(b"{\"x\": true, \"y\": 0}\n{\"x\": false, \"z\": 4, \"y\": 1}\n")
            .unwrap();
        gz.finish().unwrap();
        let t = read(
            &path,
            Layout::Both {
                labels_are_features: false,
                label: &[Column::Name("y".into())],
                features: &[],
                categorical: &[],
                dates: &[],
            },
        )
        .unwrap();
        assert_eq!(t.feature_names, ["x", "z"]);
        assert_eq!(t.features[..1], [1.0]);
        assert!(t.features[1].is_nan(), "a key left out is missing");
        assert_eq!(t.features[2..], [0.0, 4.0]);
        assert_eq!(
            Json.peek_features(
                &path,
                &DIALECT,
                Layout::Both {
                    labels_are_features: false,
                    label: &[Column::Name("y".into())],
                    features: &[],
                    categorical: &[],
                    dates: &[],
                }
            ),
            Some(2)
        );
    }

    #[test]
    fn a_nested_value_a_text_feature_and_broken_json_are_located() {
        let (_d, nested) = write(
            "n.jsonl",
            "{\"a\": 1, \"y\": 0}\n{\"a\": [1, 2], \"y\": 1}\n",
        );
        let text = |e: TableError| match e {
            TableError::Line { line, message } => format!("{line}: {message}"),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            text(read(&nested, BOTH).unwrap_err()),
            "1: `a` holds an array: a table's cell is a number, a text, true, false or null"
        );
        let (_t, words) = write("t.json", r#"[{"a": 1, "y": 0}, {"a": "tall", "y": 1}]"#);
        assert_eq!(
            text(read(&words, BOTH).unwrap_err()),
            "1: feature `a` (column 0) is not a number: `tall`, and the rows above hold numbers in it; if the column holds categories, name it: `categorical \"a\"`"
        );
        // A column of text is categorical; a number in it, the category written.
        let (_c, kinds) = write(
            "c.json",
            r#"[{"a": "tall", "b": 2, "y": 0}, {"a": 3, "b": null, "y": 1}]"#,
        );
        let t = read(&kinds, BOTH).unwrap();
        assert_eq!(t.feature_names, ["b"]);
        assert_eq!(t.categorical[0].values, ["tall", "3"]);
        let (_b, broken) = write("b.json", r#"[{"a": 1, "y": 0}, {"a": 2,"#);
        assert!(text(read(&broken, BOTH).unwrap_err()).starts_with("1: not a record of a table: "),);
    }
}
