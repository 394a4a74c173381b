//! Parquet files (`data.format "parquet"`, `.parquet`) read into the same [`Table`] as
//! CSV, through the Apache Arrow project's `parquet` crate, so that any encoding and
//! compression pandas or pyarrow write is decoded by the reference implementation.
//! Columns are chosen by the same `label` and `features` keys (names, indices, ranges,
//! over the top-level columns); a null is a missing value. The columns pandas stores its
//! index in (`df.to_parquet()` after a filter or a sort writes `__index_level_0__` last)
//! are not data, and are left out. `check` reads the footer, and the first rows to say
//! what the run makes of the columns ([`glance_rows`]).
//!
//! Numeric features are read by the typed column readers, [`COLUMNS_AT_ONCE`] columns at
//! a time, row group by row group, a chunk of rows at a time ([`read_feature_group`]):
//! memory holds those columns' pages and one chunk, whatever the file's size, which is
//! how a streamed data set (`data.load "stream"`) is decoded. Their values become float32
//! as `torch.tensor(df.to_numpy()).float()` makes them (through float64: integers,
//! unsigned ones as unsigned, booleans as 0 and 1, float16). Labels, feature columns of
//! text (categories) and of dates or timestamps (their parts, in the column's place) are
//! read by the row reader; such a file is read whole into memory, not streamed.

use crate::categorical::Categories;
use crate::dates::Found;
use crate::table::{is_missing, resolve, twice_named, Layout, Table, TableError, GLANCE_ROWS};
use manifests::Column;
use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::DataType;
use parquet::file::reader::{FileReader, RowGroupReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::Type;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// What [`Numeric::of`] says a column of text holds.
const TEXT: &str = "text";

/// What [`Numeric::of`] says a column of dates or timestamps holds.
const DATES: &str = "dates";

/// The values of a chunk of rows read at once (all feature columns together).
const CHUNK_VALUES: usize = 1 << 20;

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
    if let Some(message) = twice_named(&columns.names, "the schema") {
        return Err(TableError::Columns(message));
    }
    Ok((reader, columns))
}

/// What `check` can tell about a Parquet file from its footer alone, as the run would
/// refuse it: a file that is not Parquet (empty, cut short: no footer), a nested or
/// twice-named column, row groups that do not hold the rows the footer says, or column
/// data past the end of the file.
pub fn footer_problem(path: &Path) -> Result<(), TableError> {
    let (reader, data) = open(path)?;
    let length = std::fs::metadata(path)
        .map_err(|e| TableError::Io(e.to_string()))?
        .len();
    let metadata = reader.metadata();
    let rows = metadata.file_metadata().num_rows();
    let grouped: i64 = metadata.row_groups().iter().map(|g| g.num_rows()).sum();
    if grouped != rows || rows < 0 {
        return Err(TableError::Io(format!(
            "its row groups hold {grouped} rows, and its footer says {rows}"
        )));
    }
    for (r, group) in metadata.row_groups().iter().enumerate() {
        for (c, column) in group.columns().iter().enumerate() {
            let (start, len) = column.byte_range();
            if start.checked_add(len).is_none_or(|end| end > length) {
                let name = data
                    .positions
                    .iter()
                    .position(|&p| p == c)
                    .map_or_else(|| column.column_path().string(), |i| data.names[i].clone());
                return Err(TableError::Io(format!(
                    "row group {r}: column `{name}` lies past the end of the file ({length} bytes): is it cut short?"
                )));
            }
        }
    }
    Ok(())
}

/// How many features a sample has, from the schema alone: `None` when a column of text
/// (or one named by `categorical`) is one-hot, whose width its values decide.
pub fn peek_features(path: &Path, layout: Layout<'_>) -> Option<usize> {
    let (reader, data) = open(path).ok()?;
    let columns = resolve(layout, data.names.len(), Some(&data.names)).ok()?;
    let split = Split::of(&reader, &data, &columns, layout);
    let declared = match layout {
        Layout::Both { categorical, .. } => categorical,
        _ => &[],
    };
    let one_hot = split.categorical.iter().any(|&k| {
        columns.declared[k]
            .is_none_or(|node| declared[node].encoding == manifests::Encoding::OneHot)
    });
    (!one_hot).then_some(split.numeric.len())
}

/// The feature columns of a file split by what they hold: numbers, or categories (a
/// column of text, or one a `categorical` node names), as indices among the features.
struct Split {
    numeric: Vec<usize>,
    categorical: Vec<usize>,
    /// Columns of dates (typed, or text a `date` node names), each with whether its
    /// values are nanoseconds (read as plain integers).
    dated: Vec<(usize, bool)>,
}

impl Split {
    fn of(
        reader: &SerializedFileReader<File>,
        data: &Columns,
        columns: &crate::table::Columns,
        layout: Layout<'_>,
    ) -> Split {
        let schema = reader.metadata().file_metadata().schema_descr();
        let mut split = Split {
            numeric: Vec::new(),
            categorical: Vec::new(),
            dated: Vec::new(),
        };
        // A labels file's or another file's features alone are read as they are.
        let both = matches!(layout, Layout::Both { .. });
        for (k, &c) in columns.features.iter().enumerate() {
            let column = schema.column(data.positions[c]);
            let holds = Numeric::of(&column).err();
            let nanos = matches!(
                column.logical_type_ref(),
                Some(LogicalType::Timestamp(t)) if t.unit == parquet::basic::TimeUnit::NANOS
            );
            if both && (holds.as_deref() == Some(DATES) || columns.dated[k].is_some()) {
                split.dated.push((k, nanos));
            } else if both && (holds.as_deref() == Some(TEXT) || columns.declared[k].is_some()) {
                split.categorical.push(k);
            } else {
                split.numeric.push(k);
            }
        }
        split
    }
}

/// The rows and feature columns of a file, from its footer alone: what a streamed data
/// set is sized by. Refused for columns of text and dates, which are read into memory.
pub fn shape(path: &Path, layout: Layout<'_>) -> Result<(usize, usize), TableError> {
    let (reader, data) = open(path)?;
    let columns = resolve(layout, data.names.len(), Some(&data.names))?;
    let dated = matches!(layout, Layout::Both { dates, .. } if !dates.is_empty());
    if dated
        || !Split::of(&reader, &data, &columns, layout)
            .categorical
            .is_empty()
    {
        return Err(TableError::Columns(
            "a Parquet file's columns of text (categories) and dates are read into memory, not streamed: `load \"memory\"`, or encode them as numbers before saving the file".into(),
        ));
    }
    let rows = reader.metadata().file_metadata().num_rows().max(0) as usize;
    Ok((rows, columns.features.len()))
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

/// A cell of a column of dates as a date-time (UTC for timestamps), `None` when null or
/// a missing marker; text is read as a CSV's dates are (`2024-03-01`, …).
fn date_of(field: &Field, nanos: bool) -> Result<Option<chrono::NaiveDateTime>, String> {
    use chrono::DateTime;
    let instant = |t: Option<DateTime<chrono::Utc>>| {
        t.map(|t| t.naive_utc())
            .ok_or("a timestamp out of range".to_string())
    };
    Ok(Some(match field {
        Field::Null => return Ok(None),
        Field::Date(days) => instant(DateTime::from_timestamp(i64::from(*days) * 86_400, 0))?,
        Field::TimestampMillis(ms) => instant(DateTime::from_timestamp_millis(*ms))?,
        Field::TimestampMicros(us) => instant(DateTime::from_timestamp_micros(*us))?,
        Field::Long(ns) if nanos => DateTime::from_timestamp_nanos(*ns).naive_utc(),
        Field::Str(s) if is_missing(s.trim()) => return Ok(None),
        Field::Str(s) => {
            crate::dates::parse(s).ok_or_else(|| format!("`{}` is not a date", s.escape_debug()))?
        }
        other => return Err(format!("{other} is not a date")),
    }))
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

/// How a feature column's stored values are numbers: its physical type with the
/// annotation that says how to read it (an `INT32` may hold unsigned bytes).
#[derive(Debug, Clone, Copy)]
enum Numeric {
    Bool,
    I32(fn(i32) -> f64),
    I64(fn(i64) -> f64),
    F32,
    F64,
    F16,
}

impl Numeric {
    /// The column's reading, or what it holds instead of numbers.
    fn of(column: &parquet::schema::types::ColumnDescriptor) -> Result<Numeric, String> {
        let converted = column.converted_type();
        // A timestamp of nanoseconds is an INT64 without a converted type: told by its
        // logical type, before it would be read as a number.
        let dated = matches!(
            column.logical_type_ref(),
            Some(LogicalType::Date | LogicalType::Timestamp(_))
        ) || matches!(
            converted,
            ConvertedType::DATE | ConvertedType::TIMESTAMP_MILLIS | ConvertedType::TIMESTAMP_MICROS
        ) || column.physical_type() == Physical::INT96;
        if dated {
            return Err(DATES.into());
        }
        Ok(match (column.physical_type(), converted) {
            (Physical::BOOLEAN, _) => Numeric::Bool,
            (Physical::INT32, ConvertedType::NONE | ConvertedType::INT_32) => {
                Numeric::I32(f64::from)
            }
            (Physical::INT32, ConvertedType::INT_8) => Numeric::I32(|v| f64::from(v as i8)),
            (Physical::INT32, ConvertedType::INT_16) => Numeric::I32(|v| f64::from(v as i16)),
            (Physical::INT32, ConvertedType::UINT_8) => Numeric::I32(|v| f64::from(v as u8)),
            (Physical::INT32, ConvertedType::UINT_16) => Numeric::I32(|v| f64::from(v as u16)),
            (Physical::INT32, ConvertedType::UINT_32) => Numeric::I32(|v| f64::from(v as u32)),
            (Physical::INT64, ConvertedType::NONE | ConvertedType::INT_64) => {
                Numeric::I64(|v| v as f64)
            }
            (Physical::INT64, ConvertedType::UINT_64) => Numeric::I64(|v| v as u64 as f64),
            (Physical::FLOAT, _) => Numeric::F32,
            (Physical::DOUBLE, _) => Numeric::F64,
            (Physical::FIXED_LEN_BYTE_ARRAY, ConvertedType::NONE)
                if column.logical_type_ref() == Some(&LogicalType::Float16) =>
            {
                Numeric::F16
            }
            (Physical::BYTE_ARRAY, ConvertedType::NONE | ConvertedType::UTF8) => {
                return Err(TEXT.into())
            }
            (physical, ConvertedType::NONE) => return Err(format!("{physical} values")),
            (_, converted) => return Err(format!("{converted} values")),
        })
    }
}

/// One feature column being read: its reader in the current row group, how its values
/// are numbers, and the definition level of a present value (0: none can be null).
struct FeatureColumn {
    reader: ColumnReader,
    numeric: Numeric,
    present: i16,
}

/// Reads the next `rows` records of `reader` into column `k` of `out` (rows × `width`,
/// row-major), NaN where null.
#[allow(clippy::too_many_arguments)]
fn fill<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    rows: usize,
    present: i16,
    levels: &mut Vec<i16>,
    values: &mut Vec<T::T>,
    out: &mut [f32],
    width: usize,
    k: usize,
    convert: impl Fn(&T::T) -> f32,
) -> Result<(), String> {
    levels.clear();
    values.clear();
    let mut done = 0;
    while done < rows {
        let levels = (present > 0).then_some(&mut *levels);
        let (records, _, _) = reader
            .read_records(rows - done, levels, None, values)
            .map_err(|e| e.to_string())?;
        if records == 0 {
            return Err("the column ends before the row group's last row".into());
        }
        done += records;
    }
    let mut next = values.iter();
    for r in 0..rows {
        let value = match present > 0 && levels[r] < present {
            true => f32::NAN,
            false => convert(
                next.next()
                    .ok_or("a column has fewer values than its levels say")?,
            ),
        };
        out[r * width + k] = value;
    }
    Ok(())
}

impl FeatureColumn {
    /// Column `k` of the next `rows` rows into `out`.
    fn read(&mut self, rows: usize, out: &mut [f32], width: usize, k: usize) -> Result<(), String> {
        let mut levels = Vec::with_capacity(rows);
        let present = self.present;
        macro_rules! read {
            ($r:expr, $convert:expr) => {
                fill(
                    $r,
                    rows,
                    present,
                    &mut levels,
                    &mut Vec::with_capacity(rows),
                    out,
                    width,
                    k,
                    $convert,
                )
            };
        }
        match (&mut self.reader, self.numeric) {
            (ColumnReader::BoolColumnReader(r), Numeric::Bool) => {
                read!(r, |&v: &bool| f32::from(u8::from(v)))
            }
            (ColumnReader::Int32ColumnReader(r), Numeric::I32(f)) => read!(r, |&v| f(v) as f32),
            (ColumnReader::Int64ColumnReader(r), Numeric::I64(f)) => read!(r, |&v| f(v) as f32),
            (ColumnReader::FloatColumnReader(r), Numeric::F32) => read!(r, |&v| v),
            (ColumnReader::DoubleColumnReader(r), Numeric::F64) => read!(r, |&v| v as f32),
            (ColumnReader::FixedLenByteArrayColumnReader(r), Numeric::F16) => {
                read!(r, |v: &parquet::data_type::FixedLenByteArray| {
                    match v.data() {
                        &[a, b] => half::f16::from_le_bytes([a, b]).to_f32(),
                        _ => f32::NAN,
                    }
                })
            }
            _ => Err("the column's values are not of the type its schema says".into()),
        }
    }
}

/// The names of the feature columns of a file read by [`read_features`], and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureColumns {
    pub names: Vec<String>,
    pub rows: usize,
}

/// Feature columns read together. Each column being read holds its current page and its
/// dictionary (about 1 MiB each as pyarrow writes them), so reading a thousand columns at
/// once would hold gigabytes: they are read this many at a time, by
/// [`read_feature_group`].
pub const COLUMNS_AT_ONCE: usize = 32;

/// Values of some rows of some feature columns, as [`read_feature_group`] gives them.
#[derive(Debug)]
pub struct Block<'a> {
    /// The first row.
    pub row: usize,
    /// The feature columns (indices among the features).
    pub columns: std::ops::Range<usize>,
    /// Row-major, rows × columns; NaN where a value is null.
    pub values: &'a [f32],
}

/// The feature columns `layout` chooses, checked to hold numbers, and the file's rows;
/// with the groups of at most [`COLUMNS_AT_ONCE`] columns [`read_feature_group`] reads.
pub fn feature_groups(
    path: &Path,
    layout: Layout<'_>,
) -> Result<(FeatureColumns, Vec<std::ops::Range<usize>>), TableError> {
    let features = Features::open(path, layout)?;
    let width = features.numerics.len();
    let groups = (0..width)
        .step_by(COLUMNS_AT_ONCE)
        .map(|c| c..(c + COLUMNS_AT_ONCE).min(width))
        .collect();
    Ok((features.columns, groups))
}

/// Reads the feature columns `group` (a range of [`feature_groups`]) over every row group,
/// a chunk of rows at a time, each chunk given to `each` in row order. The file is
/// opened anew, so that groups may be read on several threads at once.
pub fn read_feature_group(
    path: &Path,
    layout: Layout<'_>,
    group: std::ops::Range<usize>,
    each: impl FnMut(Block<'_>) -> Result<(), TableError>,
) -> Result<(), TableError> {
    read_feature_rows(path, layout, group, usize::MAX, each)
}

/// [`read_feature_group`] of the first `until` rows (or a few more: whole chunks).
fn read_feature_rows(
    path: &Path,
    layout: Layout<'_>,
    group: std::ops::Range<usize>,
    until: usize,
    mut each: impl FnMut(Block<'_>) -> Result<(), TableError>,
) -> Result<(), TableError> {
    let features = Features::open(path, layout)?;
    let numerics = &features.numerics[group.clone()];
    let width = numerics.len();
    let chunk = (CHUNK_VALUES / width.max(1)).max(1);
    let reader = &features.reader;
    let mut values = Vec::new();
    let mut first = 0;
    for r in 0..reader.num_row_groups() {
        if first >= until {
            break;
        }
        let row_group = reader
            .get_row_group(r)
            .map_err(|e| TableError::Io(format!("row group {r}: {e}")))?;
        let in_group = row_group.metadata().num_rows().max(0) as usize;
        let mut readers = open_columns(&*row_group, numerics)
            .map_err(|e| TableError::Io(format!("row group {r}: {e}")))?;
        let mut done = 0;
        while done < in_group && first + done < until {
            let n = chunk.min(in_group - done);
            values.clear();
            values.resize(n * width, 0f32);
            for (k, column) in readers.iter_mut().enumerate() {
                column
                    .read(n, &mut values, width, k)
                    .map_err(|message| TableError::Line {
                        line: first + done,
                        message: format!(
                            "cannot read feature `{}`: {message}",
                            features.columns.names[group.start + k]
                        ),
                    })?;
            }
            each(Block {
                row: first + done,
                columns: group.clone(),
                values: &values,
            })?;
            done += n;
        }
        first += in_group;
    }
    Ok(())
}

/// Reads every feature column of the first `until` rows (or a few more), group after
/// group ([`read_feature_group`]).
fn read_features(
    path: &Path,
    layout: Layout<'_>,
    until: usize,
    mut each: impl FnMut(Block<'_>) -> Result<(), TableError>,
) -> Result<FeatureColumns, TableError> {
    let (columns, groups) = feature_groups(path, layout)?;
    for group in groups {
        read_feature_rows(path, layout, group, until, &mut each)?;
    }
    Ok(columns)
}

/// A file opened to read its feature columns.
struct Features {
    reader: SerializedFileReader<File>,
    columns: FeatureColumns,
    /// Per feature: its column among the file's, how it is read, its present level.
    numerics: Vec<(usize, Numeric, i16)>,
}

impl Features {
    /// Opens the file, checking that the features hold numbers and that the row groups
    /// hold the rows the footer says.
    fn open(path: &Path, layout: Layout<'_>) -> Result<Features, TableError> {
        let (reader, data) = open(path)?;
        let columns = resolve(layout, data.names.len(), Some(&data.names))?;
        let schema = reader.metadata().file_metadata().schema_descr();
        let mut numerics = Vec::with_capacity(columns.features.len());
        for &c in &columns.features {
            let column = schema.column(data.positions[c]);
            let numeric = Numeric::of(&column).map_err(|what| {
                TableError::Columns(format!(
                    "feature `{}` (column {c}) holds {what}, not numbers: leave it out of `features`, or convert it before saving",
                    data.names[c]
                ))
            })?;
            numerics.push((data.positions[c], numeric, column.max_def_level()));
        }
        let rows = reader.metadata().file_metadata().num_rows();
        let grouped: i64 = reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .sum();
        if grouped != rows || rows < 0 {
            return Err(TableError::Io(format!(
                "its row groups hold {grouped} rows, and its footer says {rows}"
            )));
        }
        let names = columns.features.iter().map(|&i| data.names[i].clone());
        Ok(Features {
            reader,
            columns: FeatureColumns {
                names: names.collect(),
                rows: rows as usize,
            },
            numerics,
        })
    }
}

/// The feature columns' readers in one row group.
fn open_columns(
    group: &dyn RowGroupReader,
    numerics: &[(usize, Numeric, i16)],
) -> parquet::errors::Result<Vec<FeatureColumn>> {
    numerics
        .iter()
        .map(|&(position, numeric, present)| {
            Ok(FeatureColumn {
                reader: group.get_column_reader(position)?,
                numeric,
                present,
            })
        })
        .collect()
}

/// The label columns of a file: their names, and per column one cell per row, as text
/// (`None` where null).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelColumns {
    pub names: Vec<String>,
    pub cells: Vec<Vec<Option<String>>>,
}

/// The label columns `layout` chooses (none for [`Layout::Features`]), read by the row
/// reader over those columns only.
pub fn read_labels(path: &Path, layout: Layout<'_>) -> Result<LabelColumns, TableError> {
    let (reader, data) = open(path)?;
    let names = &data.names;
    let columns = resolve(layout, names.len(), Some(names))?;
    let label_names: Vec<String> = columns.labels.iter().map(|&i| names[i].clone()).collect();
    let labels = cells_of(&reader, &data, &columns.labels, usize::MAX)?;
    Ok(LabelColumns {
        names: label_names,
        cells: labels,
    })
}

/// The cells of the file's columns `wanted` (indices among its data columns), read by
/// the row reader over those columns only: per column one cell per row, as text (`None`
/// where null).
fn cells_of(
    reader: &SerializedFileReader<File>,
    data: &Columns,
    wanted: &[usize],
    until: usize,
) -> Result<Vec<Vec<Option<String>>>, TableError> {
    fields_of(reader, data, wanted, until, |_, _, field| text(field))
}

/// The cells of the columns `wanted`, each made into a `T` by `convert` (given the
/// column's place in `wanted`, the row and the cell).
fn fields_of<T: Clone>(
    reader: &SerializedFileReader<File>,
    data: &Columns,
    wanted: &[usize],
    until: usize,
    convert: impl Fn(usize, usize, &Field) -> Result<T, TableError>,
) -> Result<Vec<Vec<T>>, TableError> {
    let mut cells = vec![Vec::new(); wanted.len()];
    if wanted.is_empty() {
        return Ok(cells);
    }
    // The projection keeps the file's order; each column finds its field by position.
    let mut positions: Vec<usize> = wanted.iter().map(|&c| data.positions[c]).collect();
    positions.sort_unstable();
    let root = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema();
    let fields: Vec<Arc<Type>> = positions
        .iter()
        .map(|&p| root.get_fields()[p].clone())
        .collect();
    let projection = Type::group_type_builder(root.name())
        .with_fields(fields)
        .build()
        .map_err(|e| TableError::Io(e.to_string()))?;
    let at: Vec<usize> = wanted
        .iter()
        .map(|&c| {
            let p = data.positions[c];
            positions.iter().position(|&q| q == p).expect("projected")
        })
        .collect();
    let rows = reader
        .get_row_iter(Some(projection))
        .map_err(|e| TableError::Io(e.to_string()))?;
    for (row_index, row) in rows.enumerate().take(until) {
        let row = row.map_err(|e| TableError::Line {
            line: row_index,
            message: format!("cannot read the row: {e}"),
        })?;
        let fields: Vec<&Field> = row.get_column_iter().map(|(_, f)| f).collect();
        for (k, &a) in at.iter().enumerate() {
            let field = fields.get(a).ok_or_else(|| TableError::Line {
                line: row_index,
                message: format!("the row has no column `{}`", data.names[wanted[k]]),
            })?;
            cells[k].push(convert(k, row_index, field)?);
        }
    }
    Ok(cells)
}

/// Reads the whole table; `Table::lines` holds each row's 0-based index. Feature columns
/// of text (and those a `categorical` node names) are read as categories by the row
/// reader, a null or a missing marker (`NA`, …) missing; the others as numbers.
pub fn read(path: &Path, layout: Layout<'_>) -> Result<Table, TableError> {
    read_rows(path, layout, usize::MAX)
}

/// The first rows of the table, for `check` ([`GLANCE_ROWS`] of them: what the run
/// will make of its columns); `None` when it has none.
pub fn glance_rows(path: &Path, layout: Layout<'_>) -> Result<Option<Table>, TableError> {
    match read_rows(path, layout, GLANCE_ROWS) {
        Err(TableError::Io(m)) if m == NO_ROWS => Ok(None),
        other => other.map(Some),
    }
}

/// The columns of text no node names that hold dates, found as a CSV's are
/// ([`crate::dates::found_in`]), moved from `split`'s categories (`categorical`, read in
/// `split.categorical`'s order) to its dates, which give their parts.
fn dates_among_texts(
    split: &mut Split,
    categorical: &mut Vec<Categories>,
) -> Result<(), TableError> {
    let mut j = 0;
    while j < categorical.len() {
        let column = &categorical[j];
        let found = match column.declared {
            Some(_) => Found::Categories,
            None => crate::dates::found_in(column),
        };
        match found {
            Found::Categories => j += 1,
            Found::MostlyDates(row) => {
                return Err(TableError::Line {
                    line: row,
                    message: format!(
                        "feature `{}` holds dates: `{}` is not a date (`2024-03-01`, `2024/03/01`, `2024-03-01 12:30:00`, ISO 8601)",
                        column.name,
                        column.value(row).unwrap_or_default()
                    ),
                });
            }
            Found::Dates(_) => {
                split.dated.push((split.categorical.remove(j), false));
                categorical.remove(j);
            }
        }
    }
    split.dated.sort_unstable();
    Ok(())
}

/// Why a file with no rows is refused.
const NO_ROWS: &str = "the file has no rows";

/// [`read`] of the first `until` rows.
fn read_rows(path: &Path, layout: Layout<'_>, until: usize) -> Result<Table, TableError> {
    let (reader, data) = open(path)?;
    let columns = resolve(layout, data.names.len(), Some(&data.names))?;
    let label_names: Vec<String> = columns
        .labels
        .iter()
        .map(|&i| data.names[i].clone())
        .collect();
    let labels = cells_of(&reader, &data, &columns.labels, until)?;
    let mut split = Split::of(&reader, &data, &columns, layout);
    let rows = (reader.metadata().file_metadata().num_rows().max(0) as usize).min(until);
    let wanted: Vec<usize> = split
        .categorical
        .iter()
        .map(|&k| columns.features[k])
        .collect();
    let cells = cells_of(&reader, &data, &wanted, until)?;
    let mut categorical = Vec::with_capacity(wanted.len());
    for ((&c, cells), &k) in wanted.iter().zip(cells).zip(&split.categorical) {
        let mut column = Categories::new(data.names[c].clone(), c);
        column.declared = columns.declared[k];
        for cell in &cells {
            let cell = cell.as_deref().map(str::trim);
            column.push(cell.filter(|c| !is_missing(c)));
        }
        categorical.push(column);
    }
    dates_among_texts(&mut split, &mut categorical)?;
    let numeric: Vec<Column> = split
        .numeric
        .iter()
        .map(|&k| Column::Index(columns.features[k]))
        .collect();
    // The numbers and the dates' parts in the features' order (a date's parts in its
    // place, as a CSV's), the categories after them: each one's first place.
    let declared_dates = match layout {
        Layout::Both { dates, .. } => dates,
        _ => &[],
    };
    let parts_of = |k: usize| -> Vec<manifests::DatePart> {
        columns.dated[k].map_or(manifests::DEFAULT_DATE_PARTS.to_vec(), |node| {
            declared_dates[node].parts.clone()
        })
    };
    let mut feature_names = Vec::new();
    let mut place = vec![0; columns.features.len()];
    for (k, &c) in columns.features.iter().enumerate() {
        place[k] = feature_names.len();
        if split.numeric.contains(&k) {
            feature_names.push(data.names[c].clone());
        } else if split.dated.iter().any(|&(d, _)| d == k) {
            feature_names.extend(crate::dates::names(&data.names[c], &parts_of(k)));
        }
    }
    let width = feature_names.len();
    let mut features = vec![0f32; rows * width];
    // (`Layout::Features` of no column would be every column.)
    if !numeric.is_empty() {
        read_features(path, Layout::Features(&numeric), until, |block| {
            let values = block.values.chunks_exact(block.columns.len());
            for (r, values) in values.enumerate().take(rows.saturating_sub(block.row)) {
                let row = (block.row + r) * width;
                for (j, &v) in block.columns.clone().zip(values) {
                    features[row + place[split.numeric[j]]] = v;
                }
            }
            Ok(())
        })?;
    }
    let dated: Vec<usize> = split
        .dated
        .iter()
        .map(|&(k, _)| columns.features[k])
        .collect();
    let times = fields_of(&reader, &data, &dated, until, |j, row, field| {
        let (k, nanos) = split.dated[j];
        date_of(field, nanos).map_err(|why| TableError::Line {
            line: row,
            message: format!("`{}`: {why}", data.names[columns.features[k]]),
        })
    })?;
    let mut dates = Vec::with_capacity(dated.len());
    for (&(k, _), times) in split.dated.iter().zip(times) {
        let parts = parts_of(k);
        for (r, t) in times.iter().enumerate() {
            for (p, &part) in parts.iter().enumerate() {
                features[r * width + place[k] + p] =
                    t.as_ref().map_or(f32::NAN, |t| crate::dates::part(t, part));
            }
        }
        dates.push((data.names[columns.features[k]].clone(), parts));
    }
    if rows == 0 {
        return Err(TableError::Io(NO_ROWS.into()));
    }
    if let Some(short) = labels.iter().find(|l| l.len() != rows) {
        return Err(TableError::Io(format!(
            "the labels have {} rows and the features {}",
            short.len(),
            rows
        )));
    }
    Ok(Table {
        columns: columns
            .features
            .iter()
            .map(|&c| data.names[c].clone())
            .collect(),
        feature_names,
        features,
        categorical,
        dates,
        label_names,
        labels,
        lines: (0..rows).collect(),
    })
}
