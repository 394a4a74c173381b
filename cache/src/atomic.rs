//! Crash-safe writes: temp file in the same directory, fsync, rename.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or the new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |tmp| {
        let mut f = File::create(tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })
}

/// Lets `write` create the file at a temporary path (for writers that take a path, such
/// as libtorch's), then renames it to `path`. On error the temporary file is removed.
pub fn write_atomic_with<E: From<io::Error>>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    let tmp = temp_path(path);
    let result = write(&tmp).and_then(|()| {
        File::open(&tmp)?.sync_all()?;
        fs::rename(&tmp, path)?;
        Ok(())
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_leaves_nothing_on_failure() {
        let dir = std::env::temp_dir().join(format!("pipeline-atomic-{}", std::process::id()));
        let path = dir.join("sub/out.txt");
        write_atomic(&path, b"hello").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        let err = write_atomic_with(&path, |tmp| {
            fs::write(tmp, b"half")?;
            Err(io::Error::other("writer failed"))
        });
        assert!(err.is_err());
        assert_eq!(
            fs::read(&path).unwrap(),
            b"hello",
            "the old file survives a failed write"
        );
        let leftovers: Vec<_> = fs::read_dir(dir.join("sub")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
        fs::remove_dir_all(dir).unwrap();
    }
}
