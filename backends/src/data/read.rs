//! Reading the data's files: the features (with their names) and the labels as written,
//! from CSV, Parquet, NPY, NPZ, safetensors or a registered format, and from a separate
//! labels file. What the labels mean (classes, targets) and what missing values do is
//! `mod.rs`'s.

use super::{data_error, Origin};
use crate::arrays;
use manifests::{DataFormat, DataSpec, Diagnostic, FormatKind};
use pipeline_core::categorical::Categories;
use pipeline_core::formats;
use pipeline_core::shards::{self, Shard, ShardError};
use pipeline_core::table::{self, Layout, Table, TableError};
use pipeline_core::text::TextTokenizer;
use std::path::{Path, PathBuf};
use tch::Tensor;

/// The labels as read, before they become tensors of class indices or targets.
pub(super) enum Labels {
    /// Cells of a CSV or Parquet file (the data's or a labels file's), per label column,
    /// with the column names.
    Cells {
        columns: Vec<Vec<Option<String>>>,
        names: Vec<String>,
        /// Each row's line in a CSV; `None` for Parquet, whose row `i` is the `i`th.
        lines: Option<Vec<usize>>,
        path: PathBuf,
    },
    /// An array (NaN where missing).
    Array(Tensor),
}

impl Labels {
    pub(super) fn rows(&self) -> i64 {
        match self {
            Labels::Cells { columns, .. } => columns.first().map_or(0, Vec::len) as i64,
            Labels::Array(t) => t.size().first().copied().unwrap_or(0),
        }
    }
}

/// What a data file holds, as read.
pub(super) struct Source {
    pub features: Tensor,
    /// One per feature of a sample.
    pub names: Vec<String>,
    /// `None` when they come from a labels file.
    pub labels: Option<Labels>,
    pub origin: Origin,
    /// Texts: 1 for each token, 0 for padding (the tokenizer's attention mask).
    pub mask: Option<Tensor>,
    /// A table's categorical feature columns, as read (`features` holds the others).
    pub categorical: Vec<Categories>,
    /// A table's feature columns by name, as chosen (a date column once, its parts among
    /// `names`; a categorical one too).
    pub columns: Vec<String>,
    /// A table's columns of dates, each with the parts it gives.
    pub dates: Vec<(String, Vec<manifests::DatePart>)>,
}

/// Reads the features (with their names) and, unless there is a labels file, the labels.
pub(super) fn read_source(
    base: &Path,
    spec: &DataSpec,
    tokenizer: Option<&TextTokenizer>,
) -> Result<Source, Diagnostic> {
    let path = &base.join(&spec.source.value);
    // Errors of the array readers: a missing array names what the file holds.
    let array_error = |file: &Path, message: String| {
        let (code, help) = if message.starts_with("no array named") {
            (
                "pipeline::data::missing_array",
                "set `features` and `labels` in `data` to names the file holds",
            )
        } else {
            (
                "pipeline::data::unreadable",
                "check that the file is a valid array file",
            )
        };
        data_error(code, spec, format!("{}: {message}", file.display()), help)
    };
    let separate = spec.labels_file.is_some();
    // (A 0-d array has no samples: the shape check after reading says so.)
    let feature_names = |t: &Tensor| {
        let per_sample: i64 = t.size().get(1..).unwrap_or(&[]).iter().product();
        (0..per_sample).map(|j| format!("feature {j}")).collect()
    };
    let plain = |features: Tensor, names: Vec<String>, labels, origin| Source {
        features,
        columns: names.clone(),
        names,
        labels,
        origin,
        mask: None,
        categorical: Vec::new(),
        dates: Vec::new(),
    };
    Ok(match spec.format.kind() {
        FormatKind::Table { .. } if spec.text.is_some() => {
            read_text(path, spec, tokenizer.expect("text data has a tokenizer"))?
        }
        FormatKind::Table { .. } => {
            let mut t = read_table(path, spec, spec.format, Layout::of(spec))?;
            let rows = t.rows() as i64;
            let features =
                Tensor::from_slice(&t.features).reshape([rows, t.feature_names.len() as i64]);
            let origin = match spec.format.is_text_table() {
                true => Origin::Lines(t.lines.clone()),
                false => Origin::Indices,
            };
            let names = t.feature_names.clone();
            let categorical = std::mem::take(&mut t.categorical);
            let columns = std::mem::take(&mut t.columns);
            let dates = std::mem::take(&mut t.dates);
            let labels = (!separate).then(|| cells(t, path, spec.format));
            Source {
                categorical,
                columns,
                dates,
                ..plain(features, names, labels, origin)
            }
        }
        FormatKind::Array => {
            let (features, shards) = read_npy_files(base, &spec.source.value)
                .map_err(|(file, e)| array_error(&file, e))?;
            let names = feature_names(&features);
            let origin = match shards {
                Some(shards) => Origin::Shards(shards),
                None => Origin::Indices,
            };
            plain(features, names, None, origin)
        }
        FormatKind::Images { .. } => {
            unreachable!("image data is loaded by `Dataset::load_images`")
        }
        FormatKind::Samples => {
            let (features, labels) = read_samples(spec.format, path).map_err(|e| {
                data_error(
                    "pipeline::data::unreadable",
                    spec,
                    format!("{}: {e}", path.display()),
                    "check the file: its format's code could not read it",
                )
            })?;
            let labels = match (separate, labels) {
                (true, _) => None,
                (false, Some(labels)) => Some(Labels::Array(labels)),
                (false, None) => return Err(data_error(
                    "pipeline::data::no_labels",
                    spec,
                    format!("{} holds no labels", path.display()),
                    "add a labels file to `data`: `labels \"labels.npy\"` (or a `.csv` of labels)",
                )),
            };
            let names = feature_names(&features);
            plain(features, names, labels, Origin::Indices)
        }
        FormatKind::Arrays => {
            let mut names = vec![spec.features_array()];
            if !separate {
                names.push(spec.labels_array.as_str());
            }
            let mut arrays =
                arrays::read_named(spec.format, path, &names).map_err(|e| array_error(path, e))?;
            let labels = (!separate).then(|| Labels::Array(arrays.pop().expect("asked for")));
            let features = arrays.pop().expect("asked for");
            let names = feature_names(&features);
            plain(features, names, labels, Origin::Indices)
        }
    })
}

/// The features and (when the file holds them) the labels of a file of a format of
/// samples, as its code reads them, as tensors.
pub(super) fn read_samples(
    format: DataFormat,
    path: &Path,
) -> Result<(Tensor, Option<Tensor>), String> {
    let tensor = |a: formats::Array| {
        let shape: Vec<i64> = a.shape.iter().map(|&d| d as i64).collect();
        Tensor::from_slice(&a.values).reshape(shape)
    };
    let samples = formats::read(format, path)?;
    Ok((tensor(samples.features), samples.labels.map(tensor)))
}

/// What could not be read, and why.
type FileError = (PathBuf, String);

/// An `.npy` file, or the shards a pattern names one after another (with their headers,
/// for messages), as written in the manifest (relative to `base`); `Err` names the file.
fn read_npy_files(base: &Path, written: &Path) -> Result<(Tensor, Option<Vec<Shard>>), FileError> {
    let path = base.join(written);
    if !shards::is_pattern(base, written) {
        let array = arrays::read_npy(&path).map_err(|e| (path.clone(), e))?;
        return Ok((array, None));
    }
    let named = |e: ShardError| match e {
        ShardError::Unreadable { path, why } => (path, why),
        other => (path.clone(), other.to_string()),
    };
    let files = shards::files_of(base, written).map_err(named)?;
    let shards = shards::open(&files).map_err(named)?;
    let parts = shards
        .iter()
        .map(|s| arrays::read_npy(&s.path).map_err(|e| (s.path.clone(), e)))
        .collect::<Result<Vec<_>, _>>()?;
    let all = Tensor::f_cat(&parts, 0).map_err(|e| (path.clone(), e.to_string()))?;
    Ok((all, Some(shards)))
}

/// A text column tokenised into the features (`max-length` token ids per row; NaN for a
/// missing text, which `data.missing` then handles like any missing feature), and the
/// label cells unless there is a labels file.
fn read_text(
    path: &Path,
    spec: &DataSpec,
    tokenizer: &TextTokenizer,
) -> Result<Source, Diagnostic> {
    let text = spec.text.as_ref().expect("text data");
    let by_line = spec.format.is_text_table();
    let t = table::read_cells(path, spec, std::slice::from_ref(&text.column), "the texts")
        .map_err(|e| table::diagnostic(spec, path, e, spec.format))?;
    let texts: Vec<&str> = t
        .column
        .iter()
        .map(|c| c.as_deref().unwrap_or(""))
        .collect();
    let (ids, mask) = tokenizer.encode(texts).map_err(|e| {
        data_error(
            "pipeline::data::bad_text",
            spec,
            format!(
                "{}: cannot tokenise the texts with {}: {e}",
                path.display(),
                text.tokenizer.value.display()
            ),
            "the tokenizer cannot encode every text of the file: check that it is the one the texts were prepared for, and its vocabulary (its unknown token among them)",
        )
        .label_opt(text.tokenizer.span, "the tokenizer")
    })?;
    let length = text.max_length as usize;
    let mut values: Vec<f32> = ids.iter().map(|&id| id as f32).collect();
    for (row, cell) in t.column.iter().enumerate() {
        if cell.is_none() {
            values[row * length..(row + 1) * length].fill(f32::NAN);
        }
    }
    let rows = t.lines.len() as i64;
    let features = Tensor::from_slice(&values).reshape([rows, length as i64]);
    let mask: Vec<f32> = mask.iter().map(|&m| m as f32).collect();
    let mask = Tensor::from_slice(&mask).reshape([rows, length as i64]);
    let names = vec![t.column_name.clone(); length];
    let origin = match by_line {
        true => Origin::Lines(t.lines.clone()),
        false => Origin::Indices,
    };
    let labels = spec.labels_file.is_none().then(|| Labels::Cells {
        columns: t.labels,
        names: t.label_names,
        lines: by_line.then(|| t.lines.clone()),
        path: path.to_path_buf(),
    });
    Ok(Source {
        features,
        columns: names.clone(),
        names,
        labels,
        origin,
        mask: Some(mask),
        categorical: Vec::new(),
        dates: Vec::new(),
    })
}

/// Reads the table at `path` (of the table format `format`) with `layout`'s columns.
pub(super) fn read_table(
    path: &Path,
    spec: &DataSpec,
    format: DataFormat,
    layout: Layout<'_>,
) -> Result<Table, Diagnostic> {
    formats::table(format)
        .map_err(TableError::Io)
        .and_then(|code| code.read(path, &spec.dialect, layout))
        .map_err(|e| table::diagnostic(spec, path, e, format))
}

/// A table's label cells.
fn cells(t: Table, path: &Path, format: DataFormat) -> Labels {
    Labels::Cells {
        columns: t.labels,
        names: t.label_names,
        lines: format.is_text_table().then_some(t.lines),
        path: path.to_path_buf(),
    }
}

/// Reads the labels file (relative to `base`): `.npy` (or `.npy` shards), or a CSV or
/// Parquet file whose every column is a label (lowering admits no other,
/// [`DataFormat::holds_labels`]).
pub(super) fn read_labels_file(base: &Path, spec: &DataSpec) -> Result<Labels, Diagnostic> {
    let written = &spec
        .labels_file
        .as_ref()
        .expect("a labels file is named")
        .value;
    let path = &base.join(written);
    let at_key = |d: Diagnostic| {
        d.label_opt(
            spec.labels_file.as_ref().and_then(|l| l.span),
            "labels file",
        )
    };
    match DataFormat::of_name(path).map(|f| (f, f.kind())) {
        Some((_, FormatKind::Array)) => read_npy_files(base, written)
            .map(|(labels, _)| Labels::Array(labels))
            .map_err(|(file, e)| {
                at_key(data_error(
                    "pipeline::data::unreadable",
                    spec,
                    format!("{}: {e}", file.display()),
                    "check that the labels file is a valid .npy array",
                ))
            }),
        Some((format, FormatKind::Table { .. })) => {
            let t = read_table(path, spec, format, Layout::Labels).map_err(at_key)?;
            Ok(cells(t, path, format))
        }
        Some((_, FormatKind::Arrays | FormatKind::Images { .. } | FormatKind::Samples)) | None => {
            Err(at_key(data_error(
                "pipeline::data::bad_labels_file",
                spec,
                format!(
                    "{}: a labels file is {}",
                    path.display(),
                    DataFormat::endings(true)
                ),
                "save the labels as one .npy array, or as a table with one row per sample",
            )))
        }
    }
}
