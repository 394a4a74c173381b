//! The shape of one sample as `pipeline check` can know it without loading the data:
//! from the first row of a CSV file (plain or gzip, read as `data` says: delimiter,
//! skipped lines, header, the feature columns) or a Parquet file's schema, so that the
//! model's shapes are checked through the whole network before any run.
//!
//! Images: `[channels, height, width]` from the transforms when they fix the size, else
//! from the first image's header (`image_listing::sample_shape`).
//!
//! NPY: the array's header (`npy::peek_shape`), or its shards' (`shards.rs`). NPZ and
//! safetensors are not peeked at: their shapes are checked by the run's dry pass, once the
//! data is loaded. A file that cannot be read gives `None`: reading it is the run's to
//! report, with the file and line.

use crate::network::Input;
use crate::table::Layout;
use manifests::{DataFormat, Diagnostic, FormatKind, InputSpec, Manifest};

/// One sample's shape: the CSV's feature columns, as a vector; images' `[channels,
/// height, width]`, or an error when a transform cannot take the first image.
pub fn of(manifest: &Manifest) -> Result<Option<Vec<i64>>, Diagnostic> {
    let spec = &manifest.data;
    if spec.format.is_images() {
        return crate::image_listing::sample_shape(manifest);
    }
    if let Some(text) = &spec.text {
        return Ok(Some(vec![text.max_length as i64]));
    }
    if spec.format.kind() == FormatKind::Samples {
        return samples_shape(manifest, spec.format, &spec.source.value).map_err(|why| {
            Diagnostic::error("pipeline::data::unreadable", why)
                .label_opt(
                    spec.source.span,
                    format!("read as {}", spec.format.as_str()),
                )
                .help("check the file: its format's code could not read it")
        });
    }
    if spec.format.kind() == FormatKind::Array {
        // One file or shards (`shards::check` reports shards that are not one data set).
        let Ok(files) = crate::shards::files_of(&manifest.base_dir, &spec.source.value) else {
            return Ok(None);
        };
        if !files
            .iter()
            .all(|f| std::fs::metadata(f).is_ok_and(|m| m.is_file()))
        {
            return Ok(None);
        }
        let Ok(shards) = crate::shards::open(&files) else {
            return Ok(None);
        };
        return Ok(sample_of(shards[0].header.shape.clone()));
    }
    Ok(table_shape(manifest))
}

/// One sample's shape of an array of `shape` (samples first), when it has one.
fn sample_of(shape: Vec<i64>) -> Option<Vec<i64>> {
    match &shape[..] {
        [_, rest @ ..] if !rest.is_empty() && !rest.contains(&0) => Some(rest.to_vec()),
        _ => None,
    }
}

/// Every model input with its shape, when all of them can be known without loading the
/// data (`data.inputs` from CSV and Parquet files: their columns).
pub fn inputs(manifest: &Manifest) -> Result<Option<Vec<Input>>, Diagnostic> {
    let Some(first) = of(manifest)? else {
        return Ok(None);
    };
    let extra: Option<Vec<Vec<i64>>> = manifest
        .data
        .extra_inputs
        .iter()
        .map(|input| input_shape(manifest, input))
        .collect();
    Ok(extra.map(|extra| Input::of_data(&manifest.data, &first, &extra)))
}

/// The columns of an input from a CSV or Parquet file.
fn input_shape(manifest: &Manifest, input: &InputSpec) -> Option<Vec<i64>> {
    let path = manifest.resolve(&input.source.value);
    if !std::fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let layout = Layout::Features(&input.features);
    let columns = match input.format.kind() {
        FormatKind::Table { .. } => {
            let code = crate::formats::table(input.format).ok()?;
            code.peek_features(&path, &manifest.data.dialect, layout)?
        }
        FormatKind::Array => return sample_of(crate::npy::peek_shape(&path)?),
        FormatKind::Samples => {
            return samples_shape(manifest, input.format, &input.source.value).ok()?
        }
        // Known when read (an array of the file's); an input is never images (refused
        // when lowered).
        FormatKind::Arrays | FormatKind::Images { .. } => return None,
    };
    Some(vec![columns as i64])
}

/// One sample's shape in the file `written` of a format of samples, as its code reads it
/// (`Err`: why it cannot, with the file's name); `None` when there is no file to read
/// (the run says so).
fn samples_shape(
    manifest: &Manifest,
    format: DataFormat,
    written: &std::path::Path,
) -> Result<Option<Vec<i64>>, String> {
    let path = manifest.resolve(written);
    // Regular files only: a FIFO would block `check`.
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return Ok(None);
    }
    let shape = crate::formats::reader(format)?
        .sample_shape(&path)
        .map_err(|why| format!("{}: {why}", path.display()))?;
    let shape: Vec<i64> = shape.into_iter().map(|d| d as i64).collect();
    Ok((!shape.is_empty() && !shape.contains(&0)).then_some(shape))
}

/// A CSV's or Parquet file's feature columns.
fn table_shape(manifest: &Manifest) -> Option<Vec<i64>> {
    let spec = &manifest.data;
    if !spec.format.is_table() {
        return None;
    }
    let path = manifest.resolve(&spec.source.value);
    // Regular files only: a FIFO would block `check` (the run refuses it, named).
    if !std::fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let code = crate::formats::table(spec.format).ok()?;
    let features = code.peek_features(&path, &spec.dialect, Layout::of(spec))?;
    Some(vec![features as i64])
}
