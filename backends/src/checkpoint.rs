//! Exporting weights: a safetensors file (device-free, fp32, names like PyTorch's
//! `state_dict`) plus a JSON of metadata, each written to a temporary file and renamed.

use crate::model::Model;
use manifests::Diagnostic;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, Tensor};

/// Writes `model`'s weights to `path` and `metadata` next to it (`.json`); returns both
/// paths.
pub fn save(
    model: &Model,
    path: &Path,
    metadata: &serde_json::Value,
) -> Result<Vec<PathBuf>, Diagnostic> {
    write_weights(model, path, Kind::Float)?;
    let meta_path = path.with_extension("json");
    let text = serde_json::to_string_pretty(metadata).expect("JSON values serialise");
    cache::write_atomic(&meta_path, text.as_bytes()).map_err(|e| write_failed(&meta_path, e))?;
    Ok(vec![path.to_path_buf(), meta_path])
}

fn write_failed(path: &Path, e: std::io::Error) -> Diagnostic {
    Diagnostic::error(
        "pipeline::checkpoint::write_failed",
        format!("cannot write {}: {e}", path.display()),
    )
    .help("check that the directory is writable")
}

/// Writes `model`'s weights (in `kind` if floating, on the CPU, sorted by name) to `path`,
/// atomically. Exports are fp32; the cache keeps the training dtype, so that a model taken
/// from it is the model that was trained.
pub fn write_weights(model: &Model, path: &Path, kind: Kind) -> Result<(), Diagnostic> {
    let mut named: Vec<(String, Tensor)> = model
        .vs
        .variables()
        .into_iter()
        .map(|(k, v)| {
            let v = v.to_device(Device::Cpu);
            let v = if v.is_floating_point() {
                v.to_kind(kind)
            } else {
                v
            };
            (k, v.contiguous())
        })
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    cache::write_atomic_with(path, |tmp| {
        Tensor::write_safetensors(&named, tmp)
            .map_err(|e| std::io::Error::other(crate::error::short_message(&e)))
    })
    .map_err(|e| write_failed(path, e))
}
