//! A (path, size, mtime, ctime, inode) → content hash memo, so that unchanged data files
//! are not re-hashed on every run. It lives in `<cache>/hashes.json`.
//!
//! The inode change time (ctime) and the inode (with its device) are in the memo's key as
//! in git's index and DVC's state: a file edited and given its old mtime back
//! (`touch -r`) still has a new ctime, which no user call can set, and a file replaced by
//! another (a rename over it) has a new inode. Off Unix only size and mtime are known,
//! so there nothing is memoised and every file is hashed.
//!
//! A file whose mtime or ctime is within [`RACY_SECONDS`] of the moment it was hashed is
//! not memoised: it could still change within the same tick without any of them changing
//! (git's "racily clean" problem).

use crate::atomic::write_atomic;
use crate::hash::{hash_file, require_regular};
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
    /// [`RACY_SECONDS`], in seconds (tests set 0).
    racy: f64,
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// What identifies a version of a file without reading it: size, mtime, ctime, inode,
/// device; and the most recent of its two times, for the racy check. `None` off Unix.
#[cfg(unix)]
fn stamp(meta: &fs::Metadata) -> io::Result<Option<(Value, u128)>> {
    use std::os::unix::fs::MetadataExt;
    let mtime = nanos(meta.modified()?);
    let ctime = (meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128).max(0) as u128;
    Ok(Some((
        json!({
            "size": meta.len(),
            "mtime_ns": mtime.to_string(),
            "ctime_ns": ctime.to_string(),
            "inode": meta.ino().to_string(),
            "device": meta.dev().to_string(),
        }),
        mtime.max(ctime),
    )))
}

#[cfg(not(unix))]
fn stamp(_meta: &fs::Metadata) -> io::Result<Option<(Value, u128)>> {
    Ok(None)
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
            racy: RACY_SECONDS,
        }
    }

    /// A memo that remembers nothing and is never saved (for `--no-cache`).
    pub fn none() -> HashMemo {
        HashMemo {
            file: PathBuf::new(),
            entries: Map::new(),
            changed: false,
            racy: RACY_SECONDS,
        }
    }

    /// The content hash of `path`, from the memo when its size, mtime, ctime and inode
    /// are unchanged. A path that is not a regular file is refused before it is opened.
    pub fn hash(&mut self, path: &Path) -> io::Result<String> {
        let meta = require_regular(path)?;
        let key = fs::canonicalize(path)?.to_string_lossy().into_owned();
        let stamp = stamp(&meta)?;
        if let Some((now, _)) = &stamp {
            if let Some(e) = self.entries.get(&key) {
                let same = now
                    .as_object()
                    .expect("a stamp is an object")
                    .iter()
                    .all(|(k, v)| e.get(k) == Some(v));
                if let (true, Some(hash)) = (same, e["blake3"].as_str()) {
                    return Ok(hash.to_string());
                }
            }
        }
        let hash = hash_file(path)?;
        if let Some((mut stamp, latest)) = stamp {
            let age = nanos(SystemTime::now()).saturating_sub(latest);
            if !self.file.as_os_str().is_empty() && age as f64 / 1e9 >= self.racy {
                stamp["blake3"] = json!(hash);
                self.entries.insert(key, stamp);
                self.changed = true;
            }
        }
        Ok(hash)
    }

    /// Writes the memo back if it learnt something (atomically; a failure only costs a
    /// re-hash next time, so it is ignored). Nothing is written into a directory that is
    /// not a cache (see [`crate::root`]).
    pub fn save(&mut self) {
        let root = self.file.parent().unwrap_or(Path::new(""));
        if self.changed && crate::root::ensure(root).is_ok() {
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

    fn age(path: &Path, by: Duration) -> SystemTime {
        let old = SystemTime::now() - by;
        fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        old
    }

    #[test]
    fn unchanged_files_come_from_the_memo_and_changed_ones_are_rehashed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let data = dir.path().join("data.csv");
        fs::write(&data, b"1,2,3").unwrap();
        let old = age(&data, Duration::from_secs(60));
        let mut memo = HashMemo::load(&root);
        memo.racy = 0.0;
        let first = memo.hash(&data).unwrap();
        memo.save();
        assert!(root.join("hashes.json").is_file());
        assert!(
            root.join("CACHEDIR.TAG").is_file(),
            "the memo's root is a cache"
        );
        let mut again = HashMemo::load(&root);
        assert_eq!(again.hash(&data).unwrap(), first);
        assert!(!again.changed, "answered from the memo");

        // Same size and mtime, different content (`touch -r`): the ctime moved, so the
        // file is hashed again.
        std::thread::sleep(Duration::from_millis(20));
        fs::write(&data, b"1,2,4").unwrap();
        let f = fs::File::options().write(true).open(&data).unwrap();
        f.set_modified(old).unwrap();
        let mut memo = HashMemo::load(&root);
        memo.racy = 0.0;
        let second = memo.hash(&data).unwrap();
        assert_ne!(second, first, "an edit hidden by touch -r is seen");
        assert_eq!(second, crate::hash_bytes(b"1,2,4"));

        // Another file renamed over it, with the same size and mtime: a new inode.
        let other = dir.path().join("other.csv");
        fs::write(&other, b"9,9,9").unwrap();
        fs::File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(old)
            .unwrap();
        fs::rename(&other, &data).unwrap();
        assert_eq!(memo.hash(&data).unwrap(), crate::hash_bytes(b"9,9,9"));
    }

    #[test]
    fn files_changed_just_now_are_not_memoised() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.csv");
        let root = dir.path().join("cache");
        fs::write(&data, b"fresh").unwrap();
        let mut memo = HashMemo::load(&root);
        memo.hash(&data).unwrap();
        memo.save();
        assert!(!root.join("hashes.json").exists());
        // An old mtime does not help: the ctime is new.
        age(&data, Duration::from_secs(60));
        memo.hash(&data).unwrap();
        memo.save();
        assert!(!root.join("hashes.json").exists());
    }

    #[test]
    fn non_regular_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut memo = HashMemo::load(dir.path());
        let err = memo.hash(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        #[cfg(unix)]
        assert!(memo
            .hash(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string()
            .contains("a character device"));
    }

    #[test]
    fn nothing_is_saved_into_a_directory_that_is_not_a_cache() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let data = dir.path().join("data.csv");
        fs::write(&data, b"1").unwrap();
        let mut memo = HashMemo::load(dir.path());
        memo.racy = 0.0;
        memo.hash(&data).unwrap();
        memo.save();
        assert!(!dir.path().join("hashes.json").exists());
        assert!(!dir.path().join("CACHEDIR.TAG").exists());
    }
}
