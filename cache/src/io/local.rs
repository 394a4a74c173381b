//! `file://DIR` (or a plain path): objects as files under a directory, for a cache
//! shared over a mounted file system (NFS) and for testing the remote cache without a
//! server. Writes go to a temporary file beside the target and are renamed into place;
//! `create` links the finished temporary file to its name, which fails if one is there.

use super::{CheckpointIo, IoError, Member, Object};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

pub(super) const MEMBER: Member = Member {
    scheme: "file",
    doc: "a directory",
    open: |rest| Ok(Arc::new(LocalIo::new(rest))),
};

/// A directory of objects.
#[derive(Debug, Clone)]
pub struct LocalIo {
    dir: PathBuf,
}

/// The prefix of this member's temporary files (never listed).
const TMP: &str = ".tmp-";

impl LocalIo {
    pub fn new(dir: impl Into<PathBuf>) -> LocalIo {
        LocalIo { dir: dir.into() }
    }

    fn error(&self, what: &str, key: &str, e: io::Error) -> IoError {
        IoError {
            place: self.describe(),
            message: format!("cannot {what} {key}: {e}"),
        }
    }

    /// The file of `key`, refusing keys that would leave the directory.
    fn path(&self, key: &str) -> Result<PathBuf, IoError> {
        let plain = !key.is_empty()
            && key.split('/').all(|part| {
                !part.is_empty() && part != "." && part != ".." && !part.starts_with(TMP)
            });
        match plain {
            true => Ok(self.dir.join(key)),
            false => Err(IoError {
                place: self.describe(),
                message: format!("{key:?} is not a plain key"),
            }),
        }
    }

    /// A new temporary file beside `path`, and its path.
    fn temp(&self, path: &Path) -> io::Result<(File, PathBuf)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = path.parent().expect("a key's file has a directory");
        fs::create_dir_all(dir)?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let temp = dir.join(format!(
            "{TMP}{name}.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        Ok((File::create(&temp)?, temp))
    }
}

impl CheckpointIo for LocalIo {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn write(&self, key: &str, from: &mut dyn Read) -> Result<(), IoError> {
        let path = self.path(key)?;
        let (mut file, temp) = self.temp(&path).map_err(|e| self.error("write", key, e))?;
        let written = io::copy(from, &mut file)
            .and_then(|_| file.sync_all())
            .and_then(|()| fs::rename(&temp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written.map_err(|e| self.error("write", key, e))
    }

    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool, IoError> {
        let path = self.path(key)?;
        let (mut file, temp) = self.temp(&path).map_err(|e| self.error("write", key, e))?;
        let linked = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| fs::hard_link(&temp, &path));
        let _ = fs::remove_file(&temp);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(self.error("write", key, e)),
        }
    }

    fn read(&self, key: &str, to: &mut dyn Write) -> Result<bool, IoError> {
        let path = self.path(key)?;
        match File::open(&path) {
            Ok(mut file) => io::copy(&mut file, to)
                .map(|_| true)
                .map_err(|e| self.error("read", key, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    fn size(&self, key: &str) -> Result<Option<u64>, IoError> {
        match fs::metadata(self.path(key)?) {
            Ok(meta) if meta.is_file() => Ok(Some(meta.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    fn version(&self, key: &str) -> Result<Option<String>, IoError> {
        match fs::metadata(self.path(key)?) {
            Ok(meta) if meta.is_file() => {
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .unwrap_or_default();
                Ok(Some(format!(
                    "{} bytes, modified {}",
                    meta.len(),
                    modified.as_nanos()
                )))
            }
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Object>, IoError> {
        let mut found = Vec::new();
        let mut pending = vec![(self.dir.clone(), String::new())];
        while let Some((dir, key)) = pending.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.error("list", &dir.display().to_string(), e)),
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.starts_with(TMP) {
                    continue;
                }
                let key = format!("{key}{name}");
                // Only directories on the way to the prefix, or under it.
                if !(key.starts_with(prefix) || prefix.starts_with(&format!("{key}/"))) {
                    continue;
                }
                match entry.metadata() {
                    Ok(m) if m.is_dir() => pending.push((entry.path(), format!("{key}/"))),
                    Ok(m) if m.is_file() && key.starts_with(prefix) => found.push(Object {
                        key,
                        size: m.len(),
                        modified: m.modified().ok(),
                    }),
                    _ => {}
                }
            }
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    fn delete(&self, key: &str) -> Result<(), IoError> {
        match fs::remove_file(self.path(key)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(self.error("delete", key, e)),
            _ => Ok(()),
        }
    }

    fn discard_unfinished(&self, before: SystemTime) -> Result<usize, IoError> {
        let mut removed = 0;
        let mut pending = vec![self.dir.clone()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                let name = entry.file_name().to_string_lossy().into_owned();
                if meta.is_dir() {
                    pending.push(entry.path());
                } else if name.starts_with(TMP)
                    && meta.modified().is_ok_and(|m| m < before)
                    && fs::remove_file(entry.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_in_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let io = LocalIo::new(dir.path().join("store"));
        io.write("blobs/ab", &mut &b"weights"[..]).unwrap();
        assert!(io.create("entries/one.json", b"{}").unwrap());
        assert!(
            !io.create("entries/one.json", b"other").unwrap(),
            "create never replaces"
        );
        assert_eq!(io.read_bytes("entries/one.json").unwrap().unwrap(), b"{}");
        assert_eq!(io.read_bytes("entries/two.json").unwrap(), None);
        assert_eq!(io.size("blobs/ab").unwrap(), Some(7));
        let keys: Vec<String> = io
            .list("entries/")
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, ["entries/one.json"]);
        let all: Vec<String> = io.list("").unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(all, ["blobs/ab", "entries/one.json"]);
        io.delete("blobs/ab").unwrap();
        io.delete("blobs/ab").unwrap();
        assert_eq!(io.size("blobs/ab").unwrap(), None);
        assert!(io.path("../escape").is_err());
        assert!(io.path("a//b").is_err());
    }
}
