//! The content-addressed store: one entry per stage fingerprint, holding the stage's
//! output files, its key (as JSON, to explain later what changed) and the checksum of
//! every output.
//!
//! ```text
//! <root>/CACHEDIR.TAG                           marks the root as pipeline's (root.rs)
//! <root>/entries/<fingerprint>/entry.tag        marks the entry as pipeline's; checksum of entry.json
//! <root>/entries/<fingerprint>/entry.json       key, metrics, outputs with blake3 and size
//! <root>/entries/<fingerprint>/outputs/<name>
//! <root>/tmp/<fingerprint>.<pid>…               entries being written or removed
//! <root>/locks/<fingerprint>.lock              held while a stage with that key runs
//! <root>/snapshots/<fingerprint>/               resumable state of an unfinished train stage
//! ```
//!
//! An entry is written under `tmp/` and renamed into `entries/` only when complete, so a
//! crash leaves no partial entry in place. A hit needs a tag naming the fingerprint, an
//! `entry.json` matching the tag's checksum, every output it lists present with the right
//! size and checksum, and every output the caller requires; anything else is reported as
//! corrupt (the reason in words) and is never used.
//!
//! The store writes only into a root that [`crate::root`] accepts, and removes only what
//! it can show it wrote: an entry is a directory named by a fingerprint that holds an
//! `entry.tag` naming it; a snapshot is a directory named by a fingerprint in
//! `snapshots/` that holds only the files a snapshot is made of; and `tmp/` is tidied of
//! the names the store and the runner give their temporary directories, nothing else.

use crate::hash::{hash_bytes, hash_file};
use crate::io::IoError;
use crate::remote::{Fetched, Remote};
use crate::root::{self, is_fingerprint, is_tmp_name, NotACache, RootState};
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
    /// The outputs an entry must hold, by its key (see [`Store::requiring`]).
    required: fn(&Value) -> &'static [&'static str],
    /// A cache shared with other machines (`--cache-dir s3://…`), behind this one.
    remote: Option<Remote>,
}

pub(crate) fn nothing_required(_key: &Value) -> &'static [&'static str] {
    &[]
}

/// Holds a stage's lock until dropped.
#[derive(Debug)]
pub struct Lock {
    _file: File,
}

/// The file in an entry's directory that shows the store wrote it.
const TAG: &str = "entry.tag";
const TAG_HEADER: &str = "pipeline cache entry";
/// The checksum line of an entry adopted from an earlier pipeline, which had none.
const NO_CHECKSUM: &str = "none (written by an earlier pipeline)";

fn tag_text(fingerprint: &str, checksum: &str) -> String {
    format!("{TAG_HEADER}\nfingerprint {fingerprint}\nentry.json blake3 {checksum}\n")
}

/// The checksum of `entry.json` named by the tag in `dir` if it is an entry for
/// `fingerprint`; `None` when `dir` is not one (no tag, another fingerprint, a link…).
fn tagged_checksum(dir: &Path, fingerprint: &str) -> Option<String> {
    if !fs::symlink_metadata(dir).ok()?.is_dir() {
        return None;
    }
    let text = fs::read_to_string(dir.join(TAG)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != TAG_HEADER || lines.next()?.strip_prefix("fingerprint ")? != fingerprint {
        return None;
    }
    Some(
        lines
            .next()?
            .strip_prefix("entry.json blake3 ")?
            .to_string(),
    )
}

fn is_entry(dir: &Path, fingerprint: &str) -> bool {
    is_fingerprint(fingerprint) && tagged_checksum(dir, fingerprint).is_some()
}

/// Whether `name` is a plain file name (an output's name cannot climb out of `outputs/`).
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}

/// Tags the entries of a cache written before tags existed, so that they can be
/// replaced and removed; they have no checksum, so lookups report them corrupt and the
/// next run that needs one rebuilds it.
pub(crate) fn adopt_entries(root: &Path) -> io::Result<()> {
    for e in fs::read_dir(root.join("entries")).into_iter().flatten() {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if is_fingerprint(&name)
            && e.file_type()?.is_dir()
            && e.path().join("entry.json").is_file()
            && !e.path().join(TAG).exists()
        {
            crate::atomic::write_atomic(
                &e.path().join(TAG),
                tag_text(&name, NO_CHECKSUM).as_bytes(),
            )?;
        }
    }
    Ok(())
}

/// Whether `name` is a file a snapshot is made of (`backends/src/snapshot.rs`).
fn is_snapshot_file(name: &str) -> bool {
    let numbered = |n: &str, ext: &str| {
        n.strip_prefix("snapshot-")
            .and_then(|n| n.strip_suffix(ext))
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    matches!(
        name,
        "snapshot.json" | "snapshot.previous.json" | "snapshot.tmp" | "snapshot.tag"
    ) || numbered(name, ".safetensors")
        || numbered(name, ".tmp")
}

/// `rank-R-of-W`, a distributed run's per-process snapshot directory.
fn is_rank_dir(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("rank-")
        .and_then(|n| n.split_once("-of-"))
        .is_some_and(|(r, w)| digits(r) && digits(w))
}

/// Whether `dir` holds only what snapshots are made of (files, or per-process
/// directories of them), so that removing it removes nothing else.
fn is_snapshot(dir: &Path, depth: u32) -> bool {
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return false;
    };
    meta.is_dir()
        && fs::read_dir(dir).is_ok_and(|d| {
            d.into_iter().all(|e| {
                e.is_ok_and(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    match e.file_type() {
                        Ok(t) if t.is_file() => is_snapshot_file(&name),
                        Ok(t) if t.is_dir() => {
                            depth == 0 && is_rank_dir(&name) && is_snapshot(&e.path(), 1)
                        }
                        _ => false,
                    }
                })
            })
        })
}

impl Store {
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store {
            root: root.into(),
            required: nothing_required,
            remote: None,
        }
    }

    /// This store in front of `remote`: a lookup this store misses is fetched from
    /// there (checked, then stored here), and [`Store::publish`] sends entries there.
    pub fn with_remote(mut self, remote: Remote) -> Store {
        self.remote = Some(remote.requiring(self.required));
        self
    }

    pub fn remote(&self) -> Option<&Remote> {
        self.remote.as_ref()
    }

    /// Every lookup of this store also requires the outputs `required` names for the
    /// entry's key (the outputs of the stage kind the key is for: `pipeline-core` knows
    /// them), so that an entry without them is corrupt, however it was written.
    pub fn requiring(mut self, required: fn(&Value) -> &'static [&'static str]) -> Store {
        self.required = required;
        self.remote = self.remote.map(|r| r.requiring(required));
        self
    }

    fn entry_dir(&self, fingerprint: &str) -> PathBuf {
        self.root.join("entries").join(fingerprint)
    }

    /// What the root is, without writing anything: `Err` when it is not a cache
    /// pipeline made (see [`crate::root`]).
    pub fn check_root(&self) -> Result<RootState, NotACache> {
        root::check(&self.root)
    }

    /// Makes the root a cache if it is not one yet (creates and tags it, or adopts an
    /// earlier pipeline's cache); refuses a directory pipeline did not make.
    pub fn ensure_root(&self) -> io::Result<()> {
        root::ensure(&self.root)
    }

    /// A temporary path in `tmp/` for `fingerprint` (see [`root::is_tmp_name`]).
    fn tmp_path(&self, fingerprint: &str, what: &str) -> io::Result<PathBuf> {
        let dir = self.root.join("tmp");
        fs::create_dir_all(&dir)?;
        let pid = std::process::id();
        Ok(dir.join(match what {
            "" => format!("{fingerprint}.{pid}"),
            _ => format!("{fingerprint}.{what}.{pid}"),
        }))
    }

    /// Waits for and takes the lock of `fingerprint`, so two runs never compute the same
    /// stage at once; the second finds the first one's entry when it gets the lock.
    pub fn lock(&self, fingerprint: &str) -> io::Result<Lock> {
        check_fingerprint(fingerprint)?;
        self.ensure_root()?;
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

    /// Looks `fingerprint` up, verifying the entry's tag and checksum and every output's
    /// size and checksum.
    pub fn get(&self, fingerprint: &str) -> Lookup {
        self.get_requiring(fingerprint, &[])
    }

    /// [`Store::get`], and the entry must hold every output in `required` (a stage kind's
    /// outputs: an entry without them is corrupt, never served).
    pub fn get_requiring(&self, fingerprint: &str, required: &[&str]) -> Lookup {
        match (self.get_local(fingerprint, required), &self.remote) {
            (Lookup::Hit(entry), _) => Lookup::Hit(entry),
            (local, None) => local,
            (local, Some(remote)) => match self.pull(remote, fingerprint) {
                Ok(true) => self.get_local(fingerprint, required),
                Ok(false) => local,
                Err(why) => match local {
                    Lookup::Miss => Lookup::Corrupt(why),
                    local => local,
                },
            },
        }
    }

    /// Copies entry `fingerprint` from `remote` into this store: `Ok(false)` when it is
    /// not there, `Err` (why, in words) when it cannot be used.
    fn pull(&self, remote: &Remote, fingerprint: &str) -> Result<bool, String> {
        if !is_fingerprint(fingerprint) {
            return Ok(false);
        }
        let tmp = self
            .ensure_root()
            .and_then(|()| self.tmp_path(fingerprint, "pulled"))
            .map_err(|e| format!("cannot fetch it from {}: {e}", remote.describe()))?;
        let _ = fs::remove_dir_all(&tmp);
        let fetched = remote.fetch(fingerprint, &tmp);
        let stored = match fetched {
            Ok(Fetched::Absent) => Ok(false),
            Ok(Fetched::Corrupt(why)) => Err(format!(
                "the copy in {} is unusable: {why}",
                remote.describe()
            )),
            Ok(Fetched::Found {
                key,
                metrics,
                outputs,
            }) => match self.put(fingerprint, &key, &metrics, &outputs) {
                Ok(_) => {
                    self.mark_published(&self.published_marker(remote, fingerprint));
                    Ok(true)
                }
                Err(e) => Err(format!(
                    "cannot store the copy from {}: {e}",
                    remote.describe()
                )),
            },
            Err(e) => Err(format!("cannot fetch it: {e}")),
        };
        let _ = fs::remove_dir_all(&tmp);
        stored
    }

    /// Sends entry `entry` of this store to the remote cache, when there is one:
    /// `Ok(true)` when it was sent, `Ok(false)` when the remote had it already.
    /// Entries this store fetched from the remote or sent there are marked as such
    /// (`published/<remote>/<fingerprint>`, empty), so a cached rerun asks the remote
    /// nothing.
    pub fn publish(&self, entry: &Entry) -> Result<bool, IoError> {
        let Some(remote) = &self.remote else {
            return Ok(false);
        };
        let marker = self.published_marker(remote, &entry.fingerprint);
        if marker.exists() {
            return Ok(false);
        }
        let sent = remote.publish(entry)?;
        self.mark_published(&marker);
        Ok(sent)
    }

    /// The file that says entry `fingerprint` is in `remote` too.
    fn published_marker(&self, remote: &Remote, fingerprint: &str) -> PathBuf {
        let place = &hash_bytes(remote.describe().as_bytes())[..16];
        self.root.join("published").join(place).join(fingerprint)
    }

    fn mark_published(&self, marker: &Path) {
        if let Some(dir) = marker.parent() {
            let _ = fs::create_dir_all(dir).and_then(|()| File::create(marker));
        }
    }

    /// [`Store::get_requiring`] in this store only.
    fn get_local(&self, fingerprint: &str, required: &[&str]) -> Lookup {
        let entry = match self.entry_json(fingerprint) {
            Some(Ok(entry)) => entry,
            Some(Err(why)) => return Lookup::Corrupt(why),
            None => return Lookup::Miss,
        };
        let dir = self.entry_dir(fingerprint);
        let Some(listed) = entry["outputs"].as_array() else {
            return Lookup::Corrupt("entry.json lists no outputs".into());
        };
        let mut outputs = Vec::new();
        for output in listed {
            let name = output["name"].as_str().unwrap_or_default().to_string();
            if !is_plain_name(&name) {
                return Lookup::Corrupt(format!("entry.json names an output {name:?}"));
            }
            let path = dir.join("outputs").join(&name);
            match (fs::metadata(&path), hash_file(&path)) {
                (Ok(meta), Ok(hash))
                    if Some(meta.len()) == output["size"].as_u64()
                        && Some(hash.as_str()) == output["blake3"].as_str() =>
                {
                    outputs.push((name, path));
                }
                (Err(e), _) | (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => {
                    return Lookup::Corrupt(format!("output {name} is missing"))
                }
                (Err(e), _) | (_, Err(e)) => {
                    return Lookup::Corrupt(format!("output {name} is unreadable: {e}"))
                }
                _ => return Lookup::Corrupt(format!("output {name} does not match its checksum")),
            }
        }
        if let Some(absent) = required
            .iter()
            .chain((self.required)(&entry["key"]))
            .find(|r| !outputs.iter().any(|(n, _)| n == *r))
        {
            return Lookup::Corrupt(format!("output {absent} is not in the entry"));
        }
        Lookup::Hit(Entry {
            fingerprint: fingerprint.to_string(),
            key: entry["key"].clone(),
            metrics: entry["metrics"].clone(),
            outputs,
        })
    }

    /// The checked `entry.json` of `fingerprint` (its outputs not looked at): `None` when
    /// there is no entry, `Err` (why, in words) when it is not one pipeline wrote intact.
    fn entry_json(&self, fingerprint: &str) -> Option<Result<Value, String>> {
        if !is_fingerprint(fingerprint) {
            return None;
        }
        let dir = self.entry_dir(fingerprint);
        fs::symlink_metadata(&dir).ok()?;
        Some((|| {
            let Some(checksum) = tagged_checksum(&dir, fingerprint) else {
                return Err(format!(
                    "{} has no {TAG} naming it: pipeline did not write it",
                    dir.display()
                ));
            };
            if checksum == NO_CHECKSUM {
                return Err("it was written by an earlier pipeline, without a checksum".into());
            }
            let bytes = fs::read(dir.join("entry.json"))
                .map_err(|e| format!("entry.json is unreadable: {e}"))?;
            if hash_bytes(&bytes) != checksum {
                return Err("entry.json does not match its checksum".into());
            }
            let entry: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("entry.json is not valid JSON: {e}"))?;
            if entry["fingerprint"].as_str() != Some(fingerprint) {
                return Err("entry.json names another fingerprint".into());
            }
            Ok(entry)
        })())
    }

    /// The key an intact `entry.json` of `fingerprint` holds, without reading its outputs
    /// (cheap: [`Store::get`] hashes every output).
    pub fn key_of(&self, fingerprint: &str) -> Option<Value> {
        match self.entry_json(fingerprint) {
            Some(Ok(entry)) => Some(entry["key"].clone()),
            _ => self.remote.as_ref()?.key_of(fingerprint),
        }
    }

    /// Stores the files `outputs` (name → source path) under `fingerprint`, atomically.
    /// An entry that exists already is replaced (it was found corrupt, or was forced);
    /// anything else in its place is left alone and the store refuses.
    pub fn put(
        &self,
        fingerprint: &str,
        key: &Value,
        metrics: &Value,
        outputs: &[(String, PathBuf)],
    ) -> io::Result<Entry> {
        check_fingerprint(fingerprint)?;
        self.ensure_root()?;
        let tmp = self.tmp_path(fingerprint, "")?;
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(tmp.join("outputs"))?;
        let dir = self.entry_dir(fingerprint);
        let replaced = self.tmp_path(fingerprint, "replaced")?;
        let result = (|| {
            let mut listed = Vec::new();
            for (name, source) in outputs {
                if !is_plain_name(name) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("an output's name must be a file name, not {name:?}"),
                    ));
                }
                crate::hash::require_regular(source)?;
                let target = tmp.join("outputs").join(name);
                fs::copy(source, &target)?;
                File::open(&target)?.sync_all()?;
                listed.push(json!({ "name": name, "size": fs::metadata(&target)?.len(), "blake3": hash_file(&target)? }));
            }
            let entry = json!({ "fingerprint": fingerprint, "key": key, "metrics": metrics, "outputs": listed });
            let bytes = serde_json::to_vec_pretty(&entry).map_err(io::Error::other)?;
            fs::write(tmp.join("entry.json"), &bytes)?;
            File::open(tmp.join("entry.json"))?.sync_all()?;
            fs::write(tmp.join(TAG), tag_text(fingerprint, &hash_bytes(&bytes)))?;
            File::open(tmp.join(TAG))?.sync_all()?;
            fs::create_dir_all(dir.parent().expect("entries/ has a parent"))?;
            if fs::symlink_metadata(&dir).is_ok() {
                if !is_entry(&dir, fingerprint) {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "{} exists and was not written by pipeline (it has no {TAG}): \
                             move it out of the cache",
                            dir.display()
                        ),
                    ));
                }
                fs::rename(&dir, &replaced)?;
            }
            fs::rename(&tmp, &dir)
        })();
        if result.is_err() {
            let _ = fs::remove_dir_all(&tmp);
        }
        let _ = fs::remove_dir_all(&replaced);
        result?;
        // This store alone: an entry fetched from the remote and found lacking here must
        // not be fetched again (it would be put again, without end).
        match self.get_local(fingerprint, &[]) {
            Lookup::Hit(entry) => Ok(entry),
            Lookup::Miss => Err(io::Error::other("the entry vanished after it was written")),
            Lookup::Corrupt(why) => Err(io::Error::other(why)),
        }
    }

    /// Every entry in the store (directories named by a fingerprint, tagged as entries).
    pub fn fingerprints(&self) -> io::Result<Vec<String>> {
        let dir = self.root.join("entries");
        if !dir.exists() {
            return Ok(Vec::new());
        }
        let mut all: Vec<String> = fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| is_entry(&dir.join(name), name))
            .collect();
        all.sort();
        Ok(all)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Marks an entry as used now (its `entry.json` mtime), for `cache gc --older-than`.
    pub fn touch(&self, fingerprint: &str) {
        let dir = self.entry_dir(fingerprint);
        if is_entry(&dir, fingerprint) {
            if let Ok(f) = File::options().write(true).open(dir.join("entry.json")) {
                let _ = f.set_modified(SystemTime::now());
            }
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
    /// Refuses anything that is not an entry the store wrote.
    pub fn remove(&self, fingerprint: &str) -> io::Result<()> {
        let dir = self.entry_dir(fingerprint);
        if !is_entry(&dir, fingerprint) {
            return Err(not_ours(&dir, "a cache entry"));
        }
        self.ensure_root()?;
        let doomed = self.tmp_path(fingerprint, "removed")?;
        fs::rename(dir, &doomed)?;
        fs::remove_dir_all(doomed)
    }

    /// Where a `train` stage with this fingerprint keeps its resumable snapshots.
    pub fn snapshot_dir(&self, fingerprint: &str) -> PathBuf {
        self.root.join("snapshots").join(fingerprint)
    }

    /// Records that entry `fingerprint` belongs to `lineage`: entries a later one may
    /// continue from (a training that a longer one of the same settings extends). The
    /// index is an empty file per member, `lineages/LINEAGE/FINGERPRINT`, so that writers
    /// never race on a shared file. A member whose entry is gone (`cache gc`) is a file
    /// of no bytes, skipped by whoever reads the index.
    pub fn join_lineage(&self, lineage: &str, fingerprint: &str) -> io::Result<()> {
        check_fingerprint(lineage)?;
        check_fingerprint(fingerprint)?;
        self.ensure_root()?;
        let dir = self.root.join("lineages").join(lineage);
        fs::create_dir_all(&dir)?;
        File::create(dir.join(fingerprint))?;
        match &self.remote {
            Some(remote) => remote
                .join_lineage(lineage, fingerprint)
                .map_err(|e| io::Error::other(format!("on other machines ({e})"))),
            None => Ok(()),
        }
    }

    /// The members of `lineage` the store still holds, with their keys (read, not
    /// verified: [`Store::get`] the one to use), sorted by fingerprint.
    pub fn lineage(&self, lineage: &str) -> Vec<(String, Value)> {
        if !is_fingerprint(lineage) {
            return Vec::new();
        }
        let dir = self.root.join("lineages").join(lineage);
        let mut members: Vec<String> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| is_fingerprint(name))
            .collect();
        if let Some(remote) = &self.remote {
            members.extend(remote.lineage(lineage).unwrap_or_default());
        }
        members.sort();
        members.dedup();
        members
            .into_iter()
            .filter_map(|m| self.key_of(&m).map(|key| (m, key)))
            .collect()
    }

    /// The snapshots of unfinished stages, as entries (kind `snapshot`): directories of
    /// `snapshots/` named by a fingerprint that hold only snapshot files.
    pub fn snapshots(&self) -> Vec<EntryInfo> {
        let mut all: Vec<EntryInfo> = fs::read_dir(self.root.join("snapshots"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                is_fingerprint(&e.file_name().to_string_lossy()) && is_snapshot(&e.path(), 0)
            })
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

    /// Removes the snapshots of `fingerprint`; refuses a directory that holds anything
    /// but snapshot files.
    pub fn remove_snapshot(&self, fingerprint: &str) -> io::Result<()> {
        let dir = self.snapshot_dir(fingerprint);
        if !(is_fingerprint(fingerprint) && is_snapshot(&dir, 0)) {
            return Err(not_ours(&dir, "a snapshot"));
        }
        self.ensure_root()?;
        let doomed = self.tmp_path(fingerprint, "removed")?;
        fs::rename(dir, &doomed)?;
        fs::remove_dir_all(doomed)
    }

    /// Removes what crashed writers left in `tmp/` more than `age` ago (only the names
    /// the store and the runner give what they write there, and only in a tagged root);
    /// returns the count.
    pub fn clean_tmp(&self, age: Duration) -> usize {
        if self.check_root() != Ok(RootState::Ours) {
            return 0;
        }
        let now = SystemTime::now();
        let mut removed = 0;
        for entry in fs::read_dir(self.root.join("tmp"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if !is_tmp_name(&entry.file_name().to_string_lossy()) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > age);
            let path = entry.path();
            let gone = match entry.file_type() {
                Ok(t) if t.is_dir() => old && fs::remove_dir_all(&path).is_ok(),
                Ok(_) => old && fs::remove_file(&path).is_ok(),
                Err(_) => false,
            };
            removed += usize::from(gone);
        }
        removed
    }
}

fn check_fingerprint(fingerprint: &str) -> io::Result<()> {
    if is_fingerprint(fingerprint) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{fingerprint:?} is not a fingerprint (64 lowercase hex digits)"),
        ))
    }
}

fn not_ours(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is not {what} pipeline wrote: left alone",
            path.display()
        ),
    )
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

    const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const FP2: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    fn setup() -> (tempfile::TempDir, Store, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("cache"));
        let file = dir.path().join("weights.safetensors");
        fs::write(&file, b"some weights").unwrap();
        (dir, store, file)
    }

    fn put(store: &Store, fp: &str, file: &Path) -> Entry {
        store
            .put(
                fp,
                &json!({"lr": 0.1}),
                &json!({"loss": 0.5}),
                &[("weights".into(), file.to_path_buf())],
            )
            .unwrap()
    }

    #[test]
    fn an_entry_round_trips_and_misses_are_misses() {
        let (_dir, store, file) = setup();
        assert!(matches!(store.get(FP), Lookup::Miss));
        let put = put(&store, FP, &file);
        let Lookup::Hit(got) = store.get(FP) else {
            panic!("expected a hit")
        };
        assert_eq!(got, put);
        assert_eq!(got.key, json!({"lr": 0.1}));
        assert_eq!(fs::read(&got.outputs[0].1).unwrap(), b"some weights");
        assert_eq!(store.fingerprints().unwrap(), [FP]);
        assert_eq!(
            fs::read_dir(store.root().join("tmp")).unwrap().count(),
            0,
            "nothing left in tmp/"
        );
        assert_eq!(store.check_root(), Ok(RootState::Ours));
        assert!(matches!(store.get("abc"), Lookup::Miss));
        assert!(store.put("abc", &json!({}), &json!({}), &[]).is_err());
    }

    #[test]
    fn a_lineage_lists_its_entries_and_skips_removed_ones() {
        const LINE: &str = "00000000000000000000000000000000000000000000000000000000000000aa";
        let (_dir, store, file) = setup();
        assert!(store.lineage(LINE).is_empty());
        put(&store, FP, &file);
        put(&store, FP2, &file);
        store.join_lineage(LINE, FP2).unwrap();
        store.join_lineage(LINE, FP).unwrap();
        store.join_lineage(LINE, FP).unwrap();
        let key = json!({"lr": 0.1});
        assert_eq!(
            store.lineage(LINE),
            [(FP.to_string(), key.clone()), (FP2.to_string(), key)]
        );
        assert!(store.join_lineage("../x", FP).is_err());
        store.remove(FP).unwrap();
        let members: Vec<String> = store.lineage(LINE).into_iter().map(|m| m.0).collect();
        assert_eq!(members, [FP2]);
        assert_eq!(store.check_root(), Ok(RootState::Ours));
    }

    #[test]
    fn corrupt_or_missing_outputs_are_reported_never_used() {
        let (_dir, store, file) = setup();
        let entry = put(&store, FP, &file);
        fs::write(&entry.outputs[0].1, b"some weighTs").unwrap();
        let Lookup::Corrupt(why) = store.get(FP) else {
            panic!("expected corruption")
        };
        assert_eq!(why, "output weights does not match its checksum");
        fs::remove_file(&entry.outputs[0].1).unwrap();
        let Lookup::Corrupt(why) = store.get(FP) else {
            panic!("expected corruption")
        };
        assert_eq!(why, "output weights is missing");
        put(&store, FP, &file);
        assert!(
            matches!(store.get(FP), Lookup::Hit(_)),
            "a rebuilt entry replaces the corrupt one"
        );
        let json = store.root().join("entries").join(FP).join("entry.json");
        fs::write(&json, b"{").unwrap();
        let Lookup::Corrupt(why) = store.get(FP) else {
            panic!("expected corruption")
        };
        assert_eq!(why, "entry.json does not match its checksum");
    }

    #[test]
    fn entry_json_is_checksummed_and_required_outputs_must_be_there() {
        let (_dir, store, file) = setup();
        put(&store, FP, &file);
        let json = store.root().join("entries").join(FP).join("entry.json");
        // Valid JSON, other metrics: refused.
        let edited = fs::read_to_string(&json).unwrap().replace("0.5", "0.01");
        fs::write(&json, edited).unwrap();
        let Lookup::Corrupt(why) = store.get(FP) else {
            panic!("expected corruption")
        };
        assert_eq!(why, "entry.json does not match its checksum");

        // An entry listing no outputs, but a kind that requires one.
        store.put(FP, &json!({}), &json!({}), &[]).unwrap();
        assert!(matches!(store.get(FP), Lookup::Hit(_)));
        let Lookup::Corrupt(why) = store.get_requiring(FP, &["model.safetensors"]) else {
            panic!("expected corruption")
        };
        assert_eq!(why, "output model.safetensors is not in the entry");
        assert!(matches!(
            store.get_requiring(FP2, &["model.safetensors"]),
            Lookup::Miss
        ));
        // The same rule, known to the store by the entry's key.
        let strict = store.clone().requiring(|key| match key["kind"].as_str() {
            Some("train") => &["model.safetensors"],
            _ => &[],
        });
        assert!(
            matches!(strict.get(FP), Lookup::Hit(_)),
            "kind unknown: no rule"
        );
        strict
            .put(FP, &json!({"kind": "train"}), &json!({}), &[])
            .unwrap_err();
        let Lookup::Corrupt(why) = strict.get(FP) else {
            panic!("expected corruption")
        };
        assert_eq!(why, "output model.safetensors is not in the entry");

        // No tag: not an entry the store wrote.
        fs::remove_file(store.root().join("entries").join(FP).join(TAG)).unwrap();
        let Lookup::Corrupt(why) = store.get(FP) else {
            panic!("expected corruption")
        };
        assert!(why.ends_with("has no entry.tag naming it: pipeline did not write it"));
        assert!(store.fingerprints().unwrap().is_empty());
    }

    #[test]
    fn the_store_deletes_only_what_it_wrote() {
        let (dir, store, file) = setup();
        put(&store, FP, &file);
        // A user's directories among the entries, in tmp/ and in snapshots/.
        let entries = store.root().join("entries");
        fs::create_dir_all(entries.join("photos")).unwrap();
        fs::write(entries.join("photos/x.jpg"), "jpg").unwrap();
        fs::create_dir_all(entries.join(FP2)).unwrap();
        fs::write(entries.join(FP2).join("mine.txt"), "mine").unwrap();
        let tmp = store.root().join("tmp");
        fs::create_dir_all(tmp.join("notes")).unwrap();
        fs::write(tmp.join("notes/draft.txt"), "draft").unwrap();
        fs::write(tmp.join("draft.txt"), "draft").unwrap();
        fs::create_dir_all(tmp.join(format!("{FP}.12.run"))).unwrap();
        fs::create_dir_all(tmp.join(format!("{FP2}.removed.7"))).unwrap();
        let snapshots = store.root().join("snapshots");
        fs::create_dir_all(snapshots.join(FP).join("rank-0-of-2")).unwrap();
        fs::write(snapshots.join(FP).join("rank-0-of-2/snapshot.json"), "{}").unwrap();
        // A process of a distributed run keeps the snapshot before its last.
        fs::write(
            snapshots
                .join(FP)
                .join("rank-0-of-2/snapshot.previous.json"),
            "{}",
        )
        .unwrap();
        fs::write(
            snapshots
                .join(FP)
                .join("rank-0-of-2/snapshot-12.safetensors"),
            "t",
        )
        .unwrap();
        fs::create_dir_all(snapshots.join(FP2)).unwrap();
        fs::write(snapshots.join(FP2).join("thesis.pdf"), "pdf").unwrap();

        assert_eq!(store.fingerprints().unwrap(), [FP]);
        let listed: Vec<_> = store
            .snapshots()
            .into_iter()
            .map(|s| s.fingerprint)
            .collect();
        assert_eq!(listed, [FP]);
        assert!(store.remove("photos").is_err());
        let err = store.remove(FP2).unwrap_err().to_string();
        assert!(
            err.ends_with("is not a cache entry pipeline wrote: left alone"),
            "{err}"
        );
        assert!(store.remove_snapshot(FP2).is_err());
        assert_eq!(store.clean_tmp(Duration::ZERO), 2, "only the store's names");
        // Replacing an entry over a directory the store did not write is refused.
        let err = store
            .put(
                FP2,
                &json!({}),
                &json!({}),
                &[("weights".into(), file.clone())],
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("exists and was not written by pipeline"),
            "{err}"
        );

        store.remove_snapshot(FP).unwrap();
        store.remove(FP).unwrap();
        for survivor in [
            entries.join("photos/x.jpg"),
            entries.join(FP2).join("mine.txt"),
            tmp.join("notes/draft.txt"),
            tmp.join("draft.txt"),
            snapshots.join(FP2).join("thesis.pdf"),
        ] {
            assert!(survivor.is_file(), "{} survives", survivor.display());
        }
        assert!(!entries.join(FP).exists() && !snapshots.join(FP).exists());
        drop(dir);
    }

    #[test]
    fn nothing_is_written_into_or_removed_from_a_directory_that_is_not_a_cache() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("tmp/notes")).unwrap();
        fs::write(dir.path().join("tmp/notes/draft.txt"), "draft").unwrap();
        let file = dir.path().join("w");
        fs::write(&file, "w").unwrap();
        let store = Store::new(dir.path());
        let err = store
            .put(FP, &json!({}), &json!({}), &[("w".into(), file)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a pipeline cache (it holds "), "{err}");
        assert!(store.lock(FP).is_err());
        assert_eq!(store.clean_tmp(Duration::ZERO), 0);
        assert!(!dir.path().join("entries").exists() && !dir.path().join("locks").exists());
        assert!(dir.path().join("tmp/notes/draft.txt").is_file());
    }

    #[test]
    fn a_cache_from_before_tags_is_adopted_and_its_entries_rebuilt() {
        let (_dir, store, file) = setup();
        put(&store, FP, &file);
        // What an earlier pipeline left: no tags.
        fs::remove_file(store.root().join(crate::root::TAG_FILE)).unwrap();
        fs::remove_file(store.root().join("entries").join(FP).join(TAG)).unwrap();
        assert_eq!(store.check_root(), Ok(RootState::Legacy));
        store.ensure_root().unwrap();
        assert_eq!(store.check_root(), Ok(RootState::Ours));
        assert_eq!(store.fingerprints().unwrap(), [FP], "the entry is adopted");
        let Lookup::Corrupt(why) = store.get(FP) else {
            panic!("an entry without a checksum is not served")
        };
        assert_eq!(
            why,
            "it was written by an earlier pipeline, without a checksum"
        );
        put(&store, FP, &file);
        assert!(matches!(store.get(FP), Lookup::Hit(_)), "and is rebuilt");
    }

    #[test]
    fn locks_exclude_each_other() {
        let (_dir, store, _) = setup();
        let held = store.lock(FP).unwrap();
        let other = store.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _lock = other.lock(FP).unwrap();
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
