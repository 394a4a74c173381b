//! The stage cache shared through a [`CheckpointIo`] (a bucket, a shared directory), so
//! that a stage one machine trained is answered from the cache on every other.
//!
//! ```text
//! <prefix>/blobs/<blake3>                     an output's bytes, named by their checksum
//! <prefix>/entries/<fingerprint>.json         key, metrics, outputs (name, size, blake3)
//! <prefix>/lineages/<lineage>/<fingerprint>   empty: a training a longer one may continue
//! ```
//!
//! An entry's JSON carries a checksum over its fingerprint, key, metrics and outputs (as a
//! local entry's tag does over its `entry.json`): an entry edited in the bucket (its
//! metrics, its key, an output pointed at another blob) is found unusable when fetched
//! and by `cache verify`, and the stage is computed again. It is a checksum, not a
//! signature: it finds accidents and hand edits, not a forger with write access.
//!
//! Atomicity without rename: the blobs go up first, under names that are their checksums
//! (two writers of one name write the same bytes); the entry's JSON goes up last, with
//! [`CheckpointIo::create`] (`If-None-Match: *` on S3), and is the commit point: an entry
//! is visible only when every blob it names is there, and a writer killed at any point
//! leaves blobs no entry names, which `gc` removes after a day ([`GRACE`], the lease of
//! an upload in flight). A reader checks every blob's size and checksum as it downloads
//! it, into the local store's `tmp/`, and only then stores it locally (`store.rs`): a
//! corrupt blob is never used.
//!
//! Two machines that train the same stage at once both train (there is no lock across
//! machines); the first to publish wins, the other keeps its local entry.

use crate::io::{self, CheckpointIo, IoError};
use crate::root::is_fingerprint;
use crate::store::{is_plain_name, Entry, EntryInfo};
use serde_json::{json, Value};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long a blob no entry names is left alone: an upload in flight for that long is
/// taken for dead by `gc`.
pub const GRACE: Duration = Duration::from_secs(24 * 3600);

/// A cache in a [`CheckpointIo`].
#[derive(Debug, Clone)]
pub struct Remote {
    io: Arc<dyn CheckpointIo>,
    /// The outputs an entry of a key must hold (see `Store::requiring`).
    required: fn(&Value) -> &'static [&'static str],
}

/// The checksum an entry's JSON carries: over its fingerprint, key, metrics and outputs.
fn checksum(entry: &Value) -> String {
    let covered = json!([
        entry["fingerprint"],
        entry["key"],
        entry["metrics"],
        entry["outputs"]
    ]);
    crate::hash::hash_bytes(&serde_json::to_vec(&covered).expect("JSON values serialise"))
}

/// What fetching an entry found.
#[derive(Debug)]
pub enum Fetched {
    Absent,
    /// There, but not usable: why.
    Corrupt(String),
    /// Downloaded and checked: its key, metrics and the outputs' files.
    Found {
        key: Value,
        metrics: Value,
        outputs: Vec<(String, PathBuf)>,
    },
}

/// One output as an entry lists it.
struct Listed {
    name: String,
    size: u64,
    blake3: String,
}

fn entry_key(fingerprint: &str) -> String {
    format!("entries/{fingerprint}.json")
}

fn blob_key(blake3: &str) -> String {
    format!("blobs/{blake3}")
}

/// Writes into `inner` while counting and hashing what it writes.
struct Hashing<W> {
    inner: W,
    hasher: blake3::Hasher,
    written: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Hashing<W> {
        Hashing {
            inner,
            hasher: blake3::Hasher::new(),
            written: 0,
        }
    }

    /// Whether what was written is `output`'s bytes.
    fn is(&self, output: &Listed) -> bool {
        self.written == output.size && self.hasher.finalize().to_hex().as_str() == output.blake3
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(bytes)?;
        self.hasher.update(&bytes[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The outputs an entry's JSON lists, checked to be plain names and checksums.
fn listed(entry: &Value) -> Result<Vec<Listed>, String> {
    let outputs = entry["outputs"]
        .as_array()
        .ok_or("its JSON lists no outputs")?;
    outputs
        .iter()
        .map(|o| {
            let name = o["name"].as_str().unwrap_or_default();
            let blake3 = o["blake3"].as_str().unwrap_or_default();
            match (
                is_plain_name(name),
                is_fingerprint(blake3),
                o["size"].as_u64(),
            ) {
                (true, true, Some(size)) => Ok(Listed {
                    name: name.to_string(),
                    size,
                    blake3: blake3.to_string(),
                }),
                _ => Err(format!("its JSON lists an output it cannot be: {o}")),
            }
        })
        .collect()
}

impl Remote {
    /// The cache at `location` (`s3://bucket/prefix`, `file:///dir`).
    pub fn open(location: &str) -> Result<Remote, IoError> {
        Ok(Remote::new(io::open(location)?))
    }

    pub fn new(io: Arc<dyn CheckpointIo>) -> Remote {
        Remote {
            io,
            required: crate::store::nothing_required,
        }
    }

    /// Every entry must also hold the outputs `required` names for its key, or it is
    /// unusable (see `Store::requiring`).
    pub fn requiring(mut self, required: fn(&Value) -> &'static [&'static str]) -> Remote {
        self.required = required;
        self
    }

    /// The location, for messages.
    pub fn describe(&self) -> String {
        self.io.describe()
    }

    /// Fails when the place cannot be used at all (unreachable, refused credentials, no
    /// such bucket): one cheap request, so a run says so before it starts.
    pub fn check(&self) -> Result<(), IoError> {
        self.io.check()
    }

    /// The entry's JSON, checked: `None` when there is none.
    fn entry(&self, fingerprint: &str) -> Result<Option<Result<Value, String>>, IoError> {
        let Some(bytes) = self.io.read_bytes(&entry_key(fingerprint))? else {
            return Ok(None);
        };
        Ok(Some((|| {
            let entry: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("its JSON is not valid: {e}"))?;
            if entry["fingerprint"].as_str() != Some(fingerprint) {
                return Err("its JSON names another fingerprint".to_string());
            }
            match entry["checksum"].as_str() {
                None => {
                    return Err("it was written by an earlier pipeline, without a checksum".into())
                }
                Some(c) if c != checksum(&entry) => {
                    return Err("its JSON does not match its checksum".into())
                }
                Some(_) => {}
            }
            let outputs = listed(&entry)?;
            if let Some(absent) = (self.required)(&entry["key"])
                .iter()
                .find(|r| !outputs.iter().any(|o| o.name == **r))
            {
                return Err(format!("output {absent} is not in the entry"));
            }
            Ok(entry)
        })()))
    }

    /// The key of entry `fingerprint` (its outputs not looked at), `None` when there is
    /// no intact one or it cannot be read.
    pub fn key_of(&self, fingerprint: &str) -> Option<Value> {
        match self.entry(fingerprint) {
            Ok(Some(Ok(entry))) => Some(entry["key"].clone()),
            _ => None,
        }
    }

    /// Downloads entry `fingerprint` into the directory `into` (created), checking each
    /// output's size and checksum.
    pub fn fetch(&self, fingerprint: &str, into: &Path) -> Result<Fetched, IoError> {
        let entry = match self.entry(fingerprint)? {
            None => return Ok(Fetched::Absent),
            Some(Err(why)) => return Ok(Fetched::Corrupt(why)),
            Some(Ok(entry)) => entry,
        };
        let local = |e: std::io::Error| IoError {
            place: into.display().to_string(),
            message: e.to_string(),
        };
        fs::create_dir_all(into).map_err(local)?;
        let mut outputs = Vec::new();
        for output in listed(&entry).expect("checked by entry()") {
            let path = into.join(&output.name);
            let mut sink = Hashing::new(File::create(&path).map_err(local)?);
            if !self.io.read(&blob_key(&output.blake3), &mut sink)? {
                return Ok(Fetched::Corrupt(format!(
                    "output {} is missing",
                    output.name
                )));
            }
            sink.inner.sync_all().map_err(local)?;
            if !sink.is(&output) {
                return Ok(Fetched::Corrupt(format!(
                    "output {} does not match its checksum",
                    output.name
                )));
            }
            outputs.push((output.name, path));
        }
        Ok(Fetched::Found {
            key: entry["key"].clone(),
            metrics: entry["metrics"].clone(),
            outputs,
        })
    }

    /// Publishes the local entry `entry`: its outputs' blobs that are not there yet, then
    /// its JSON. `Ok(false)` when an intact entry was there already (it is kept); one
    /// found unusable is replaced.
    pub fn publish(&self, entry: &Entry) -> Result<bool, IoError> {
        let mut outputs = Vec::new();
        for (name, path) in &entry.outputs {
            let size = fs::metadata(path)
                .map_err(|e| IoError {
                    place: path.display().to_string(),
                    message: e.to_string(),
                })?
                .len();
            let blake3 = crate::hash::hash_file(path).map_err(|e| IoError {
                place: path.display().to_string(),
                message: e.to_string(),
            })?;
            if self.io.size(&blob_key(&blake3))? != Some(size) {
                let mut file = File::open(path).map_err(|e| IoError {
                    place: path.display().to_string(),
                    message: e.to_string(),
                })?;
                self.io.write(&blob_key(&blake3), &mut file)?;
            }
            outputs.push(json!({ "name": name, "size": size, "blake3": blake3 }));
        }
        let mut json = json!({
            "fingerprint": entry.fingerprint,
            "key": entry.key,
            "metrics": entry.metrics,
            "outputs": outputs,
        });
        json["checksum"] = checksum(&json).into();
        let bytes = serde_json::to_vec_pretty(&json).expect("JSON values serialise");
        if self.io.create(&entry_key(&entry.fingerprint), &bytes)? {
            return Ok(true);
        }
        match self.verify(&entry.fingerprint)? {
            None => Ok(false),
            // Its blobs are ours now (uploaded above where missing), or its JSON is bad.
            Some(_) => {
                self.io
                    .write(&entry_key(&entry.fingerprint), &mut bytes.as_slice())?;
                Ok(true)
            }
        }
    }

    /// Why entry `fingerprint` is not usable (every blob downloaded and hashed), `None`
    /// when it is intact or absent.
    pub fn verify(&self, fingerprint: &str) -> Result<Option<String>, IoError> {
        let entry = match self.entry(fingerprint)? {
            None => return Ok(None),
            Some(Err(why)) => return Ok(Some(why)),
            Some(Ok(entry)) => entry,
        };
        for output in listed(&entry).expect("checked by entry()") {
            let mut sink = Hashing::new(std::io::sink());
            if !self.io.read(&blob_key(&output.blake3), &mut sink)? {
                return Ok(Some(format!("output {} is missing", output.name)));
            }
            if !sink.is(&output) {
                return Ok(Some(format!(
                    "output {} does not match its checksum",
                    output.name
                )));
            }
        }
        Ok(None)
    }

    /// Every entry (not verified), for `cache ls` and `cache gc`: its size is the sum of
    /// its outputs, its last use the time it was published.
    pub fn list(&self) -> Result<Vec<EntryInfo>, IoError> {
        let mut all = Vec::new();
        for object in self.io.list("entries/")? {
            let Some(fingerprint) = object
                .key
                .strip_prefix("entries/")
                .and_then(|k| k.strip_suffix(".json"))
                .filter(|f| is_fingerprint(f))
            else {
                continue;
            };
            let (kind, bytes) = match self.entry(fingerprint)? {
                Some(Ok(entry)) => (
                    entry["key"]["spec"]["stage"]["kind"]
                        .as_str()
                        .unwrap_or("?")
                        .to_string(),
                    listed(&entry)
                        .map(|l| l.iter().map(|o| o.size).sum())
                        .unwrap_or(0),
                ),
                _ => ("?".to_string(), 0),
            };
            all.push(EntryInfo {
                fingerprint: fingerprint.to_string(),
                kind,
                bytes: bytes + object.size,
                last_used: object.modified,
            });
        }
        Ok(all)
    }

    /// Removes entry `fingerprint` (its JSON: its blobs go with the next [`Remote::sweep`]).
    pub fn remove(&self, fingerprint: &str) -> Result<(), IoError> {
        self.io.delete(&entry_key(fingerprint))
    }

    /// Removes the blobs no entry names that are older than `grace`, the members of
    /// lineages whose entry is gone, and unfinished uploads older than `grace`: how many
    /// objects, and their bytes.
    pub fn sweep(&self, grace: Duration) -> Result<(usize, u64), IoError> {
        let before = SystemTime::now() - grace;
        let mut named = std::collections::BTreeSet::new();
        let mut entries = std::collections::BTreeSet::new();
        for object in self.io.list("entries/")? {
            let Some(fingerprint) = object
                .key
                .strip_prefix("entries/")
                .and_then(|k| k.strip_suffix(".json"))
            else {
                continue;
            };
            entries.insert(fingerprint.to_string());
            if let Some(Ok(entry)) = self.entry(fingerprint)? {
                for output in listed(&entry).expect("checked by entry()") {
                    named.insert(output.blake3);
                }
            }
        }
        let (mut count, mut bytes) = (0, 0);
        for object in self.io.list("blobs/")? {
            let blake3 = object.key.trim_start_matches("blobs/");
            let old = object.modified.is_some_and(|m| m < before);
            if !named.contains(blake3) && old {
                self.io.delete(&object.key)?;
                count += 1;
                bytes += object.size;
            }
        }
        for object in self.io.list("lineages/")? {
            let member = object.key.rsplit('/').next().unwrap_or_default();
            if !entries.contains(member) {
                self.io.delete(&object.key)?;
                count += 1;
            }
        }
        count += self.io.discard_unfinished(before)?;
        Ok((count, bytes))
    }

    /// Records that entry `fingerprint` belongs to `lineage` (see `Store::join_lineage`).
    pub fn join_lineage(&self, lineage: &str, fingerprint: &str) -> Result<(), IoError> {
        self.io
            .create(&format!("lineages/{lineage}/{fingerprint}"), b"")
            .map(drop)
    }

    /// The members of `lineage` recorded here.
    pub fn lineage(&self, lineage: &str) -> Result<Vec<String>, IoError> {
        Ok(self
            .io
            .list(&format!("lineages/{lineage}/"))?
            .into_iter()
            .filter_map(|o| o.key.rsplit('/').next().map(str::to_string))
            .filter(|m| is_fingerprint(m))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::LocalIo;
    use crate::store::{Lookup, Store};

    const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn stores(dir: &Path) -> (Store, Store, Arc<LocalIo>) {
        let io = Arc::new(LocalIo::new(dir.join("bucket")));
        let remote = Remote::new(io.clone());
        let a = Store::new(dir.join("a")).with_remote(remote.clone());
        let b = Store::new(dir.join("b")).with_remote(remote);
        (a, b, io)
    }

    fn stored(store: &Store, dir: &Path) -> Entry {
        let weights = dir.join("weights");
        fs::write(&weights, b"trained weights").unwrap();
        store
            .put(
                FP,
                &json!({"stage": "train"}),
                &json!({"loss": 0.5}),
                &[("model.safetensors".into(), weights)],
            )
            .unwrap()
    }

    #[test]
    fn a_second_machine_reuses_what_the_first_published() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, _) = stores(dir.path());
        let entry = stored(&a, dir.path());
        assert!(matches!(b.get(FP), Lookup::Miss), "not published yet");
        assert!(a.publish(&entry).unwrap(), "sent");
        assert!(!a.publish(&entry).unwrap(), "there already");
        let Lookup::Hit(fetched) = b.get(FP) else {
            panic!("fetched")
        };
        assert_eq!(fetched.metrics, json!({"loss": 0.5}));
        assert_eq!(
            fs::read(fetched.output("model.safetensors").unwrap()).unwrap(),
            b"trained weights"
        );
        assert!(
            fetched
                .output("model.safetensors")
                .unwrap()
                .starts_with(dir.path().join("b")),
            "now local"
        );
        assert_eq!(a.remote().unwrap().verify(FP).unwrap(), None);
        let listed = a.remote().unwrap().list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].fingerprint, FP);
    }

    #[test]
    fn an_entry_is_visible_only_once_complete_and_never_used_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, io) = stores(dir.path());
        let entry = stored(&a, dir.path());
        // A writer killed after its blobs went up, before the entry's JSON: no entry.
        let blob = blob_key(&crate::hash::hash_file(&entry.outputs[0].1).unwrap());
        io.write(&blob, &mut &b"trained weights"[..]).unwrap();
        assert!(matches!(b.get(FP), Lookup::Miss));
        let remote = a.remote().unwrap();
        assert_eq!(
            remote.sweep(GRACE).unwrap(),
            (0, 0),
            "within the lease: kept"
        );
        assert_eq!(
            remote.sweep(Duration::ZERO).unwrap(),
            (1, 15),
            "an orphan blob goes"
        );
        // A blob changed under a published entry: found, never used.
        a.publish(&entry).unwrap();
        io.write(&blob, &mut &b"trained weighTs"[..]).unwrap();
        match b.get(FP) {
            Lookup::Corrupt(why) => assert!(
                why.contains("output model.safetensors does not match its checksum"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(remote.verify(FP).unwrap().is_some());
        // Publishing again repairs it (its missing blob sent again); the store that sent
        // it once does not send it again.
        io.delete(&blob).unwrap();
        assert!(!a.publish(&entry).unwrap(), "marked as published");
        assert!(matches!(b.get(FP), Lookup::Corrupt(_)));
        remote.publish(&entry).unwrap();
        assert!(matches!(b.get(FP), Lookup::Hit(_)));
        remote.remove(FP).unwrap();
        assert!(remote.list().unwrap().is_empty());
    }

    /// Rewrites entry FP's JSON in the bucket through `edit` (its checksum left as it was,
    /// unless `edit` changes it too).
    fn edit_entry(io: &LocalIo, edit: impl Fn(&mut Value)) {
        let bytes = io.read_bytes(&entry_key(FP)).unwrap().unwrap();
        let mut entry: Value = serde_json::from_slice(&bytes).unwrap();
        edit(&mut entry);
        let bytes = serde_json::to_vec(&entry).unwrap();
        io.write(&entry_key(FP), &mut bytes.as_slice()).unwrap();
    }

    #[test]
    fn an_entry_edited_in_the_bucket_is_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _, io) = stores(dir.path());
        let entry = stored(&a, dir.path());
        // Another blob that is intact on its own, for an output re-pointed at it.
        let other = dir.path().join("other");
        fs::write(&other, b"other weights").unwrap();
        let other_hash = crate::hash::hash_file(&other).unwrap();
        io.write(&blob_key(&other_hash), &mut File::open(&other).unwrap())
            .unwrap();
        type Edit = Box<dyn Fn(&mut Value)>;
        let edits: Vec<(&str, Edit, &str)> = vec![
            (
                "metrics",
                Box::new(|e| e["metrics"]["loss"] = json!(0.01)),
                "does not match its checksum",
            ),
            (
                "key",
                Box::new(|e| e["key"]["stage"] = json!("eval")),
                "does not match its checksum",
            ),
            (
                "output",
                Box::new(move |e| {
                    e["outputs"][0]["blake3"] = json!(other_hash);
                    e["outputs"][0]["size"] = json!(13);
                }),
                "does not match its checksum",
            ),
            (
                "checksum",
                Box::new(|e| {
                    e.as_object_mut().unwrap().remove("checksum");
                }),
                "without a checksum",
            ),
        ];
        for (what, edit, why) in edits {
            let remote = a.remote().unwrap();
            remote.publish(&entry).unwrap();
            edit_entry(&io, edit);
            // A machine that has not got it locally.
            let c = Store::new(dir.path().join(format!("c-{what}"))).with_remote(remote.clone());
            match c.get(FP) {
                Lookup::Corrupt(got) => assert!(got.contains(why), "{what}: {got}"),
                other => panic!("{what}: served {other:?}"),
            }
            assert!(
                remote.verify(FP).unwrap().is_some_and(|w| w.contains(why)),
                "{what}"
            );
            // Publishing again replaces the unusable entry.
            remote.publish(&entry).unwrap();
            assert_eq!(remote.verify(FP).unwrap(), None, "{what}");
        }
    }

    #[test]
    fn an_entry_without_its_required_outputs_is_unusable_and_fetched_once() {
        // Before, an entry listing no outputs was fetched, stored, found lacking, and
        // fetched again, until the stack overflowed.
        let dir = tempfile::tempdir().unwrap();
        let (a, _, io) = stores(dir.path());
        let entry = stored(&a, dir.path());
        a.publish(&entry).unwrap();
        edit_entry(&io, |e| {
            e["outputs"] = json!([]);
            e["checksum"] = checksum(e).into();
        });
        let needs_weights = |_: &Value| -> &'static [&'static str] { &["model.safetensors"] };
        let c = Store::new(dir.path().join("c"))
            .requiring(needs_weights)
            .with_remote(a.remote().unwrap().clone());
        match c.get(FP) {
            Lookup::Corrupt(why) => assert!(
                why.contains("model.safetensors is not in the entry"),
                "{why}"
            ),
            other => panic!("served {other:?}"),
        }
        let remote = a.remote().unwrap().clone().requiring(needs_weights);
        assert!(remote.verify(FP).unwrap().is_some());
    }
}
