//! Reading NPY, NPZ and safetensors arrays straight into tensor memory (the code of the
//! NPZ and safetensors formats, `manifests::formats`).
//!
//! libtorch's own readers (through tch) first read a whole file into a growing buffer
//! and then copy it into a tensor: two to three times the data's size at the peak. These
//! read each array's bytes once, into a tensor allocated at its final size, and read only
//! the arrays asked for.

use manifests::formats::{DataFormat, FormatDescription, NPZ, SAFETENSORS};
use manifests::registry::Registry;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// A little-endian element type as NPY (`<f4`) and safetensors (`F32`) name it.
fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        "<f4" | "F32" => Kind::Float,
        "<f8" | "F64" => Kind::Double,
        "<f2" | "F16" => Kind::Half,
        "<i8" | "I64" => Kind::Int64,
        "<i4" | "I32" => Kind::Int,
        "<i2" | "I16" => Kind::Int16,
        "|i1" | "I8" => Kind::Int8,
        "|u1" | "U8" => Kind::Uint8,
        "|b1" | "BOOL" => Kind::Bool,
        _ => return None,
    })
}

/// Allocates a CPU tensor of `shape` and fills it with exactly its size in bytes from `reader`.
fn read_tensor(reader: &mut impl Read, shape: &[i64], kind: Kind) -> Result<Tensor, String> {
    let tensor =
        Tensor::f_empty(shape, (kind, Device::Cpu)).map_err(|e| crate::error::short_message(&e))?;
    let bytes = tensor.numel() * kind.elt_size_in_bytes();
    if bytes > 0 {
        // SAFETY: a new, contiguous CPU tensor owns exactly `bytes` bytes at data_ptr,
        // and nothing else refers to it while it is filled.
        let memory = unsafe { std::slice::from_raw_parts_mut(tensor.data_ptr() as *mut u8, bytes) };
        reader
            .read_exact(memory)
            .map_err(|e| format!("the data ends early ({e})"))?;
    }
    Ok(tensor)
}

/// Reads one NPY array (header, as `pipeline_core::npy` reads it, and data) from `reader`.
fn read_npy_from(reader: &mut impl Read) -> Result<Tensor, String> {
    let header = pipeline_core::npy::read_header_from(reader)?;
    let descr = &header.descr;
    let kind = kind_of(descr).ok_or_else(|| format!("unsupported element type {descr}"))?;
    if header.fortran_order {
        return Err(
            "Fortran-ordered arrays are not supported; save with np.ascontiguousarray".into(),
        );
    }
    read_tensor(reader, &header.shape, kind)
}

/// Reads an `.npy` file.
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    read_npy_from(&mut BufReader::with_capacity(1 << 20, file))
}

/// The code of a format of named arrays (`FormatKind::Arrays`).
trait NamedArrays: Sync {
    fn describe(&self) -> &'static FormatDescription;

    /// The arrays `names` of the file at `path`, in order; `Err` for a missing one starts
    /// `no array named` and lists what the file holds.
    fn read(&self, path: &Path, names: &[&str]) -> Result<Vec<Tensor>, String>;
}

struct Npz;

impl NamedArrays for Npz {
    fn describe(&self) -> &'static FormatDescription {
        &NPZ
    }

    fn read(&self, path: &Path, names: &[&str]) -> Result<Vec<Tensor>, String> {
        read_npz(path, names)
    }
}

struct Safetensors;

impl NamedArrays for Safetensors {
    fn describe(&self) -> &'static FormatDescription {
        &SAFETENSORS
    }

    fn read(&self, path: &Path, names: &[&str]) -> Result<Vec<Tensor>, String> {
        read_safetensors(path, names)
    }
}

static NAMED_ARRAYS: Registry<dyn NamedArrays> = Registry::new(
    || vec![&Npz as &dyn NamedArrays, &Safetensors],
    |f| f.describe().name,
);

/// Reads the arrays `names` of the file at `path`, of the named-arrays format `format`.
pub fn read_named(format: DataFormat, path: &Path, names: &[&str]) -> Result<Vec<Tensor>, String> {
    let code = NAMED_ARRAYS.get(format.as_str()).ok_or_else(|| {
        format!(
            "the data format `{}` is not one of named arrays",
            format.as_str()
        )
    })?;
    code.read(path, names)
}

/// Reads the arrays `names` from an `.npz` file; `Err` lists what the file holds.
fn read_npz(path: &Path, names: &[&str]) -> Result<Vec<Tensor>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let mut zip =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| format!("not an NPZ file ({e})"))?;
    let mut available: Vec<String> = zip
        .file_names()
        .map(|n| n.trim_end_matches(".npy").to_string())
        .collect();
    available.sort();
    names
        .iter()
        .map(|name| {
            let mut entry = zip.by_name(&format!("{name}.npy")).map_err(|_| {
                format!("no array named `{name}`; it has: {}", available.join(", "))
            })?;
            read_npy_from(&mut entry).map_err(|e| format!("array `{name}`: {e}"))
        })
        .collect()
}

/// Reads the tensors `names` from a `.safetensors` file; `Err` lists what the file holds.
fn read_safetensors(path: &Path, names: &[&str]) -> Result<Vec<Tensor>, String> {
    let mut file = File::open(path).map_err(|e| e.to_string())?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|_| "not a safetensors file (too short)".to_string())?;
    let len = u64::from_le_bytes(len);
    if len > 100_000_000 {
        return Err("not a safetensors file (header too large)".into());
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(|e| e.to_string())?;
    let header: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| format!("not a safetensors file ({e})"))?;
    let available: Vec<&str> = header
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "__metadata__")
        .collect();
    names
        .iter()
        .map(|name| {
            let info = header.get(*name).ok_or_else(|| {
                format!("no array named `{name}`; it has: {}", available.join(", "))
            })?;
            let dtype = info["dtype"].as_str().unwrap_or("?");
            let kind = kind_of(dtype)
                .ok_or_else(|| format!("`{name}`: unsupported element type {dtype}"))?;
            let shape: Vec<i64> = info["shape"]
                .as_array()
                .map(|a| a.iter().filter_map(|d| d.as_i64()).collect())
                .unwrap_or_default();
            let begin = info["data_offsets"][0]
                .as_u64()
                .ok_or_else(|| format!("`{name}`: no data offsets"))?;
            file.seek(SeekFrom::Start(8 + len + begin))
                .map_err(|e| e.to_string())?;
            read_tensor(
                &mut BufReader::with_capacity(1 << 20, &mut file),
                &shape,
                kind,
            )
            .map_err(|e| format!("`{name}`: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_libtorch_writes() {
        let dir = std::env::temp_dir().join(format!("pipeline-arrays-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let x = Tensor::arange(12, (Kind::Float, Device::Cpu)).reshape([3, 4]);
        let y = Tensor::from_slice(&[1i64, 2, 3]);
        x.write_npy(dir.join("x.npy")).unwrap();
        Tensor::write_npz(&[("x", &x), ("y", &y)], dir.join("d.npz")).unwrap();
        Tensor::write_safetensors(&[("x", &x), ("y", &y)], dir.join("d.safetensors")).unwrap();
        assert!(read_npy(&dir.join("x.npy")).unwrap().equal(&x));
        let both = read_npz(&dir.join("d.npz"), &["y", "x"]).unwrap();
        assert!(both[0].equal(&y) && both[1].equal(&x));
        let both = read_safetensors(&dir.join("d.safetensors"), &["x", "y"]).unwrap();
        assert!(both[0].equal(&x) && both[1].equal(&y));
        assert_eq!(
            read_npz(&dir.join("d.npz"), &["z"]).unwrap_err(),
            "no array named `z`; it has: x, y"
        );
        assert_eq!(
            read_npy(&dir.join("d.npz")).unwrap_err(),
            "not an NPY array (bad magic bytes)"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
