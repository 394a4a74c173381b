//! The reading of data formats, libtorch-free, so that `check` reads a sample's shape
//! from a file as the run does (`manifests::formats` describes each format). Two kinds of
//! format are open here, one file a member:
//! - a table of named columns ([`TableFormat`]: CSV, Parquet, JSON), which the run reads with
//!   the columns `label` and `features` choose, a text column, the missing values, its
//!   located errors; a program adds one with [`register_table_format`];
//! - a file of samples ([`FileFormat`]), read by its own code into plain arrays, which
//!   the run turns into tensors as it does an NPZ's; a program adds one with
//!   [`register_data_format`] (`examples/extension/src/svmlight.rs`).
//!
//! The NumPy array files and the images are read by their own modules (`npy`, `shards`,
//! `image_listing`; `backends::arrays`).

mod csv;
mod json;
mod parquet;

use crate::table::{Layout, Table, TableError};
use manifests::formats::{DataFormat, FormatDescription, FormatKind};
use manifests::registry::Registry;
use manifests::{Diagnostic, Dialect, Manifest, StageConfig};
use std::path::Path;

/// A table format's code: reading its file into numbers and label cells.
pub trait TableFormat: Sync + 'static {
    /// Its description: of kind [`FormatKind::Table`].
    fn describe(&self) -> &'static FormatDescription;

    /// The whole table at `path`, `layout`'s columns (`dialect`: how a text table is
    /// written; a format whose file names its columns ignores it). A row's `lines` entry
    /// is its 1-based line in a text table, else its 0-based index.
    fn read(&self, path: &Path, dialect: &Dialect, layout: Layout<'_>)
        -> Result<Table, TableError>;

    /// How many features a sample has, read from the file's start or its schema, for
    /// `check` (`None` when that cannot be told cheaply, or the file is unreadable: the
    /// run reports it).
    fn peek_features(&self, path: &Path, dialect: &Dialect, layout: Layout<'_>) -> Option<usize>;

    /// Problems the run would refuse the file for, told from a glance at it (a Parquet
    /// file's footer), for `check`; by default none are told before the run.
    fn glance(&self, _path: &Path) -> Result<(), TableError> {
        Ok(())
    }

    /// The first rows of the data file (or all of them), read as the run reads them, for
    /// `check`: what the run would refuse in them (a row of another width), or the
    /// columns' kinds; by default nothing is read before the run (`None`).
    fn glance_rows(
        &self,
        _path: &Path,
        _dialect: &Dialect,
        _layout: Layout<'_>,
    ) -> Result<Option<Table>, TableError> {
        Ok(None)
    }

    /// Its features decoded a group of columns at a time, for `load "stream"`: the code
    /// of a format whose description says it `streams`.
    fn columns(&self) -> Option<&'static dyn ColumnGroups> {
        None
    }
}

/// The feature columns of a table, read a group of columns at a time (the groups in
/// parallel), so that a streamed run decodes them to a float32 file without holding them.
pub trait ColumnGroups: Sync {
    /// The rows and feature columns, from the file's metadata alone.
    fn shape(&self, path: &Path, layout: Layout<'_>) -> Result<(usize, usize), TableError>;

    /// The feature columns (checked to hold numbers) and the groups of them
    /// [`ColumnGroups::read_group`] reads.
    fn groups(
        &self,
        path: &Path,
        layout: Layout<'_>,
    ) -> Result<(FeatureColumns, Vec<std::ops::Range<usize>>), TableError>;

    /// The columns `group` over every row, a block of rows at a time, in row order.
    fn read_group(
        &self,
        path: &Path,
        layout: Layout<'_>,
        group: std::ops::Range<usize>,
        each: &mut dyn FnMut(Block<'_>) -> Result<(), TableError>,
    ) -> Result<(), TableError>;

    /// The label columns `layout` chooses, as text cells.
    fn labels(&self, path: &Path, layout: Layout<'_>) -> Result<LabelColumns, TableError>;
}

pub use crate::parquet::{Block, FeatureColumns, LabelColumns};

static TABLES: Registry<dyn TableFormat> = Registry::new(
    || {
        vec![
            &csv::Csv as &dyn TableFormat,
            &parquet::Parquet,
            &json::Json,
        ]
    },
    |f| f.describe().name,
);

/// Adds a table format: its description (of kind [`FormatKind::Table`]) and its code.
/// Refused (with why) when its name or an extension is another format's, or its
/// description is not a table's.
pub fn register_table_format(member: &'static dyn TableFormat) -> Result<(), String> {
    let description = member.describe();
    let FormatKind::Table { streams, .. } = description.kind else {
        return Err(format!(
            "the data format `{}` is registered as a table, and its description says {:?}",
            description.name, description.kind
        ));
    };
    if streams != member.columns().is_some() {
        return Err(format!(
            "the data format `{}` says it streams only when its code reads it a group of columns at a time (`TableFormat::columns`)",
            description.name
        ));
    }
    manifests::formats::register(description)?;
    TABLES.register(member)
}

/// The code of the table format `format`; `Err` when a program described it without
/// registering its code.
pub fn table(format: DataFormat) -> Result<&'static dyn TableFormat, String> {
    TABLES
        .get(format.as_str())
        .ok_or_else(|| no_code(format.as_str()))
}

/// The tables `manifest` reads (the data, a labels file, `data.inputs`, an `eval`
/// stage's `source`) that the run would refuse from a glance at them
/// ([`TableFormat::glance`]: a Parquet file's footer), each as the located diagnostic the
/// run gives. Files that do not exist or are not regular files are reported elsewhere.
pub fn check(manifest: &Manifest) -> Vec<Diagnostic> {
    let data = &manifest.data;
    let by_name = |path: &Path| DataFormat::of_name(path).filter(|f| f.is_table());
    let mut files = Vec::new();
    if data.format.is_table() {
        files.push((data.format, &data.source, "data file"));
    }
    if let Some(labels) = &data.labels_file {
        files.extend(by_name(&labels.value).map(|f| (f, labels, "labels file")));
    }
    for input in data.extra_inputs.iter().filter(|i| i.format.is_table()) {
        files.push((input.format, &input.source, "input file"));
    }
    for stage in &manifest.stages {
        if let StageConfig::Eval(eval) = &stage.config {
            if let Some(source) = &eval.source {
                files.extend(by_name(&source.value).map(|f| (f, source, "file evaluated")));
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for (format, file, what) in files {
        let path = manifest.resolve(&file.value);
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) || !seen.insert(path.clone()) {
            continue;
        }
        let Ok(code) = table(format) else {
            continue;
        };
        let (code, message, help) = match code.glance(&path) {
            Ok(()) => continue,
            Err(TableError::Columns(m)) => (
                "pipeline::data::bad_label_column",
                format!("{}: {m}", path.display()),
                "set `label` and `features` in `data` to columns the file has",
            ),
            Err(TableError::Io(m) | TableError::Line { message: m, .. }) => (
                "pipeline::data::unreadable",
                format!("cannot read {}: {m}", path.display()),
                "check the file",
            ),
        };
        problems.push(
            Diagnostic::error(code, message)
                .label_opt(file.span, what)
                .help(help),
        );
    }
    // The data file's first rows, as the run reads them (texts are tokenised, not read as
    // numbers).
    let path = manifest.resolve(&data.source.value);
    if let (Ok(code), None, true) = (
        table(data.format),
        &data.text,
        std::fs::metadata(&path).is_ok_and(|m| m.is_file()) && problems.is_empty(),
    ) {
        match code.glance_rows(&path, &data.dialect, Layout::of(data)) {
            Err(e) => problems.push(crate::table::diagnostic(data, &path, e, data.format)),
            Ok(Some(t)) => {
                let rows = (t.rows() >= crate::table::GLANCE_ROWS).then_some(t.rows());
                problems.extend(
                    t.categorical
                        .iter()
                        .filter_map(|c| crate::categorical::too_many(data, &path, c, rows)),
                );
            }
            Ok(None) => {}
        }
    }
    problems
}

fn no_code(name: &str) -> String {
    format!(
        "the data format `{name}` is described, but this program has no code for it (`register_table_format` or `register_data_format` registers both)"
    )
}

/// An array of `f32` in row-major order, samples first.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub values: Vec<f32>,
    /// `[samples, …]`; `values.len()` is its product.
    pub shape: Vec<usize>,
}

impl Array {
    /// `values` of `shape`; refused (with why) when their counts differ or `shape` has no
    /// sample axis.
    pub fn new(values: Vec<f32>, shape: Vec<usize>) -> Result<Array, String> {
        let array = Array { values, shape };
        array.check()?;
        Ok(array)
    }

    /// Whether it has a sample axis and as many values as its shape holds (its fields are
    /// public: a format's code may build it without [`Array::new`]).
    fn check(&self) -> Result<(), String> {
        if self.shape.is_empty() {
            return Err("an array of samples has a first axis, the samples".into());
        }
        let count: usize = self.shape.iter().product();
        if count != self.values.len() {
            return Err(format!(
                "{} values cannot be an array of shape {:?} ({count} values)",
                self.values.len(),
                self.shape
            ));
        }
        Ok(())
    }

    pub fn samples(&self) -> usize {
        self.shape[0]
    }
}

/// What a file of a registered format holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    /// `[samples, …]`: one sample's features is an array of `shape[1..]`.
    pub features: Array,
    /// One per sample (`[samples]`: a class index or a target, NaN where missing), or
    /// `[samples, k]` (several targets, or multi-label 0/1); `None` when the file has
    /// none, and the manifest names a labels file.
    pub labels: Option<Array>,
}

/// A data format's code: reading its file. Its description (name, documentation,
/// extensions) is what `check` and `pipeline explain data.format` know of it.
pub trait FileFormat: Sync + 'static {
    fn describe(&self) -> &'static FormatDescription;

    /// The features and labels of the file at `path`; `Err` says what is wrong with it
    /// (shown with the file's name, located at `data.source`).
    fn read(&self, path: &Path) -> Result<Samples, String>;

    /// The shape of one sample's features, for `check`: by default the file read whole;
    /// a format that can tell it from a header says so here.
    fn sample_shape(&self, path: &Path) -> Result<Vec<usize>, String> {
        let features = self.read(path)?.features;
        Ok(features.shape.get(1..).unwrap_or_default().to_vec())
    }
}

static READERS: Registry<dyn FileFormat> = Registry::new(Vec::new, |f| f.describe().name);

/// Adds a data format of samples: its description (what `data.format` names it, the
/// extensions `format "auto"` knows it by; of kind [`FormatKind::Samples`]) and its code.
/// Refused (with why) when its name or an extension is another format's.
pub fn register_data_format(member: &'static dyn FileFormat) -> Result<(), String> {
    let description = member.describe();
    if description.kind != FormatKind::Samples {
        return Err(format!(
            "the data format `{}` is registered as samples its code reads, and its description says {:?}",
            description.name, description.kind
        ));
    }
    manifests::formats::register(description)?;
    READERS.register(member)
}

/// The code of the format of samples `format`; `Err` when a program described it without
/// registering its code.
pub fn reader(format: DataFormat) -> Result<&'static dyn FileFormat, String> {
    READERS
        .get(format.as_str())
        .ok_or_else(|| no_code(format.as_str()))
}

/// What the file at `path` reads as, checked: samples in the features and the labels
/// alike, at least one feature per sample.
pub fn read(format: DataFormat, path: &Path) -> Result<Samples, String> {
    let samples = reader(format)?.read(path)?;
    let features = &samples.features;
    for array in std::iter::once(features).chain(&samples.labels) {
        array
            .check()
            .map_err(|why| format!("the `{}` format's code gave {why}", format.as_str()))?;
    }
    if features.shape.len() < 2 || features.shape[1..].contains(&0) {
        return Err(format!(
            "the `{}` format's code gave features of shape {:?}: a sample needs at least one feature",
            format.as_str(),
            features.shape
        ));
    }
    if let Some(labels) = &samples.labels {
        if labels.samples() != features.samples() || labels.shape.len() > 2 {
            return Err(format!(
                "{} samples of features but labels of shape {:?}: one label (or one row of targets) per sample",
                features.samples(),
                labels.shape
            ));
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A table format of whitespace-separated numbers, its last column the label.
    struct Spaced(&'static FormatDescription);

    impl TableFormat for Spaced {
        fn describe(&self) -> &'static FormatDescription {
            self.0
        }

        fn read(&self, path: &Path, _: &Dialect, layout: Layout<'_>) -> Result<Table, TableError> {
            let dialect = Dialect {
                delimiter: manifests::Delimiter::Whitespace,
                header: false,
                skip_rows: 0,
                comment: None,
            };
            crate::table::read(path, &dialect, layout)
        }

        fn peek_features(&self, _: &Path, _: &Dialect, _: Layout<'_>) -> Option<usize> {
            None
        }
    }

    const fn table(name: &'static str, streams: bool) -> FormatDescription {
        FormatDescription {
            name,
            title: name,
            doc: "numbers apart by spaces",
            extensions: &[],
            kind: FormatKind::Table {
                text: false,
                streams,
            },
        }
    }

    #[test]
    fn a_registered_table_format_is_found_by_its_extension_and_read_by_its_code() {
        static SPACED: FormatDescription = FormatDescription {
            extensions: &[".spaced"],
            ..table("spaced", false)
        };
        static CODE: Spaced = Spaced(&SPACED);
        register_table_format(&CODE).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join("d.spaced");
        std::fs::write(&path, "1 2 0\n3  4 1\n").unwrap();
        let format = DataFormat::of_name(&path).unwrap();
        assert_eq!(format.as_str(), "spaced");
        let label = [manifests::Column::Last];
        let layout = Layout::Both {
            labels_are_features: false,
            label: &label,
            features: &[],
            categorical: &[],
            dates: &[],
        };
        let t = super::table(format)
            .unwrap()
            .read(&path, &CSV_DIALECT, layout)
            .unwrap();
        assert_eq!(t.features, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.labels[0], [Some("0".into()), Some("1".into())]);
        assert_eq!(
            register_table_format(&CODE).unwrap_err(),
            "`spaced` is already a data format"
        );
    }

    const CSV_DIALECT: Dialect = Dialect {
        delimiter: manifests::Delimiter::Auto,
        header: false,
        skip_rows: 0,
        comment: None,
    };

    #[test]
    fn a_format_registered_as_what_its_description_is_not_is_refused() {
        static STREAMS: FormatDescription = FormatDescription {
            extensions: &[".streams"],
            ..table("streams", true)
        };
        static STREAMING: Spaced = Spaced(&STREAMS);
        assert_eq!(
            register_table_format(&STREAMING).unwrap_err(),
            "the data format `streams` says it streams only when its code reads it a group of columns at a time (`TableFormat::columns`)"
        );
        static SAMPLES: FormatDescription = FormatDescription {
            kind: FormatKind::Samples,
            extensions: &[".samples"],
            ..table("samples", false)
        };
        static NOT_A_TABLE: Spaced = Spaced(&SAMPLES);
        assert!(register_table_format(&NOT_A_TABLE)
            .unwrap_err()
            .starts_with("the data format `samples` is registered as a table"));
        static ARRAYS: FormatDescription = FormatDescription {
            kind: FormatKind::Arrays,
            extensions: &[".arrays"],
            ..table("arrays", false)
        };
        assert_eq!(
            manifests::formats::register(&ARRAYS).unwrap_err(),
            "the data format `arrays` is Arrays: a program adds tables and samples its code reads; the other kinds are pipeline's own"
        );
        assert!(DataFormat::parse("streams").is_none() && DataFormat::parse("arrays").is_none());
    }
}
