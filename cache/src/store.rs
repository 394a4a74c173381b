//! The content-addressed store: one entry per stage fingerprint, holding the stage's
//! output files, its key (as JSON, to explain later what changed) and the checksum of
//! every output.
//!
//! ```text
//! <root>/entries/<fingerprint>/entry.json     key, metrics, outputs with blake3 and size
//! <root>/entries/<fingerprint>/outputs/<name>
//! <root>/tmp/…                                  entries being written
//! <root>/locks/<fingerprint>.lock              held while a stage with that key runs
//! <root>/snapshots/<fingerprint>/               resumable state of an unfinished train stage
//! ```
//!
//! An entry is written under `tmp/` and renamed into `entries/` only when complete, so a
//! crash leaves no partial entry in place. A hit needs every output present with the
//! right checksum; anything else is reported as corrupt and is never used.

use crate::hash::hash_file;
use serde_json::{json, Value};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// An entry found complete and intact.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub fingerprint: String,
    pub key: Value,
    pub metrics: Value,
    /// Output name → path inside the store.
    pub outputs: Vec<(String, PathBuf)>,
}

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    Hit(Entry),
    Miss,
    /// Present but unusable: the reason, in words.
    Corrupt(String),
}

/// A store rooted at a directory (created on first write).
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// Holds a stage's lock until dropped.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

impl Store {
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    fn entry_dir(&self, fingerprint: &str) -> PathBuf {
        self.root.join("entries").join(fingerprint)
    }

    /// Waits for and takes the lock of `fingerprint`, so two runs never compute the same
    /// stage at once; the second finds the first one's entry when it gets the lock.
    pub fn lock(&self, fingerprint: &str) -> io::Result<Lock> {
        let dir = self.root.join("locks");
        fs::create_dir_all(&dir)?;
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{fingerprint}.lock")))?;
        file.lock()?;
        Ok(Lock { _file: file })
    }

    /// Looks `fingerprint` up, verifying every output's size and checksum.
    pub fn get(&self, fingerprint: &str) -> Lookup {
        let dir = self.entry_dir(fingerprint);
        let text = match fs::read_to_string(dir.join("entry.json")) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.exists() => return Lookup::Miss,
            Err(e) => return Lookup::Corrupt(format!("entry.json is unreadable: {e}")),
        };
        let entry: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return Lookup::Corrupt(format!("entry.json is not valid JSON: {e}")),
        };
        let mut outputs = Vec::new();
        for output in entry["outputs"].as_array().into_iter().flatten() {
            let name = output["name"].as_str().unwrap_or_default().to_string();
            let path = dir.join("outputs").join(&name);
            match (fs::metadata(&path), hash_file(&path)) {
                (Ok(meta), Ok(hash))
                    if Some(meta.len()) == output["size"].as_u64()
                        && Some(hash.as_str()) == output["blake3"].as_str() =>
                {
                    outputs.push((name, path));
                }
                (Err(_), _) | (_, Err(_)) => {
                    return Lookup::Corrupt(format!("output {name} is missing"))
                }
                _ => return Lookup::Corrupt(format!("output {name} does not match its checksum")),
            }
        }
        Lookup::Hit(Entry {
            fingerprint: fingerprint.to_string(),
            key: entry["key"].clone(),
            metrics: entry["metrics"].clone(),
            outputs,
        })
    }

    /// Stores the files `outputs` (name → source path) under `fingerprint`, atomically.
    /// An entry that exists already is replaced (it was found corrupt, or was forced).
    pub fn put(
        &self,
        fingerprint: &str,
        key: &Value,
        metrics: &Value,
        outputs: &[(String, PathBuf)],
    ) -> io::Result<Entry> {
        let tmp = self
            .root
            .join("tmp")
            .join(format!("{fingerprint}.{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(tmp.join("outputs"))?;
        let result = (|| {
            let mut listed = Vec::new();
            for (name, source) in outputs {
                let target = tmp.join("outputs").join(name);
                fs::copy(source, &target)?;
                File::open(&target)?.sync_all()?;
                listed.push(json!({ "name": name, "size": fs::metadata(&target)?.len(), "blake3": hash_file(&target)? }));
            }
            let entry = json!({ "fingerprint": fingerprint, "key": key, "metrics": metrics, "outputs": listed });
            fs::write(
                tmp.join("entry.json"),
                serde_json::to_vec_pretty(&entry).map_err(io::Error::other)?,
            )?;
            File::open(tmp.join("entry.json"))?.sync_all()?;
            let dir = self.entry_dir(fingerprint);
            fs::create_dir_all(dir.parent().expect("entries/ has a parent"))?;
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
            fs::rename(&tmp, &dir)
        })();
        if result.is_err() {
            let _ = fs::remove_dir_all(&tmp);
        }
        result?;
        match self.get(fingerprint) {
            Lookup::Hit(entry) => Ok(entry),
            Lookup::Miss => Err(io::Error::other("the entry vanished after it was written")),
            Lookup::Corrupt(why) => Err(io::Error::other(why)),
        }
    }

    /// Every fingerprint in the store.
    pub fn fingerprints(&self) -> io::Result<Vec<String>> {
        let dir = self.root.join("entries");
        if !dir.exists() {
            return Ok(Vec::new());
        }
        let mut all: Vec<String> = fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        all.sort();
        Ok(all)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Marks an entry as used now (its `entry.json` mtime), for `cache gc --older-than`.
    pub fn touch(&self, fingerprint: &str) {
        let file = self.entry_dir(fingerprint).join("entry.json");
        if let Ok(f) = File::options().write(true).open(file) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    /// What `cache ls` and `cache gc` need to know of every entry, without verifying it.
    pub fn list(&self) -> io::Result<Vec<EntryInfo>> {
        let mut all = Vec::new();
        for fingerprint in self.fingerprints()? {
            let dir = self.entry_dir(&fingerprint);
            let entry: Value = fs::read(dir.join("entry.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            let last_used = fs::metadata(dir.join("entry.json"))
                .and_then(|m| m.modified())
                .ok();
            all.push(EntryInfo {
                kind: entry["key"]["spec"]["stage"]["kind"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
                bytes: dir_size(&dir),
                last_used,
                fingerprint,
            });
        }
        Ok(all)
    }

    /// Removes an entry: renamed out of `entries/` first, so a reader never sees half.
    pub fn remove(&self, fingerprint: &str) -> io::Result<()> {
        let doomed = self
            .root
            .join("tmp")
            .join(format!("{fingerprint}.removed.{}", std::process::id()));
        fs::create_dir_all(self.root.join("tmp"))?;
        fs::rename(self.entry_dir(fingerprint), &doomed)?;
        fs::remove_dir_all(doomed)
    }

    /// Where a `train` stage with this fingerprint keeps its resumable snapshots.
    pub fn snapshot_dir(&self, fingerprint: &str) -> PathBuf {
        self.root.join("snapshots").join(fingerprint)
    }

    /// The snapshots of unfinished stages, as entries (kind `snapshot`).
    pub fn snapshots(&self) -> Vec<EntryInfo> {
        let mut all: Vec<EntryInfo> = fs::read_dir(self.root.join("snapshots"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| EntryInfo {
                fingerprint: e.file_name().to_string_lossy().into_owned(),
                kind: "snapshot".into(),
                bytes: dir_size(&e.path()),
                last_used: e.metadata().and_then(|m| m.modified()).ok(),
            })
            .collect();
        all.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        all
    }

    /// Removes what crashed writers left in `tmp/` more than `age` ago; returns the count.
    pub fn clean_tmp(&self, age: Duration) -> usize {
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in fs::read_dir(self.root.join("tmp"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > age);
            if old && fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// One entry as `cache ls` shows it.
#[derive(Debug, Clone)]
pub struct EntryInfo {
    pub fingerprint: String,
    /// The stage kind from the entry's key (`train`, `eval`, `checkpoint`).
    pub kind: String,
    pub bytes: u64,
    pub last_used: Option<SystemTime>,
}

fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

impl Entry {
    /// The path of output `name` inside the store.
    pub fn output(&self, name: &str) -> Option<&Path> {
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Store, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("cache"));
        let file = dir.path().join("weights.safetensors");
        fs::write(&file, b"some weights").unwrap();
        (dir, store, file)
    }

    #[test]
    fn an_entry_round_trips_and_misses_are_misses() {
        let (_dir, store, file) = setup();
        assert!(matches!(store.get("abc"), Lookup::Miss));
        let put = store
            .put(
                "abc",
                &json!({"lr": 0.1}),
                &json!({"loss": 0.5}),
                &[("weights".into(), file)],
            )
            .unwrap();
        let Lookup::Hit(got) = store.get("abc") else {
            panic!("expected a hit")
        };
        assert_eq!(got, put);
        assert_eq!(got.key, json!({"lr": 0.1}));
        assert_eq!(fs::read(&got.outputs[0].1).unwrap(), b"some weights");
        assert_eq!(store.fingerprints().unwrap(), ["abc"]);
        assert_eq!(
            fs::read_dir(store.root().join("tmp")).unwrap().count(),
            0,
            "nothing left in tmp/"
        );
    }

    #[test]
    fn corrupt_or_missing_outputs_are_reported_never_used() {
        let (_dir, store, file) = setup();
        let entry = store
            .put(
                "abc",
                &json!({}),
                &json!({}),
                &[("weights".into(), file.clone())],
            )
            .unwrap();
        fs::write(&entry.outputs[0].1, b"some weighTs").unwrap();
        let Lookup::Corrupt(why) = store.get("abc") else {
            panic!("expected corruption")
        };
        assert_eq!(why, "output weights does not match its checksum");
        fs::remove_file(&entry.outputs[0].1).unwrap();
        let Lookup::Corrupt(why) = store.get("abc") else {
            panic!("expected corruption")
        };
        assert_eq!(why, "output weights is missing");
        store
            .put("abc", &json!({}), &json!({}), &[("weights".into(), file)])
            .unwrap();
        assert!(
            matches!(store.get("abc"), Lookup::Hit(_)),
            "a rebuilt entry replaces the corrupt one"
        );
        fs::write(store.root().join("entries/abc/entry.json"), b"{").unwrap();
        assert!(matches!(store.get("abc"), Lookup::Corrupt(_)));
    }

    #[test]
    fn locks_exclude_each_other() {
        let (_dir, store, _) = setup();
        let held = store.lock("abc").unwrap();
        let other = store.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _lock = other.lock("abc").unwrap();
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "the second lock waits"
        );
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("and gets it once the first is dropped");
        waiter.join().unwrap();
    }
}
