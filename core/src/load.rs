//! What `data.load` resolves to: whether a run streams its features (reads them per
//! batch) or holds them in memory. `auto` streams `.npy` features (one file or shards)
//! and Parquet features whose float32 size passes [`STREAM_ABOVE_BYTES`], when streaming
//! can take them (not a median fill, not token ids, not a text column). Images decide
//! for themselves (`image_listing.rs`), from their pixels' size. What `auto` resolves to
//! is in the cache key, so both the key and the loader ask [`streams`].

use crate::shards::{files_of, open};
use crate::table::Layout;
use manifests::{FormatKind, Load, Manifest, Missing, STREAM_ABOVE_BYTES};

/// Whether the run streams its `.npy` or Parquet features.
pub fn streams(manifest: &Manifest) -> bool {
    let data = &manifest.data;
    if !data.format.streams() {
        return false;
    }
    match data.load.value {
        Load::Memory => false,
        Load::Stream => true,
        Load::Auto => {
            if data.missing == Missing::Median
                || data.padding_id.is_some()
                || data.text.is_some()
                || data.window.is_some()
            {
                return false;
            }
            let values = match data.format.kind() {
                FormatKind::Table { .. } => {
                    let path = manifest.resolve(&data.source.value);
                    let code = crate::formats::table(data.format)
                        .ok()
                        .and_then(|t| t.columns());
                    match code.map(|c| c.shape(&path, Layout::of(data))) {
                        Some(Ok((rows, features))) => (rows as u64).saturating_mul(features as u64),
                        Some(Err(_)) | None => return false,
                    }
                }
                FormatKind::Array
                | FormatKind::Arrays
                | FormatKind::Images { .. }
                | FormatKind::Samples => {
                    let shards =
                        files_of(&manifest.base_dir, &data.source.value).and_then(|f| open(&f));
                    let Ok(shards) = shards else {
                        return false;
                    };
                    shards
                        .iter()
                        .map(|s| s.header.shape.iter().product::<i64>().max(0) as u64)
                        .sum()
                }
            };
            values.saturating_mul(4) > STREAM_ABOVE_BYTES
        }
    }
}
