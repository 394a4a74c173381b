//! The shape of an `.npy` array from its header alone (`numpy.lib.format`: the magic
//! `\x93NUMPY`, a version, the header's length, then a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 64), }`), so that `check`
//! knows the shapes of NPY data without reading it. No libtorch.

use std::io::Read;
use std::path::Path;

/// The longest header read (numpy writes them padded to 64 bytes; 64 KiB is generous).
const MAX_HEADER: usize = 1 << 16;

/// The array's shape, or `None` when the file is not an NPY file this can read (the
/// run's reader then says why).
pub fn peek_shape(path: &Path) -> Option<Vec<i64>> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut start = [0u8; 10];
    file.read_exact(&mut start).ok()?;
    if &start[..6] != b"\x93NUMPY" {
        return None;
    }
    let length = match start[6] {
        1 => u16::from_le_bytes([start[8], start[9]]) as usize,
        2 | 3 => {
            let mut more = [0u8; 2];
            file.read_exact(&mut more).ok()?;
            u32::from_le_bytes([start[8], start[9], more[0], more[1]]) as usize
        }
        _ => return None,
    };
    if length > MAX_HEADER {
        return None;
    }
    let mut header = vec![0u8; length];
    file.read_exact(&mut header).ok()?;
    shape_of(std::str::from_utf8(&header).ok()?)
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
    }
}
