//! A (path, size, mtime) → content hash memo, so that unchanged data files are not
//! re-hashed on every run. It lives in `<cache>/hashes.json`.
//!
//! A file whose mtime is within [`RACY_SECONDS`] of the moment it was hashed is not
//! memoised: it could still change within the same mtime tick without its size or mtime
//! changing (git's "racily clean" problem).

use crate::atomic::write_atomic;
use crate::hash::hash_file;
use serde_json::{json, Map, Value};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub const RACY_SECONDS: f64 = 2.0;

#[derive(Debug)]
pub struct HashMemo {
    file: PathBuf,
    entries: Map<String, Value>,
    changed: bool,
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

impl HashMemo {
    /// The memo stored in `root` (empty when absent or unreadable: it is only a memo).
    pub fn load(root: &Path) -> HashMemo {
        let file = root.join("hashes.json");
        let entries = fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        HashMemo {
            file,
            entries,
            changed: false,
        }
    }

    /// A memo that remembers nothing and is never saved (for `--no-cache`).
    pub fn none() -> HashMemo {
        HashMemo {
            file: PathBuf::new(),
            entries: Map::new(),
            changed: false,
        }
    }

    /// The content hash of `path`, from the memo when its size and mtime are unchanged.
    pub fn hash(&mut self, path: &Path) -> io::Result<String> {
        let meta = fs::metadata(path)?;
        let key = fs::canonicalize(path)?.to_string_lossy().into_owned();
        let (size, mtime) = (meta.len(), nanos(meta.modified()?).to_string());
        if let Some(e) = self.entries.get(&key) {
            if e["size"].as_u64() == Some(size) && e["mtime_ns"].as_str() == Some(&mtime) {
                if let Some(hash) = e["blake3"].as_str() {
                    return Ok(hash.to_string());
                }
            }
        }
        let hash = hash_file(path)?;
        let age = nanos(SystemTime::now()).saturating_sub(mtime.parse().unwrap_or(0));
        if !self.file.as_os_str().is_empty() && age as f64 / 1e9 >= RACY_SECONDS {
            self.entries.insert(
                key,
                json!({ "size": size, "mtime_ns": mtime, "blake3": hash }),
            );
            self.changed = true;
        }
        Ok(hash)
    }

    /// Writes the memo back if it learnt something (atomically; a failure only costs a
    /// re-hash next time, so it is ignored).
    pub fn save(&mut self) {
        if self.changed {
            let text = serde_json::to_vec(&Value::Object(self.entries.clone()))
                .expect("JSON values serialise");
            if write_atomic(&self.file, &text).is_ok() {
                self.changed = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn unchanged_files_come_from_the_memo_and_changed_ones_are_rehashed() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.csv");
        fs::write(&data, b"1,2,3").unwrap();
        let old = SystemTime::now() - Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(&data)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let mut memo = HashMemo::load(dir.path());
        let first = memo.hash(&data).unwrap();
        memo.save();
        assert!(dir.path().join("hashes.json").is_file());

        // Same size and mtime, different content: the memo answers (that is its contract).
        fs::write(&data, b"1,2,4").unwrap();
        let f = fs::File::options().write(true).open(&data).unwrap();
        f.set_modified(old).unwrap();
        let mut memo = HashMemo::load(dir.path());
        assert_eq!(memo.hash(&data).unwrap(), first, "answered from the memo");

        // A new mtime: hashed again.
        f.set_modified(old + Duration::from_secs(1)).unwrap();
        assert_ne!(memo.hash(&data).unwrap(), first);
    }

    #[test]
    fn files_modified_just_now_are_not_memoised() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.csv");
        fs::write(&data, b"fresh").unwrap();
        let mut memo = HashMemo::load(dir.path());
        memo.hash(&data).unwrap();
        memo.save();
        assert!(!dir.path().join("hashes.json").exists());
    }
}
