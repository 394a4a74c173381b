//! Tabular text files as they really are (`data.delimiter`, `header`, `skip-rows`,
//! `comment`, quoted fields, plain or gzip), read into features and label cells, naming
//! the file's line of every problem. No libtorch: `check` peeks at the first row with
//! the same reader the run loads the data with.
//!
//! Fields are split by the `csv` crate (quoting, comments); `whitespace` splits on runs
//! of spaces and tabs, as `np.loadtxt` does. A missing value (an empty field, or one of
//! pandas' markers `NA`, `N/A`, `NaN`, `nan`, `null`, `NULL`, `None`, `<NA>`, `#N/A`,
//! and `?`) becomes NaN in a feature and `None` in a label: what `data.missing` does
//! with it is the loader's choice.

use crate::categorical::Categories;
use crate::dates::Found;
use chrono::NaiveDateTime;
use flate2::read::MultiGzDecoder;
use manifests::{
    CategoricalSpec, Column, DataFormat, DataSpec, DatePart, DateSpec, Delimiter, Diagnostic,
    Dialect, DEFAULT_DATE_PARTS,
};
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::Path;

/// The markers of a missing value (after trimming), besides the empty field.
pub const MISSING: &[&str] = &[
    "NA", "N/A", "n/a", "NaN", "nan", "-nan", "null", "NULL", "None", "<NA>", "#N/A", "?",
];

/// Lines read to tell the delimiter (`auto`).
const SNIFF_LINES: usize = 32;

/// The most bytes `check` reads looking for the first row.
const PEEK_BYTES: u64 = 4 << 20;

/// Which columns are read as what.
#[derive(Debug, Clone, Copy)]
pub enum Layout<'a> {
    /// Labels and features in one file: `label` columns, and `features` (empty: every
    /// other column).
    Both {
        label: &'a [Column],
        features: &'a [Column],
        /// Feature columns read as categories from the first row (`data.categorical`);
        /// a column whose first value is text is one without being named.
        categorical: &'a [CategoricalSpec],
        /// Feature columns of dates (`data.date`); a column of text whose every value is
        /// a date is one without being named.
        dates: &'a [DateSpec],
        /// A label column may be a feature too: windows of a series read the label's
        /// past values to predict a later one (`data.window` with a horizon).
        labels_are_features: bool,
    },
    /// Features only (the labels are in another file): `features`, empty for all.
    Features(&'a [Column]),
    /// Every column as text, as written: only an empty field is missing (a text may
    /// well say `null` or `NA`).
    Texts,
    /// Labels only: every column is one.
    Labels,
}

impl<'a> Layout<'a> {
    /// The `date` nodes of the data it reads.
    pub fn dates(self) -> &'a [DateSpec] {
        match self {
            Layout::Both { dates, .. } => dates,
            _ => &[],
        }
    }

    /// Which columns of a table `source` are labels (none with a labels file), which
    /// features, and which of those are declared categorical.
    pub fn of(spec: &'a manifests::DataSpec) -> Layout<'a> {
        Layout::Both {
            labels_are_features: spec.window.as_ref().is_some_and(|w| w.horizon > 0),
            label: match spec.labels_file {
                Some(_) => &[],
                None => &spec.label,
            },
            features: &spec.features,
            categorical: &spec.categorical,
            dates: &spec.dates,
        }
    }
}

/// The numbers of a table, and its label cells as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The numeric feature columns' names: the header's, or `column N` (0-based).
    pub feature_names: Vec<String>,
    /// Row-major, rows × numeric features; NaN where a value is missing.
    pub features: Vec<f32>,
    /// The categorical feature columns, in the order of the features chosen.
    pub categorical: Vec<Categories>,
    /// The columns of dates, each with the parts it gives (among the numeric features,
    /// in its place).
    pub dates: Vec<(String, Vec<DatePart>)>,
    /// Every feature column chosen, by name, in order (a date column once): what another
    /// file's columns are matched by.
    pub columns: Vec<String>,
    pub label_names: Vec<String>,
    /// Per label column, one cell per row (trimmed, unquoted); `None` where missing.
    pub labels: Vec<Vec<Option<String>>>,
    /// The 1-based line of every row, for messages about a sample.
    pub lines: Vec<usize>,
}

impl Table {
    pub fn rows(&self) -> usize {
        self.lines.len()
    }

    pub(crate) fn set_features(&mut self, done: Finished) {
        self.feature_names = done.names;
        self.features = done.values;
        self.categorical = done.categorical;
        self.dates = done.dates;
        self.columns = done.columns;
    }
}

/// A feature cell as read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell<'a> {
    Missing,
    /// A number, and its text as written (the category it is in a column of text).
    Number(f64, &'a str),
    Text(&'a str),
}

/// What a feature column holds, as far as it has been read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Only missing cells so far.
    Unknown,
    Numbers,
    Text,
}

/// The feature cells of a table as they are read, a row at a time: a column holds
/// numbers until a text shows it is categorical (a column `categorical` names is from its
/// first row); a number in a column of text is the category written, a text in a column
/// of numbers an error.
pub(crate) struct FeatureCells {
    names: Vec<String>,
    columns: Vec<usize>,
    kinds: Vec<Kind>,
    /// Row-major over every feature column (NaN in a categorical one's place).
    values: Vec<f32>,
    texts: Vec<Option<Categories>>,
    /// Per feature, the `date` node that names it.
    dated: Vec<Option<usize>>,
    rows: usize,
    hint: Hint,
}

/// What a table's feature cells make, once every row is read.
pub(crate) struct Finished {
    /// The numeric features (a date column's parts among them, in its place).
    pub names: Vec<String>,
    pub values: Vec<f32>,
    pub categorical: Vec<Categories>,
    pub dates: Vec<(String, Vec<DatePart>)>,
    pub columns: Vec<String>,
}

/// A column of dates: its parts, and each of its values as a date.
type DateColumn = (Vec<DatePart>, Vec<Option<NaiveDateTime>>);

/// What a text further down a column of numbers is refused with: the `categorical` node
/// that reads the column as categories (by its name, or its index without a header), or
/// nothing (a file whose columns cannot be categories: `data.inputs`').
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Hint {
    ByName,
    ByIndex,
    None,
}

impl FeatureCells {
    /// For the feature columns `columns` of the file, called `names`, those `declared`
    /// categorical by the `categorical` node of that index.
    pub(crate) fn new(
        names: Vec<String>,
        columns: Vec<usize>,
        declared: &[Option<usize>],
        dated: &[Option<usize>],
        hint: Hint,
    ) -> FeatureCells {
        // Categories and dates are read as text from the first row.
        let texts: Vec<Option<Categories>> = (0..names.len())
            .map(|k| {
                (declared[k].is_some() || dated[k].is_some()).then(|| {
                    let mut c = Categories::new(names[k].clone(), columns[k]);
                    c.declared = declared[k];
                    c
                })
            })
            .collect();
        FeatureCells {
            kinds: texts
                .iter()
                .map(|t| {
                    if t.is_some() {
                        Kind::Text
                    } else {
                        Kind::Unknown
                    }
                })
                .collect(),
            names,
            columns,
            values: Vec::new(),
            texts,
            dated: dated.to_vec(),
            rows: 0,
            hint,
        }
    }

    /// Feature `k`'s cell of the row being read (the features in order); `Err` says why
    /// a text cannot be in its column.
    pub(crate) fn push(&mut self, k: usize, cell: Cell<'_>) -> Result<(), String> {
        match (self.kinds[k], cell) {
            (Kind::Text, cell) => {
                let text = match cell {
                    Cell::Missing => None,
                    Cell::Number(_, text) | Cell::Text(text) => Some(text),
                };
                self.texts[k].as_mut().expect("a column of text").push(text);
                self.values.push(f32::NAN);
            }
            (_, Cell::Missing) => self.values.push(f32::NAN),
            (_, Cell::Number(v, _)) => {
                self.kinds[k] = Kind::Numbers;
                self.values.push(v as f32);
            }
            (Kind::Numbers, Cell::Text(text)) => {
                let (name, column) = (&self.names[k], self.columns[k]);
                let node = match self.hint {
                    Hint::ByName => format!(
                        "; if the column holds categories, name it: `categorical \"{name}\"`"
                    ),
                    Hint::ByIndex => {
                        format!("; if the column holds categories, name it: `categorical {column}`")
                    }
                    Hint::None => String::new(),
                };
                return Err(format!(
                    "feature `{name}` (column {column}) is not a number: `{text}`, and the rows above hold numbers in it{node}"
                ));
            }
            (Kind::Unknown, Cell::Text(_)) => {
                // The rows above were all missing in it.
                let mut column = Categories::new(self.names[k].clone(), self.columns[k]);
                for _ in 0..self.rows {
                    column.push(None);
                }
                self.texts[k] = Some(column);
                self.kinds[k] = Kind::Text;
                return self.push(k, cell);
            }
        }
        Ok(())
    }

    /// Ends the row being read.
    pub(crate) fn end_row(&mut self) {
        self.rows += 1;
    }

    /// Whether feature `k` is categorical so far.
    pub(crate) fn is_text(&self, k: usize) -> bool {
        self.kinds[k] == Kind::Text
    }

    /// The numeric columns (a date column's parts among them) and the categorical ones;
    /// `Err`: the row (0-based) and why a value of a column of dates is not one.
    /// `dates`: the `date` nodes the columns were named by.
    pub(crate) fn finish(self, dates: &[DateSpec]) -> Result<Finished, (usize, String)> {
        let width = self.names.len();
        // Each column of text's dates (a column of them: its parts, and each value's).
        let mut parsed: Vec<Option<DateColumn>> = vec![None; width];
        for (k, column) in self.texts.iter().enumerate() {
            let Some(column) = column else { continue };
            if column.declared.is_some() {
                continue; // categorical, as named
            }
            let not_a_date = |i: usize, what: &str| {
                (
                    i,
                    format!(
                        "feature `{}` (column {}) {what}: `{}` is not a date (`2024-03-01`, `2024/03/01`, `2024-03-01 12:30:00`, ISO 8601)",
                        column.name,
                        self.columns[k],
                        column.value(i).unwrap_or_default()
                    ),
                )
            };
            match self.dated[k] {
                Some(node) => {
                    let values: Vec<Option<NaiveDateTime>> = column
                        .values
                        .iter()
                        .map(|v| crate::dates::parse(v))
                        .collect();
                    let bad = (0..column.rows()).find(|&i| {
                        !column.is_missing(i) && values[column.codes[i] as usize].is_none()
                    });
                    if let Some(i) = bad {
                        return Err(not_a_date(i, "is named by `date`"));
                    }
                    parsed[k] = Some((dates[node].parts.clone(), values));
                }
                None => match crate::dates::found_in(column) {
                    Found::Categories => {}
                    Found::MostlyDates(i) => return Err(not_a_date(i, "holds dates")),
                    Found::Dates(values) => {
                        parsed[k] = Some((DEFAULT_DATE_PARTS.to_vec(), values));
                    }
                },
            }
        }
        let mut names = Vec::new();
        let mut date_columns = Vec::new();
        // Per feature, how it is laid out among the numbers.
        for ((name, dates), kind) in self.names.iter().zip(&parsed).zip(&self.kinds) {
            match (dates, kind) {
                (Some((parts, _)), _) => {
                    names.extend(crate::dates::names(name, parts));
                    date_columns.push((name.clone(), parts.clone()));
                }
                (None, Kind::Text) => {}
                (None, _) => names.push(name.clone()),
            }
        }
        let plain =
            parsed.iter().all(Option::is_none) && self.kinds.iter().all(|&kind| kind != Kind::Text);
        let values = match plain {
            true => self.values,
            false => {
                let mut values = Vec::with_capacity(self.rows * names.len());
                for (i, row) in self.values.chunks_exact(width).enumerate() {
                    for k in 0..width {
                        match (&parsed[k], self.kinds[k]) {
                            (Some((parts, dates)), _) => {
                                let column = self.texts[k].as_ref().expect("a column of text");
                                let code = column.codes[i];
                                let date = dates.get(code as usize).copied().flatten();
                                values.extend(parts.iter().map(|&p| {
                                    date.map_or(f32::NAN, |t| crate::dates::part(&t, p))
                                }));
                            }
                            (None, Kind::Text) => {}
                            (None, _) => values.push(row[k]),
                        }
                    }
                }
                values
            }
        };
        let categorical = self
            .texts
            .into_iter()
            .zip(&parsed)
            .filter_map(|(c, p)| c.filter(|_| p.is_none()))
            .collect();
        Ok(Finished {
            names,
            values,
            categorical,
            dates: date_columns,
            columns: self.names,
        })
    }
}

/// Why a table could not be read.
#[derive(Debug, Clone, PartialEq)]
pub enum TableError {
    Io(String),
    /// A problem on one line (1-based).
    Line {
        line: usize,
        message: String,
    },
    /// The columns asked for do not fit the file.
    Columns(String),
}

fn is_gzip(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// The file's bytes: gzip is read member after member (what `cat a.gz b.gz`, pigz and
/// bgzip write), and anything after the last member that is not one is an error.
pub(crate) fn open(path: &Path) -> std::io::Result<Box<dyn BufRead>> {
    let file = File::open(path)?;
    let reader: Box<dyn Read> = if is_gzip(path) {
        Box::new(MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(Box::new(BufReader::with_capacity(1 << 16, reader)))
}

/// `inner` with its comment lines (after optional blanks, `comment` first) and its empty
/// lines made one space: the `csv` crate counts a record's line from where it started
/// reading, empty lines before it included, so they must not be empty for the lines it
/// reports to stay the file's (a record of one blank field is skipped). A line ending
/// `\r\n` (what Python's csv module and spreadsheets write) ends `\n`: the `csv` crate
/// ends a record at the `\r` and counts the `\n` into the next record's start, whose line
/// would be one too low (a field's trailing `\r` is trimmed anyway; a quoted field over
/// several lines keeps its line breaks as `\n`).
struct Blanked<R> {
    inner: R,
    comment: Option<u8>,
    line: Vec<u8>,
    at: usize,
}

impl<R: BufRead> Read for Blanked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.line.len() {
            self.line.clear();
            self.at = 0;
            if self.inner.read_until(b'\n', &mut self.line)? == 0 {
                return Ok(0);
            }
            if self.line.ends_with(b"\r\n") {
                self.line.remove(self.line.len() - 2);
            }
            let first = self.line.iter().find(|b| !b" \t".contains(b));
            let blank = matches!(first, None | Some(b'\r' | b'\n'));
            if blank || first.copied() == self.comment {
                let newline = self.line.last() == Some(&b'\n');
                self.line.clear();
                self.line.push(b' ');
                if newline {
                    self.line.push(b'\n');
                }
            }
        }
        let n = buf.len().min(self.line.len() - self.at);
        buf[..n].copy_from_slice(&self.line[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn read_error(path: &Path, line: usize, e: impl std::fmt::Display) -> TableError {
    TableError::Line {
        line,
        message: if is_gzip(path) {
            format!("cannot read: the gzip data is damaged, or has bytes after its end that are not gzip ({e})")
        } else {
            format!("cannot read: {e}")
        },
    }
}

/// Reads the whole table at `path`.
pub fn read(path: &Path, dialect: &Dialect, layout: Layout<'_>) -> Result<Table, TableError> {
    let reader = open(path).map_err(|e| TableError::Io(e.to_string()))?;
    Reader::new(path, dialect, layout).run(reader, None)
}

/// How many features a sample of the table at `path` has, from its first rows (`None`
/// when that cannot be told without reading further — a one-hot categorical column's
/// features are the training split's values —, or the file is unreadable: the run
/// reports it).
pub fn peek_features(path: &Path, dialect: &Dialect, layout: Layout<'_>) -> Option<usize> {
    let reader = open(path).ok()?;
    let reader = Box::new(BufReader::new(reader.take(PEEK_BYTES)));
    let table = Reader::new(path, dialect, layout)
        .run(reader, Some(GLANCE_ROWS))
        .ok()?;
    table.numeric_width(layout)
}

impl Table {
    /// How many features a sample of this table has, when its categorical columns (if
    /// any) are all encoded by index, each a model input of its own.
    pub fn numeric_width(&self, layout: Layout<'_>) -> Option<usize> {
        let declared = match layout {
            Layout::Both { categorical, .. } => categorical,
            _ => &[],
        };
        let one_hot = self
            .categorical
            .iter()
            .any(|c| c.encoding(declared) == manifests::Encoding::OneHot);
        (self.rows() > 0 && !one_hot).then_some(self.feature_names.len())
    }
}

/// How many rows `check` reads of a text table to find what the run would refuse in it
/// (a row of another width, a named column without a header, a header not declared)
/// and to tell its columns' kinds.
pub const GLANCE_ROWS: usize = 100;

/// The first rows of the text table at `path`, for `check`: the error the run gives for
/// them, so that both say the same, or the table they make.
pub fn glance_rows(
    path: &Path,
    dialect: &Dialect,
    layout: Layout<'_>,
) -> Result<Option<Table>, TableError> {
    let reader = open(path).map_err(|e| TableError::Io(e.to_string()))?;
    Reader::new(path, dialect, layout)
        .run(reader, Some(GLANCE_ROWS))
        .map(Some)
}

/// The diagnostic for a table of `spec`'s that could not be read, located at the data
/// file: a text table's problems are on a line, another's (Parquet's) on a row. `run`
/// gives it, and `check` for what it finds in the first rows.
pub fn diagnostic(spec: &DataSpec, path: &Path, e: TableError, format: DataFormat) -> Diagnostic {
    let (code, message, help) = match e {
        TableError::Line { line, message } if !format.is_text_table() => (
            "pipeline::data::bad_row",
            format!("{}, row {line}: {message}", path.display()),
            "the features must be numbers (or null: see `data.missing`)",
        ),
        TableError::Io(m) => (
            "pipeline::data::unreadable",
            format!("cannot read {}: {m}", path.display()),
            "check the file",
        ),
        TableError::Line { line, message } => (
            "pipeline::data::bad_row",
            format!("{}:{line}: {message}", path.display()),
            "every row needs the same fields, the features numeric (or missing: see `data.missing`); `pipeline explain data` shows how to describe the file",
        ),
        TableError::Columns(m) => (
            "pipeline::data::bad_label_column",
            format!("{}: {m}", path.display()),
            "set `label` and `features` in `data` to columns the file has",
        ),
    };
    Diagnostic::error(code, message)
        .label_opt(spec.source.span, "data file")
        .help(help)
}

/// The columns a layout resolved to, once the width (and the header) is known.
/// The columns of a [`Layout`] in a file's rows: labels and features, by index.
pub(crate) struct Columns {
    pub labels: Vec<usize>,
    pub features: Vec<usize>,
    /// Per feature, the `categorical` node that names it.
    pub declared: Vec<Option<usize>>,
    /// Per feature, the `date` node that names it.
    pub dated: Vec<Option<usize>>,
}

struct Reader<'a> {
    path: &'a Path,
    dialect: &'a Dialect,
    layout: Layout<'a>,
}

/// The number of fields `delimiter` splits every line of `sample` into, when that is the
/// same for every line and more than one.
fn splits_alike(sample: &[u8], delimiter: u8, comment: Option<u8>) -> Option<usize> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .comment(comment)
        .from_reader(sample);
    let mut width = None;
    for record in reader.records() {
        let record = record.ok()?;
        if record.len() == 1 && record[0].trim().is_empty() {
            continue;
        }
        if *width.get_or_insert(record.len()) != record.len() {
            return None;
        }
    }
    width.filter(|&w| w > 1)
}

/// The delimiter of `auto`, told from the first lines: of `,` `;` and tab, the one that
/// splits them all alike into the most fields (`1;2;"red, dry"` splits alike on both
/// `,` and `;`, and is a semicolon file), else runs of whitespace, else `,`.
fn sniff(sample: &[u8], comment: Option<u8>) -> Delimiter {
    let mut best: Option<(usize, Delimiter)> = None;
    for (byte, delimiter) in [
        (b',', Delimiter::Comma),
        (b';', Delimiter::Semicolon),
        (b'\t', Delimiter::Tab),
    ] {
        if !sample.contains(&byte) {
            continue;
        }
        if let Some(width) = splits_alike(sample, byte, comment) {
            if best.is_none_or(|(w, _)| width > w) {
                best = Some((width, delimiter));
            }
        }
    }
    if let Some((_, delimiter)) = best {
        return delimiter;
    }
    let text = String::from_utf8_lossy(sample);
    let widths: Vec<usize> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && comment.is_none_or(|c| !l.as_bytes().starts_with(&[c])))
        .map(|l| l.split_whitespace().count())
        .collect();
    if widths.first().is_some_and(|&w| w > 1) && widths.iter().all(|&w| w == widths[0]) {
        return Delimiter::Whitespace;
    }
    Delimiter::Comma
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, dialect: &'a Dialect, layout: Layout<'a>) -> Reader<'a> {
        Reader {
            path,
            dialect,
            layout,
        }
    }

    /// Reads rows (at most `limit`) after the skipped lines and the header.
    fn run(&self, mut reader: Box<dyn BufRead>, limit: Option<usize>) -> Result<Table, TableError> {
        let mut skipped = 0usize;
        for _ in 0..self.dialect.skip_rows {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => skipped += 1,
                Err(e) => return Err(read_error(self.path, skipped + 1, e)),
            }
        }
        let delimiter = match self.dialect.delimiter {
            Delimiter::Auto => {
                let mut sample = Vec::new();
                for _ in 0..SNIFF_LINES {
                    match reader.read_until(b'\n', &mut sample) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => return Err(read_error(self.path, skipped + 1, e)),
                    }
                }
                let delimiter = sniff(&sample, self.dialect.comment);
                reader = Box::new(BufReader::new(Cursor::new(sample).chain(reader)));
                delimiter
            }
            other => other,
        };
        let mut table = Table {
            feature_names: Vec::new(),
            features: Vec::new(),
            categorical: Vec::new(),
            dates: Vec::new(),
            columns: Vec::new(),
            label_names: Vec::new(),
            labels: Vec::new(),
            lines: Vec::new(),
        };
        let mut state = State {
            columns: None,
            names: None,
            width: 0,
            cells: None,
            first_row_text: Vec::new(),
        };
        let mut each = |line: usize, fields: &[&str]| -> Result<bool, TableError> {
            if fields.iter().all(|f| f.is_empty()) && fields.len() <= 1 {
                return Ok(true);
            }
            self.row(&mut table, &mut state, line, fields)?;
            Ok(limit.is_none_or(|l| table.lines.len() < l))
        };
        match delimiter {
            Delimiter::Whitespace => {
                let mut number = skipped;
                let mut line = String::new();
                loop {
                    line.clear();
                    number += 1;
                    match reader.read_line(&mut line) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => return Err(read_error(self.path, number, e)),
                    }
                    if self
                        .dialect
                        .comment
                        .is_some_and(|c| line.trim_start().as_bytes().first() == Some(&c))
                    {
                        continue;
                    }
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    if !each(number, &fields)? {
                        break;
                    }
                }
            }
            delimited => {
                let byte = match delimited {
                    Delimiter::Comma => b',',
                    Delimiter::Semicolon => b';',
                    Delimiter::Tab => b'\t',
                    Delimiter::Auto | Delimiter::Whitespace => unreachable!("resolved above"),
                };
                let reader = Blanked {
                    inner: reader,
                    comment: self.dialect.comment,
                    line: Vec::new(),
                    at: 0,
                };
                let mut csv = csv::ReaderBuilder::new()
                    .delimiter(byte)
                    .has_headers(false)
                    .flexible(true)
                    .trim(csv::Trim::All)
                    .from_reader(reader);
                let mut record = csv::StringRecord::new();
                loop {
                    let at = skipped + csv.position().line() as usize;
                    match csv.read_record(&mut record) {
                        Ok(false) => break,
                        Ok(true) => {}
                        Err(e) => {
                            let line = e.position().map_or(at, |p| skipped + p.line() as usize);
                            return Err(match e.kind() {
                                csv::ErrorKind::Utf8 { .. } => TableError::Line {
                                    line,
                                    message: "not UTF-8 text".into(),
                                },
                                _ => read_error(self.path, line, e),
                            });
                        }
                    }
                    let line = record
                        .position()
                        .map_or(at, |p| skipped + p.line() as usize);
                    let fields: Vec<&str> = record.iter().collect();
                    if !each(line, &fields)? {
                        break;
                    }
                }
            }
        }
        if let Some(cells) = state.cells.take() {
            let done = cells
                .finish(self.layout.dates())
                .map_err(|(row, message)| TableError::Line {
                    line: table.lines[row],
                    message,
                })?;
            table.set_features(done);
        }
        if table.lines.is_empty() {
            return Err(TableError::Io(if state.names.is_some() {
                "the file has a header but no data rows".into()
            } else {
                "the file has no data rows".into()
            }));
        }
        Ok(table)
    }

    /// One row: the header (the first, with `header`), or the data of a sample.
    fn row(
        &self,
        table: &mut Table,
        state: &mut State,
        line: usize,
        fields: &[&str],
    ) -> Result<(), TableError> {
        if self.dialect.header && state.names.is_none() {
            let names: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            if let Some(message) = twice_named(&names, "the header") {
                return Err(TableError::Line { line, message });
            }
            state.names = Some(names);
            state.width = fields.len();
            return Ok(());
        }
        if state.columns.is_none() {
            if state.names.is_none() {
                state.width = fields.len();
            }
            let columns = resolve(self.layout, state.width, state.names.as_deref())?;
            let name = |i: usize| match &state.names {
                Some(names) => names[i].clone(),
                None => format!("column {i}"),
            };
            let names: Vec<String> = columns.features.iter().map(|&i| name(i)).collect();
            state.cells = Some(FeatureCells::new(
                names,
                columns.features.clone(),
                &columns.declared,
                &columns.dated,
                match (self.layout, &state.names) {
                    (Layout::Both { .. }, Some(_)) => Hint::ByName,
                    (Layout::Both { .. }, None) => Hint::ByIndex,
                    _ => Hint::None,
                },
            ));
            table.label_names = columns.labels.iter().map(|&i| name(i)).collect();
            table.labels = vec![Vec::new(); columns.labels.len()];
            state.columns = Some(columns);
        }
        let columns = state.columns.as_ref().expect("resolved above");
        if fields.len() != state.width {
            let mut message = format!("expected {} fields, found {}", state.width, fields.len());
            match (table.lines.len(), &state.names) {
                (0, Some(_)) => message += " (the header has another number of fields than the rows: if it is a metadata line, skip it with `skip-rows 1`)",
                (1, None) => message += " (as the first row has: if that is a metadata line, skip it with `skip-rows 1`)",
                _ => {}
            }
            return Err(TableError::Line { line, message });
        }
        let is_text = |cell: &str| !is_missing(cell) && cell.parse::<f64>().is_err();
        // Without `header`, a first row of text over numbers names the columns.
        if state.names.is_none() {
            match table.lines.len() {
                0 => state.first_row_text = fields.iter().map(|f| is_text(f)).collect(),
                1 if state.first_row_text.iter().all(|&t| t)
                    && fields.iter().any(|f| !is_missing(f) && !is_text(f)) =>
                {
                    return Err(TableError::Line {
                        line: table.lines[0],
                        message: "the first row is text over numbers, as a header naming the columns is, and `header` is not set: add `header #true` (or, if it is a metadata line, skip it with `skip-rows 1`)".into(),
                    });
                }
                _ => {}
            }
        }
        let texts = matches!(self.layout, Layout::Texts);
        for (k, &c) in columns.labels.iter().enumerate() {
            let cell = fields[c];
            let missing = if texts {
                cell.is_empty()
            } else {
                is_missing(cell)
            };
            table.labels[k].push((!missing).then(|| cell.to_string()));
        }
        let cells = state.cells.as_mut().expect("made with the columns");
        for (k, &c) in columns.features.iter().enumerate() {
            let text = fields[c];
            let cell = if is_missing(text) {
                Cell::Missing
            } else if cells.is_text(k) {
                Cell::Text(text)
            } else {
                match text.parse::<f64>() {
                    Ok(v) => Cell::Number(v, text),
                    Err(_) => Cell::Text(text),
                }
            };
            cells
                .push(k, cell)
                .map_err(|message| TableError::Line { line, message })?;
        }
        cells.end_row();
        table.lines.push(line);
        Ok(())
    }
}

/// A table read as text: one column of cells as written (`features`: image paths, texts;
/// only an empty one missing) and the label columns (missing markers as for any label).
#[derive(Debug, Clone, PartialEq)]
pub struct Cells {
    pub column: Vec<Option<String>>,
    pub column_name: String,
    pub labels: Vec<Vec<Option<String>>>,
    pub label_names: Vec<String>,
    /// The 1-based line of every row (a Parquet file's: its 0-based row).
    pub lines: Vec<usize>,
}

/// The order of the rows of the table `path` in `format` by the column `name` (by the
/// header's names), whose values are numbers or dates and times (`data.window.time`): a
/// stable sort, so rows of the same time keep the file's order. `Err` names the first
/// row (1-based, among the data rows) whose value is missing or neither.
pub fn time_order(
    path: &Path,
    format: manifests::DataFormat,
    dialect: &Dialect,
    name: &str,
) -> Result<Vec<usize>, TableError> {
    let cells = read_column(path, format, dialect, name)?;
    let mut keys = Vec::with_capacity(cells.len());
    for (i, cell) in cells.iter().enumerate() {
        let key = cell.as_deref().and_then(|c| {
            c.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .or_else(|| crate::dates::parse(c).map(|t| t.and_utc().timestamp_micros() as f64))
        });
        match key {
            Some(key) => keys.push(key),
            None => {
                return Err(TableError::Columns(format!(
                    "data row {}: the time `{name}` is {}, not a number or a date",
                    i + 1,
                    match cell {
                        Some(c) => format!("`{}`", c.escape_debug()),
                        None => "missing".into(),
                    }
                )))
            }
        }
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    Ok(order)
}

/// The cells of the column `name` (by the header's names) of the table `path` in
/// `format`, one per data row in file order (`None` where missing): what a `predict`
/// stage's `id` copies.
pub fn read_column(
    path: &Path,
    format: manifests::DataFormat,
    dialect: &Dialect,
    name: &str,
) -> Result<Vec<Option<String>>, TableError> {
    let code = crate::formats::table(format).map_err(TableError::Io)?;
    let mut t = code.read(path, dialect, Layout::Texts)?;
    let names = format
        .has_header(dialect)
        .then_some(t.label_names.as_slice());
    let wanted = [Column::Name(name.to_string())];
    let layout = Layout::Both {
        labels_are_features: false,
        label: &[],
        features: &wanted,
        categorical: &[],
        dates: &[],
    };
    let columns = resolve(layout, t.label_names.len(), names)?;
    Ok(std::mem::take(&mut t.labels[columns.features[0]]))
}

/// Reads the table `path` (of the data's table format, or an image listing) as [`Cells`]: the one column
/// `column` names (empty: the first that is not a label; `what` says what it holds, for
/// the message when several are named) and the `label` columns.
pub fn read_cells(
    path: &Path,
    spec: &manifests::DataSpec,
    column: &[Column],
    what: &str,
) -> Result<Cells, TableError> {
    // A texts' table is the data's; an image listing is a table of its own kind (by its
    // name), and CSV (what `image-list` reads) when its name does not say.
    let format = match spec.format.is_table() {
        true => spec.format,
        false => manifests::DataFormat::of_name(path)
            .filter(|f| f.is_table())
            .unwrap_or(manifests::DataFormat::builtin(&manifests::formats::CSV)),
    };
    let code = crate::formats::table(format).map_err(TableError::Io)?;
    let t = code.read(path, &spec.dialect, Layout::Texts)?;
    let header = format.has_header(&spec.dialect);
    let names = header.then_some(t.label_names.as_slice());
    let label: &[Column] = &spec.label;
    let features = column;
    let columns = resolve(
        Layout::Both {
            labels_are_features: false,
            label,
            features,
            categorical: &[],
            dates: &[],
        },
        t.label_names.len(),
        names,
    )?;
    let features: Vec<usize> = match features {
        // Default: the first column that is not a label (not every other one).
        [] => columns.features.iter().copied().take(1).collect(),
        _ => columns.features.clone(),
    };
    let [index] = features[..] else {
        return Err(TableError::Columns(format!(
            "{what} are one column, but `features` names {} ({})",
            features.len(),
            features
                .iter()
                .map(|&i| t.label_names[i].clone())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    Ok(Cells {
        column: t.labels[index].clone(),
        column_name: t.label_names[index].clone(),
        // The labels' missing markers are those of any label.
        labels: columns
            .labels
            .iter()
            .map(|&i| {
                let cells = t.labels[i].iter().cloned();
                cells.map(|c| c.filter(|c| !is_missing(c))).collect()
            })
            .collect(),
        label_names: columns
            .labels
            .iter()
            .map(|&i| t.label_names[i].clone())
            .collect(),
        lines: t.lines,
    })
}

/// What is wrong with a header (`whose`: "the header", "the schema") that names a column
/// twice (its name would choose only the first), `None` when every name is its own.
pub(crate) fn twice_named(names: &[String], whose: &str) -> Option<String> {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            continue; // unnamed columns (a trailing delimiter's) are not chosen by name
        }
        if let Some(&earlier) = first.get(name.as_str()) {
            return Some(format!(
                "{whose} names two columns `{name}` (columns {earlier} and {i}): give each column its own name"
            ));
        }
        first.insert(name, i);
    }
    None
}

/// The label and feature columns of `layout` in rows `width` wide (`names`: the header's).
pub(crate) fn resolve(
    layout: Layout<'_>,
    width: usize,
    names: Option<&[String]>,
) -> Result<Columns, TableError> {
    let index = |c: &Column| -> Result<Vec<usize>, TableError> {
        let one = |i: usize| {
            if i < width {
                Ok(vec![i])
            } else {
                Err(TableError::Columns(format!(
                    "column {i} does not exist: rows have {width} fields (columns 0 … {})",
                    width.saturating_sub(1)
                )))
            }
        };
        match c {
                Column::First => one(0),
                Column::Last => one(width.saturating_sub(1)),
                Column::Index(i) => one(*i),
                Column::Range { start, end } => {
                    if *end > width {
                        return Err(TableError::Columns(format!(
                            "columns {start}..{end} do not exist: rows have {width} fields (columns 0 … {})",
                            width.saturating_sub(1)
                        )));
                    }
                    Ok((*start..*end).collect())
                }
                Column::Name(name) => match names {
                    None => Err(TableError::Columns(format!(
                        "column `{name}` is named, but `header` is not set, so the first row is read as data: add `header #true` if the first row names the columns, or give the column's index"
                    ))),
                    Some(names) => match names.iter().position(|n| n == name) {
                        Some(i) => Ok(vec![i]),
                        None => Err(TableError::Columns(format!(
                            "the header has no column `{name}`; it has: {}",
                            names.join(", ")
                        ))),
                    },
                },
            }
    };
    let all = |cs: &[Column]| -> Result<Vec<usize>, TableError> {
        let mut out: Vec<usize> = Vec::new();
        for c in cs {
            for i in index(c)? {
                if out.contains(&i) {
                    return Err(TableError::Columns(format!("column {i} is given twice")));
                }
                out.push(i);
            }
        }
        Ok(out)
    };
    let (labels, features) = match layout {
        // A labels file's columns are all labels.
        Layout::Labels | Layout::Texts => ((0..width).collect(), Vec::new()),
        Layout::Features([]) => (Vec::new(), (0..width).collect()),
        Layout::Features(features) => (Vec::new(), all(features)?),
        Layout::Both {
            label,
            features,
            labels_are_features,
            ..
        } => {
            let labels = all(label)?;
            let features: Vec<usize> = match features {
                [] => (0..width).filter(|i| !labels.contains(i)).collect(),
                some => all(some)?,
            };
            let both = features.iter().find(|i| labels.contains(i));
            if let (Some(both), false) = (both, labels_are_features) {
                return Err(TableError::Columns(format!(
                    "column {both} is both a label and a feature"
                )));
            }
            (labels, features)
        }
    };
    if features.is_empty() && !matches!(layout, Layout::Labels | Layout::Texts) {
        return Err(TableError::Columns(format!(
                "no feature column is left: rows have {width} field(s), and a label and at least one feature are needed"
            )));
    }
    let mut declared = vec![None; features.len()];
    let mut dated = vec![None; features.len()];
    if let Layout::Both {
        categorical, dates, ..
    } = layout
    {
        let name = |i: usize| match names {
            Some(names) => format!("`{}`", names[i]),
            None => format!("column {i}"),
        };
        let nodes = categorical
            .iter()
            .map(|c| ("categorical", &c.columns[..]))
            .enumerate()
            .chain(dates.iter().map(|d| ("date", &d.columns[..])).enumerate());
        for (node, (kind, columns)) in nodes {
            for i in all(columns)? {
                let Some(k) = features.iter().position(|&f| f == i) else {
                    return Err(TableError::Columns(format!(
                        "{} is named by `{kind}`, and it is {}",
                        name(i),
                        match labels.contains(&i) {
                            true => "a label",
                            false => "not among the features (`features`)",
                        }
                    )));
                };
                if declared[k].is_some() || dated[k].is_some() {
                    return Err(TableError::Columns(format!(
                        "{} is named by two `categorical` or `date` nodes",
                        name(i)
                    )));
                }
                match kind {
                    "categorical" => declared[k] = Some(node),
                    _ => dated[k] = Some(node),
                }
            }
        }
    }
    Ok(Columns {
        labels,
        features,
        declared,
        dated,
    })
}

/// What is known of the columns while reading.
struct State {
    columns: Option<Columns>,
    names: Option<Vec<String>>,
    width: usize,
    cells: Option<FeatureCells>,
    /// Without a header: which fields of the first row are text.
    first_row_text: Vec<bool>,
}

pub(crate) fn is_missing(cell: &str) -> bool {
    cell.is_empty() || MISSING.contains(&cell)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialect(delimiter: Delimiter, header: bool) -> Dialect {
        Dialect {
            delimiter,
            header,
            skip_rows: 0,
            comment: None,
        }
    }

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const LAST: Layout<'static> = Layout::Both {
        labels_are_features: false,
        label: &[Column::Last],
        features: &[],
        categorical: &[],
        dates: &[],
    };

    #[test]
    fn reads_numbers_and_splits_off_the_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "ok.csv", "a,b,y\n1,2,0\n3,4,1\n");
        let label = [Column::Name("y".into())];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &label,
            features: &[],
            categorical: &[],
            dates: &[],
        };
        let t = read(&path, &dialect(Delimiter::Auto, true), layout).unwrap();
        assert_eq!(t.features, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.labels, vec![vec![Some("0".into()), Some("1".into())]]);
        assert_eq!(t.feature_names, ["a", "b"]);
        assert_eq!(t.lines, vec![2, 3]);
        let first = Layout::Both {
            labels_are_features: false,
            label: &[Column::First],
            features: &[],
            categorical: &[],
            dates: &[],
        };
        let t = read(&path, &dialect(Delimiter::Comma, true), first).unwrap();
        assert_eq!(t.labels[0], vec![Some("1".into()), Some("3".into())]);
    }

    #[test]
    fn tells_the_delimiter_and_reads_quotes_comments_and_skipped_lines() {
        let dir = tempfile::tempdir().unwrap();
        // A metadata line (wine_data.csv's), then semicolons, a comment and a quoted label.
        let path = write(
            &dir,
            "semi.csv",
            "178,13,class_0,class_1\n# measured in 1991\n1.5;2;\"red, dry\"\n3;4;white\n",
        );
        let mut d = dialect(Delimiter::Auto, false);
        d.skip_rows = 1;
        d.comment = Some(b'#');
        let t = read(&path, &d, LAST).unwrap();
        assert_eq!(t.features, vec![1.5, 2.0, 3.0, 4.0]);
        assert_eq!(
            t.labels[0],
            vec![Some("red, dry".into()), Some("white".into())]
        );
        assert_eq!(t.lines, vec![3, 4]);
        // Runs of spaces (diabetes_data_raw.csv's), and tabs.
        let path = write(&dir, "space.txt", "59 2  32.1\n48 1 21.6\n");
        let t = read(&path, &dialect(Delimiter::Auto, false), LAST).unwrap();
        assert_eq!(t.features, vec![59.0, 2.0, 48.0, 1.0]);
        // Commas inside quoted fields of a semicolon file split alike too, into fewer.
        let path = write(
            &dir,
            "quoted.csv",
            "1;2;\"red, dry\"\n3;4;\"white, sweet\"\n",
        );
        let t = read(&path, &dialect(Delimiter::Auto, false), LAST).unwrap();
        assert_eq!(t.labels[0][0].as_deref(), Some("red, dry"));
        let path = write(&dir, "tab.tsv", "a\tb\ty\n1\t2\t0\n");
        let t = read(&path, &dialect(Delimiter::Auto, true), LAST).unwrap();
        assert_eq!(t.feature_names, ["a", "b"]);
    }

    #[test]
    fn selects_columns_by_name_index_and_range_and_marks_missing_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "m.csv",
            "id,a,b,c,y1,y2\n7,1,,3,0.5,yes\n8,NA,5,?,1.5,no\n",
        );
        let label = [Column::Name("y1".into()), Column::Index(5)];
        let features = [Column::Range { start: 1, end: 3 }, Column::Name("c".into())];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &label,
            features: &features,
            categorical: &[],
            dates: &[],
        };
        let t = read(&path, &dialect(Delimiter::Comma, true), layout).unwrap();
        assert_eq!(t.feature_names, ["a", "b", "c"]);
        assert_eq!(t.label_names, ["y1", "y2"]);
        let shown: Vec<String> = t.features.iter().map(|v| v.to_string()).collect();
        assert_eq!(shown, ["1", "NaN", "3", "NaN", "5", "NaN"]);
        assert_eq!(t.labels[1], vec![Some("yes".into()), Some("no".into())]);
        // A labels file: every column a label.
        let t = read(&path, &dialect(Delimiter::Comma, true), Layout::Labels).unwrap();
        assert_eq!(t.labels.len(), 6);
        assert!(t.features.is_empty());
    }

    #[test]
    fn names_the_line_of_every_problem() {
        let dir = tempfile::tempdir().unwrap();
        let d = dialect(Delimiter::Comma, false);
        let path = write(&dir, "short.csv", "1,2,0\n3,4,1\n5,6\n");
        assert_eq!(
            read(&path, &d, LAST).unwrap_err(),
            TableError::Line {
                line: 3,
                message: "expected 3 fields, found 2".into()
            }
        );
        let path = write(&dir, "text.csv", "1,2,0\n3,x,1\n");
        assert_eq!(
            read(&path, &d, LAST).unwrap_err(),
            TableError::Line {
                line: 2,
                message: "feature `column 1` (column 1) is not a number: `x`, and the rows above hold numbers in it; if the column holds categories, name it: `categorical 1`".into()
            }
        );
        let path = write(&dir, "meta.csv", "178,13\n1,2,3\n");
        let TableError::Line { line, message } = read(&path, &d, LAST).unwrap_err() else {
            panic!()
        };
        assert_eq!(line, 2);
        assert!(message.contains("skip-rows 1"), "{message}");
        let path = write(&dir, "y.csv", "a,b\n1,2\n");
        let named = [Column::Name("y".into())];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &named,
            features: &[],
            categorical: &[],
            dates: &[],
        };
        assert!(matches!(
            read(&path, &dialect(Delimiter::Comma, true), layout).unwrap_err(),
            TableError::Columns(m) if m == "the header has no column `y`; it has: a, b"
        ));
        assert!(matches!(
            read(&path, &d, layout).unwrap_err(),
            TableError::Columns(m) if m.contains("`header` is not set")
        ));
        let far = [Column::Index(9)];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &far,
            features: &[],
            categorical: &[],
            dates: &[],
        };
        assert!(matches!(
            read(&path, &d, layout).unwrap_err(),
            TableError::Columns(m) if m == "column 9 does not exist: rows have 2 fields (columns 0 … 1)"
        ));
    }

    #[test]
    fn lines_are_the_files_with_crlf_line_endings() {
        let dir = tempfile::tempdir().unwrap();
        let d = dialect(Delimiter::Comma, true);
        let path = write(&dir, "crlf.csv", "a,b,y\r\n1,2,0\r\n\r\n3,4,1\r\n5,x,0\r\n");
        assert_eq!(
            read(&path, &d, LAST).unwrap_err(),
            TableError::Line {
                line: 5,
                message: "feature `b` (column 1) is not a number: `x`, and the rows above hold numbers in it; if the column holds categories, name it: `categorical \"b\"`".into()
            }
        );
        let path = write(
            &dir,
            "ok.csv",
            "a,b,y\r\n1,2,0\r\n# note\r\n3,4,\"one\r\ntwo\"\r\n5,6,z\r\n",
        );
        let c = Dialect {
            comment: Some(b'#'),
            ..d.clone()
        };
        let t = read(&path, &c, LAST).unwrap();
        assert_eq!(t.lines, vec![2, 4, 6]);
        assert_eq!(t.labels[0][1].as_deref(), Some("one\ntwo"));
        assert_eq!(t.labels[0][2].as_deref(), Some("z"), "no `\\r` is left");
        // The same as the file with `\n` line endings.
        let unix = write(
            &dir,
            "unix.csv",
            "a,b,y\n1,2,0\n# note\n3,4,\"one\ntwo\"\n5,6,z\n",
        );
        assert_eq!(read(&unix, &c, LAST).unwrap(), t);
    }

    #[test]
    fn a_header_that_names_a_column_twice_is_refused_on_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = dialect(Delimiter::Comma, true);
        d.skip_rows = 1;
        let path = write(&dir, "twice.csv", "meta\nx,y,x\n1,2,3\n");
        assert_eq!(
            read(&path, &d, LAST).unwrap_err(),
            TableError::Line {
                line: 2,
                message: "the header names two columns `x` (columns 0 and 2): give each column its own name".into()
            }
        );
        // Unnamed columns are not names.
        let path = write(&dir, "unnamed.csv", "meta\na,,,y\n1,2,3,4\n");
        assert_eq!(read(&path, &d, LAST).unwrap().feature_names, ["a", "", ""]);
    }

    #[test]
    fn reads_every_member_of_a_gzip_file_and_refuses_trailing_garbage() {
        use std::io::Write;
        let gzip = |text: &str| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(text.as_bytes()).unwrap();
            gz.finish().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = gzip("1,2,0\n3,4,1\n");
        bytes.extend(gzip("5,6,0\n"));
        let path = dir.path().join("members.csv.gz");
        std::fs::write(&path, &bytes).unwrap();
        let d = dialect(Delimiter::Auto, false);
        let t = read(&path, &d, LAST).unwrap();
        assert_eq!(t.lines, vec![1, 2, 3], "the second member is read too");
        bytes.extend_from_slice(b"garbage after the end");
        std::fs::write(&path, &bytes).unwrap();
        let TableError::Line { message, .. } = read(&path, &d, LAST).unwrap_err() else {
            panic!("expected an error naming the line")
        };
        assert!(
            message.starts_with("cannot read: the gzip data is damaged"),
            "{message}"
        );
        assert_eq!(
            peek_features(&dir.path().join("nothing.csv"), &d, LAST),
            None
        );
    }

    #[test]
    fn a_column_of_text_is_categorical_and_a_declared_one_from_its_first_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "penguins.csv",
            "bill,island,code,y\n39.1,Torgersen,1,a\n,NA,2,b\n40.3,Biscoe,1,a\n",
        );
        let d = dialect(Delimiter::Comma, true);
        let t = read(&path, &d, LAST).unwrap();
        assert_eq!(t.feature_names, ["bill", "code"]);
        let shown: Vec<String> = t.features.iter().map(|v| v.to_string()).collect();
        assert_eq!(shown, ["39.1", "1", "NaN", "2", "40.3", "1"]);
        let [island] = &t.categorical[..] else {
            panic!("{:?}", t.categorical)
        };
        assert_eq!((island.name.as_str(), island.column), ("island", 1));
        assert_eq!(island.values, ["Torgersen", "Biscoe"]);
        assert!(island.is_missing(1));
        assert_eq!(t.columns, ["bill", "island", "code"]);
        // `code` named: its numbers are categories as written.
        let declared = [CategoricalSpec {
            columns: vec![Column::Name("code".into())],
            encoding: manifests::Encoding::Index,
            input: None,
            span: None,
        }];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &[Column::Last],
            features: &[],
            categorical: &declared,
            dates: &[],
        };
        let t = read(&path, &d, layout).unwrap();
        assert_eq!(t.feature_names, ["bill"]);
        assert_eq!(t.categorical[1].values, ["1", "2"]);
        assert_eq!(t.categorical[1].declared, Some(0));
        assert_eq!(t.numeric_width(layout), None, "island is one-hot");
        // A label cannot be named.
        let label = [CategoricalSpec {
            columns: vec![Column::Name("y".into())],
            ..declared[0].clone()
        }];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &[Column::Last],
            features: &[],
            categorical: &label,
            dates: &[],
        };
        assert!(matches!(
            read(&path, &d, layout).unwrap_err(),
            TableError::Columns(m) if m == "`y` is named by `categorical`, and it is a label"
        ));
    }

    #[test]
    fn a_first_row_of_text_over_numbers_is_a_header_not_declared() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "h.csv", "bill,island,y\n39.1,Dream,0\n");
        assert_eq!(
            read(&path, &dialect(Delimiter::Comma, false), LAST).unwrap_err(),
            TableError::Line {
                line: 1,
                message: "the first row is text over numbers, as a header naming the columns is, and `header` is not set: add `header #true` (or, if it is a metadata line, skip it with `skip-rows 1`)".into()
            }
        );
        // Rows of text alone are data.
        let path = write(&dir, "t.csv", "red,small,yes\nblue,large,no\n");
        let t = read(&path, &dialect(Delimiter::Comma, false), LAST).unwrap();
        assert_eq!(t.categorical.len(), 2);
        assert_eq!(t.rows(), 2);
    }

    #[test]
    fn a_column_of_dates_gives_its_parts_and_one_bad_date_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dialect(Delimiter::Comma, true);
        let path = write(
            &dir,
            "d.csv",
            "x,when,y\n1,2024-03-01,0\n2,,1\n3,2024/12/31 06:00:00,0\n",
        );
        let t = read(&path, &d, LAST).unwrap();
        assert_eq!(
            t.feature_names,
            ["x", "when.year", "when.month", "when.day-of-year"]
        );
        let shown: Vec<String> = t.features.iter().map(|v| v.to_string()).collect();
        assert_eq!(
            shown,
            ["1", "2024", "3", "61", "2", "NaN", "NaN", "NaN", "3", "2024", "12", "366"]
        );
        assert!(t.categorical.is_empty());
        assert_eq!(t.columns, ["x", "when"]);
        // Named, with its parts.
        let dates = [DateSpec {
            columns: vec![Column::Name("when".into())],
            parts: vec![DatePart::DayOfWeek, DatePart::Hour],
            span: None,
        }];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &[Column::Last],
            features: &[],
            categorical: &[],
            dates: &dates,
        };
        let t = read(&path, &d, layout).unwrap();
        assert_eq!(t.feature_names, ["x", "when.day-of-week", "when.hour"]);
        assert_eq!(&t.features[..3], [1., 4., 0.]);
        assert_eq!(&t.features[6..], [3., 1., 6.]);
        // Dates but one: its line is named.
        let mut text = String::from("x,when,y\n");
        for i in 0..9 {
            text += &format!("{i},2024-01-0{},0\n", i + 1);
        }
        text += "9,2024-01-32,1\n";
        let path = write(&dir, "bad.csv", &text);
        assert_eq!(
            read(&path, &d, LAST).unwrap_err(),
            TableError::Line {
                line: 11,
                message: "feature `when` (column 1) holds dates: `2024-01-32` is not a date (`2024-03-01`, `2024/03/01`, `2024-03-01 12:30:00`, ISO 8601)".into()
            }
        );
        // Text that is not dates stays categories.
        let path = write(
            &dir,
            "c.csv",
            "x,when,y\n1,2024-03-01,0\n2,soon,1\n3,later,0\n",
        );
        assert_eq!(
            read(&path, &d, LAST).unwrap().categorical[0].values,
            ["2024-03-01", "soon", "later"]
        );
    }
}
