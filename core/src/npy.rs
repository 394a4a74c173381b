//! The shape of an `.npy` array from its header alone (`numpy.lib.format`: the magic
//! `\x93NUMPY`, a version, the header's length, then a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 64), }`), so that `check`
//! knows the shapes of NPY data without reading it, and a streamed data set knows where
//! each sample's bytes are. No libtorch.

use std::io::Read;
use std::path::Path;

/// The longest header read (numpy writes them padded to 64 bytes; 64 KiB is generous).
const MAX_HEADER: usize = 1 << 16;

/// What an `.npy` file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The element type as numpy writes it (`<f4`, `|u1`, …).
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<i64>,
    /// Where the data starts: the bytes of the magic, version, length and header dict.
    pub data_offset: u64,
}

/// The array's shape, or `None` when the file is not an NPY file this can read (the
/// run's reader then says why).
pub fn peek_shape(path: &Path) -> Option<Vec<i64>> {
    read_header(path).ok().map(|h| h.shape)
}

/// The header of the `.npy` file at `path`; `Err` says why it is not one.
pub fn read_header(path: &Path) -> Result<Header, String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    read_header_from(&mut file)
}

/// The header at the start of `file` (a file, or an array inside an NPZ archive), which
/// is left at the first byte of the data; `Err` says why it is not an NPY array.
pub fn read_header_from(file: &mut impl Read) -> Result<Header, String> {
    let mut start = [0u8; 10];
    file.read_exact(&mut start)
        .map_err(|_| "not an NPY array (too short)".to_string())?;
    if &start[..6] != b"\x93NUMPY" {
        return Err("not an NPY array (bad magic bytes)".into());
    }
    let (length, prefix) = match start[6] {
        1 => (u16::from_le_bytes([start[8], start[9]]) as usize, 10),
        2 | 3 => {
            let mut more = [0u8; 2];
            file.read_exact(&mut more)
                .map_err(|_| "not an NPY array (too short)".to_string())?;
            let length = u32::from_le_bytes([start[8], start[9], more[0], more[1]]);
            (length as usize, 12)
        }
        v => return Err(format!("NPY format version {v} is not one numpy writes")),
    };
    if length > MAX_HEADER {
        return Err(format!("the NPY header claims {length} bytes"));
    }
    let mut header = vec![0u8; length];
    file.read_exact(&mut header)
        .map_err(|_| "the NPY header ends early".to_string())?;
    let text =
        std::str::from_utf8(&header).map_err(|_| "the NPY header is not text".to_string())?;
    Ok(Header {
        descr: descr_of(text).ok_or("the NPY header has no descr")?,
        fortran_order: text.contains("'fortran_order': True"),
        shape: shape_of(text).ok_or("the NPY header has no shape")?,
        data_offset: (prefix + length) as u64,
    })
}

/// The `'descr': '…'` string of a header dict.
fn descr_of(header: &str) -> Option<String> {
    let at = header.find("'descr'")?;
    let rest = &header[at + "'descr'".len()..];
    let open = rest.find('\'')?;
    let close = rest[open + 1..].find('\'')? + open + 1;
    Some(rest[open + 1..close].to_string())
}

/// The `'shape': (…)` tuple of a header dict.
fn shape_of(header: &str) -> Option<Vec<i64>> {
    let at = header.find("'shape'")?;
    let rest = &header[at + "'shape'".len()..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<i64>().ok().filter(|&n| n >= 0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_read_from_the_dict() {
        assert_eq!(
            shape_of("{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 64), }"),
            Some(vec![1000, 64])
        );
        assert_eq!(
            shape_of("{'descr': '<i8', 'shape': (12,), }"),
            Some(vec![12])
        );
        assert_eq!(shape_of("{'shape': (), }"), Some(vec![]));
        assert_eq!(shape_of("{'shape': (-1, 2), }"), None);
        assert_eq!(shape_of("{'descr': '<f4'}"), None);
        assert_eq!(
            descr_of("{'descr': '|u1', 'shape': (3,), }").as_deref(),
            Some("|u1")
        );
    }
}
