//! Exporting weights: a safetensors file (device-free, fp32, names like PyTorch's
//! `state_dict`) plus a JSON of metadata, each written to a temporary file and renamed.
//!
//! Every safetensors file `pipeline` writes carries `"written_by": "pipeline"` in its
//! header (`pipeline_core::outputs::WRITTEN_BY`): a checkpoint `path` is only ever
//! written over a file that carries it (`pipeline_core::outputs::may_replace`).

use crate::model::Model;
use manifests::Diagnostic;
use pipeline_core::outputs::{metadata_path, WRITTEN_BY};
use safetensors::tensor::{Dtype, View};
use std::borrow::Cow;
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
    let meta_path = metadata_path(path);
    let text = serde_json::to_string_pretty(metadata).expect("JSON values serialise");
    cache::write_atomic(&meta_path, text.as_bytes()).map_err(|e| write_failed(&meta_path, e))?;
    Ok(vec![path.to_path_buf(), meta_path])
}

fn write_failed(path: &Path, e: std::io::Error) -> Diagnostic {
    Diagnostic::error(
        "pipeline::checkpoint::write_failed",
        format!("cannot write {}: {e}", path.display()),
    )
    .help("check that the directory is writable and the disk is not full")
}

/// A contiguous CPU tensor as the safetensors writer sees it.
struct CpuView<'a> {
    tensor: &'a Tensor,
    dtype: Dtype,
    shape: Vec<usize>,
}

impl View for CpuView<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let len = self.data_len();
        if len == 0 {
            return Cow::Borrowed(&[]);
        }
        // SAFETY: a contiguous CPU tensor holds `len` bytes at data_ptr, and it outlives
        // the borrow (the view borrows the tensor).
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(self.tensor.data_ptr() as *const u8, len)
        })
    }
    fn data_len(&self) -> usize {
        self.tensor.numel() * self.tensor.kind().elt_size_in_bytes()
    }
}

/// The safetensors name of a tensor's element type.
fn dtype(kind: Kind) -> std::io::Result<Dtype> {
    Ok(match kind {
        Kind::Bool => Dtype::BOOL,
        Kind::Uint8 => Dtype::U8,
        Kind::Int8 => Dtype::I8,
        Kind::Int16 => Dtype::I16,
        Kind::Int => Dtype::I32,
        Kind::Int64 => Dtype::I64,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Float => Dtype::F32,
        Kind::Double => Dtype::F64,
        other => {
            return Err(std::io::Error::other(format!(
                "cannot store {other:?} tensors"
            )))
        }
    })
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
    let bytes = safetensors_bytes(&named)
        .and_then(|bytes| with_metadata(&bytes))
        .map_err(|e| write_failed(path, e))?;
    cache::write_atomic(path, &bytes).map_err(|e| write_failed(path, e))
}

/// The safetensors file of `named` contiguous CPU tensors, in memory (written by the
/// caller, so that a failed write is the system's error, said as such).
pub(crate) fn safetensors_bytes(named: &[(String, Tensor)]) -> std::io::Result<Vec<u8>> {
    let views = named
        .iter()
        .map(|(name, t)| {
            Ok((
                name.as_str(),
                CpuView {
                    tensor: t,
                    dtype: dtype(t.kind())?,
                    shape: t.size().iter().map(|&d| d as usize).collect(),
                },
            ))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    safetensors::tensor::serialize(views, &None)
        .map_err(|e| std::io::Error::other(format!("{e:?}")))
}

/// The safetensors file `bytes` with `__metadata__` added to its header: the marker of
/// files `pipeline` wrote, and `"format": "pt"`, which Hugging Face's loaders expect of a
/// PyTorch state dict. The header is rewritten with sorted keys (the crate takes the
/// metadata as a `HashMap`, whose order, and so the file's bytes, would vary from run
/// to run), padded to 8 bytes as the format asks; the tensor data is unchanged.
fn with_metadata(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let bad = || std::io::Error::other("the safetensors writer produced no header");
    let len = u64::from_le_bytes(
        bytes
            .get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let end = 8 + usize::try_from(len).map_err(|_| bad())?;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes.get(8..end).ok_or_else(bad)?)?;
    header.insert(
        "__metadata__".into(),
        serde_json::json!({ "format": "pt", (WRITTEN_BY.0): WRITTEN_BY.1 }),
    );
    let mut text = serde_json::to_vec(&header)?;
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + text.len() + bytes.len() - end);
    out.extend((text.len() as u64).to_le_bytes());
    out.extend(text);
    out.extend(&bytes[end..]);
    Ok(out)
}
