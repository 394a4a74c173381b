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
//!
//! The memo also remembers every file it gave a hash of in this process, with the stamp
//! it had then ([`HashMemo::hashed`]): a run checks at the end of each stage that the files
//! its key hashed are still those versions ([`HashedFile::changed`]), so that a result is never
//! stored under the hash of bytes it was not computed from.

use crate::atomic::write_atomic;
use crate::hash::{hash_file, require_regular};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub const RACY_SECONDS: f64 = 2.0;

#[derive(Debug)]
pub struct HashMemo {
    file: PathBuf,
    entries: HashMap<String, Entry>,
    changed: bool,
    /// The files given a hash through this memo, in order.
    hashed: Vec<HashedFile>,
    /// [`RACY_SECONDS`], in seconds (tests set 0).
    racy: f64,
}

/// What identifies a version of a file without reading it. Stored as decimal strings
/// (JSON numbers could not hold nanoseconds exactly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    size: u64,
    #[serde(with = "decimal")]
    mtime_ns: u128,
    #[serde(with = "decimal")]
    ctime_ns: u128,
    #[serde(with = "decimal")]
    inode: u128,
    #[serde(with = "decimal")]
    device: u128,
}

/// A memoised hash: the stamp of the version it is the hash of.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    stamp: Stamp,
    blake3: String,
}

/// A `u128` as its decimal text.
mod decimal {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A file given a hash through a memo: the version it was, and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashedFile {
    pub path: PathBuf,
    stamp: Stamp,
    hash: String,
    /// Changed too recently when hashed for the stamp alone to vouch for the content.
    racy: bool,
}

impl HashedFile {
    /// Why the file is no longer the version that was hashed (`None`: it still is): its
    /// stamp changed, or, with `content`, for one hashed within [`RACY_SECONDS`] of a
    /// change, its content (read again).
    pub fn changed(&self, content: bool) -> Option<String> {
        let meta = match require_regular(&self.path) {
            Ok(meta) => meta,
            Err(e) => return Some(e.to_string()),
        };
        match stamp(&meta) {
            Ok(Some((now, _))) if now != self.stamp => Some(match now.size == self.stamp.size {
                true => "it was modified".to_string(),
                false => format!(
                    "its size went from {} to {} bytes",
                    self.stamp.size, now.size
                ),
            }),
            Err(e) => Some(e.to_string()),
            _ if self.racy && content => match hash_file(&self.path) {
                Ok(hash) if hash == self.hash => None,
                Ok(_) => Some("its content changed".to_string()),
                Err(e) => Some(e.to_string()),
            },
            _ => None,
        }
    }
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The stamp of a file's metadata, and the most recent of its two times (for the racy
/// check). `None` off Unix.
#[cfg(unix)]
fn stamp(meta: &fs::Metadata) -> io::Result<Option<(Stamp, u128)>> {
    use std::os::unix::fs::MetadataExt;
    let mtime = nanos(meta.modified()?);
    let ctime = (meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128).max(0) as u128;
    let stamp = Stamp {
        size: meta.len(),
        mtime_ns: mtime,
        ctime_ns: ctime,
        inode: meta.ino() as u128,
        device: meta.dev() as u128,
    };
    Ok(Some((stamp, mtime.max(ctime))))
}

#[cfg(not(unix))]
fn stamp(_meta: &fs::Metadata) -> io::Result<Option<(Stamp, u128)>> {
    Ok(None)
}

impl HashMemo {
    /// The memo stored in `root` (empty when absent or unreadable: it is only a memo).
    pub fn load(root: &Path) -> HashMemo {
        let file = root.join("hashes.json");
        let entries = fs::read(&file)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<HashMap<String, Entry>>(&bytes).ok())
            .unwrap_or_default();
        HashMemo {
            file,
            entries,
            changed: false,
            hashed: Vec::new(),
            racy: RACY_SECONDS,
        }
    }

    /// A memo that remembers nothing and is never saved (for `--no-cache`).
    pub fn none() -> HashMemo {
        HashMemo {
            file: PathBuf::new(),
            entries: HashMap::new(),
            changed: false,
            hashed: Vec::new(),
            racy: RACY_SECONDS,
        }
    }

    /// The content hash of `path`, from the memo when its size, mtime, ctime and inode
    /// are unchanged. A path that is not a regular file is refused before it is opened.
    pub fn hash(&mut self, path: &Path) -> io::Result<String> {
        let meta = require_regular(path)?;
        let key = fs::canonicalize(path)?.to_string_lossy().into_owned();
        let stamp = stamp(&meta)?;
        if let Some(hash) = self.known(&key, stamp) {
            self.note(path.to_path_buf(), stamp, &hash, false);
            return Ok(hash);
        }
        let hash = hash_file(path)?;
        let racy = !self.learn(key, stamp, &hash);
        self.note(path.to_path_buf(), stamp, &hash, racy);
        Ok(hash)
    }

    /// The files given a hash through this memo, in order (a file hashed twice is listed
    /// twice), each with the version it was.
    pub fn hashed(&self) -> &[HashedFile] {
        &self.hashed
    }

    fn note(&mut self, path: PathBuf, stamp: Option<(Stamp, u128)>, hash: &str, racy: bool) {
        if let Some((stamp, _)) = stamp {
            let hash = hash.to_string();
            self.hashed.push(HashedFile {
                path,
                stamp,
                hash,
                racy,
            });
        }
    }

    /// The content hashes of the files `files` under `root`, in order, the way [`Self::hash`]
    /// gives each; their metadata is read and the files the memo does not know are hashed
    /// in parallel. The root is resolved once, so each file costs one `stat` when known.
    pub fn hash_all(
        &mut self,
        root: &Path,
        files: &[PathBuf],
    ) -> Result<Vec<String>, (PathBuf, io::Error)> {
        let base = fs::canonicalize(root).map_err(|e| (root.to_path_buf(), e))?;
        type Stamped = Result<(String, Option<(Stamp, u128)>), (PathBuf, io::Error)>;
        let stamps: Vec<Stamped> = files
            .par_iter()
            .map(|file| {
                let path = root.join(file);
                let meta = require_regular(&path).map_err(|e| (path.clone(), e))?;
                let stamp = stamp(&meta).map_err(|e| (path, e))?;
                Ok((base.join(file).to_string_lossy().into_owned(), stamp))
            })
            .collect();
        let stamps = stamps.into_iter().collect::<Result<Vec<_>, _>>()?;
        let known: Vec<Option<String>> = stamps
            .iter()
            .map(|(key, stamp)| self.known(key, *stamp))
            .collect();
        let hashed: Vec<Result<Option<String>, (PathBuf, io::Error)>> = known
            .par_iter()
            .zip(files)
            .map(|(known, file)| match known {
                Some(_) => Ok(None),
                None => {
                    let path = root.join(file);
                    hash_file(&path).map(Some).map_err(|e| (path, e))
                }
            })
            .collect();
        let mut out = Vec::with_capacity(files.len());
        for (((known, hashed), (key, stamp)), file) in
            known.into_iter().zip(hashed).zip(stamps).zip(files)
        {
            let (hash, racy) = match (known, hashed?) {
                (Some(hash), _) => (hash, false),
                (None, Some(hash)) => {
                    let racy = !self.learn(key, stamp, &hash);
                    (hash, racy)
                }
                (None, None) => unreachable!("a file not known is hashed"),
            };
            self.note(root.join(file), stamp, &hash, racy);
            out.push(hash);
        }
        Ok(out)
    }

    /// The memoised hash of the file at `key` if its stamp is unchanged.
    fn known(&self, key: &str, stamp: Option<(Stamp, u128)>) -> Option<String> {
        let (now, _) = stamp?;
        let entry = self.entries.get(key)?;
        (entry.stamp == now).then(|| entry.blake3.clone())
    }

    /// Remembers `hash` for the file at `key`, unless it changed too recently to trust;
    /// whether its stamp vouches for the content (it is not racy).
    fn learn(&mut self, key: String, stamp: Option<(Stamp, u128)>, hash: &str) -> bool {
        let Some((stamp, latest)) = stamp else {
            return false;
        };
        let age = nanos(SystemTime::now()).saturating_sub(latest);
        if age as f64 / 1e9 < self.racy {
            return false;
        }
        if !self.file.as_os_str().is_empty() {
            let entry = Entry {
                stamp,
                blake3: hash.to_string(),
            };
            self.entries.insert(key, entry);
            self.changed = true;
        }
        true
    }

    /// Writes the memo back if it learnt something (atomically; a failure only costs a
    /// re-hash next time, so it is ignored). Nothing is written into a directory that is
    /// not a cache (see [`crate::root`]).
    pub fn save(&mut self) {
        let root = self.file.parent().unwrap_or(Path::new(""));
        if self.changed && crate::root::ensure(root).is_ok() {
            // Sorted, so that the file is the same for the same knowledge.
            let sorted: std::collections::BTreeMap<&String, &Entry> = self.entries.iter().collect();
            let text = serde_json::to_vec(&sorted).expect("entries serialise");
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
    fn a_tree_is_hashed_in_order_and_only_its_changed_files_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let tree = dir.path().join("tree");
        fs::create_dir_all(tree.join("a")).unwrap();
        let files: Vec<PathBuf> = (0..20)
            .map(|i| PathBuf::from(format!("a/{i}.png")))
            .collect();
        for (i, f) in files.iter().enumerate() {
            fs::write(tree.join(f), format!("image {i}")).unwrap();
            age(&tree.join(f), Duration::from_secs(60));
        }
        let mut memo = HashMemo::load(&root);
        memo.racy = 0.0;
        let first = memo.hash_all(&tree, &files).unwrap();
        let each: Vec<String> = files
            .iter()
            .map(|f| hash_file(&tree.join(f)).unwrap())
            .collect();
        assert_eq!(first, each, "in the files' order");
        memo.save();
        let mut again = HashMemo::load(&root);
        again.racy = 0.0;
        assert_eq!(again.hash_all(&tree, &files).unwrap(), first);
        assert!(!again.changed, "every file from the memo");
        fs::write(tree.join(&files[7]), "another image").unwrap();
        let third = again.hash_all(&tree, &files).unwrap();
        assert_eq!(third[7], crate::hash_bytes(b"another image"));
        assert_eq!(third[..7], first[..7]);
        let gone = [PathBuf::from("a/missing.png")];
        let (path, e) = again.hash_all(&tree, &gone).unwrap_err();
        assert_eq!(
            (path, e.kind()),
            (tree.join("a/missing.png"), io::ErrorKind::NotFound)
        );
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
