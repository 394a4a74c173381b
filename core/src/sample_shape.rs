//! The shape of one sample as `pipeline check` can know it without loading the data:
//! from the first row of a CSV file (plain or gzip, read as `data` says: delimiter,
//! skipped lines, header, the feature columns) or a Parquet file's schema, so that the
//! model's shapes are checked through the whole network before any run.
//!
//! Images: `[channels, height, width]` from the transforms when they fix the size, else
//! from the first image's header (`image_listing::sample_shape`).
//!
//! Honest limitation: only CSV, Parquet and images are peeked at today; for NPY, NPZ and safetensors data the
//! shapes are checked by the run's dry pass, once the data is loaded (the data sources of
//! issue 13 will say their shapes before loading). A file that cannot be read gives
//! `None`: reading it is the run's to report, with the file and line.

use crate::table::{peek_features, Layout};
use manifests::{DataFormat, Diagnostic, Manifest};

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
    Ok(table_shape(manifest))
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
    let features = match spec.format {
        DataFormat::Parquet => crate::parquet::peek_features(&path, Layout::of(spec))?,
        _ => peek_features(&path, &spec.dialect, Layout::of(spec))?,
    };
    Some(vec![features as i64])
}
