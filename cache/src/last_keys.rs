//! The key every stage of a manifest had when it last ran, so that `pipeline status` can
//! say what changed since: `<cache>/manifests/<blake3 of the manifest's path>.json`.
//!
//! This is advisory: the store decides what is fresh. A lost or stale record only makes
//! an explanation vaguer ("not in the cache" instead of "optimizer.lr changed").

use crate::atomic::write_atomic;
use crate::hash::hash_bytes;
use serde_json::{json, Map, Value};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct LastKeys {
    file: Option<PathBuf>,
    manifest: String,
    stages: Map<String, Value>,
}

/// Where the record of `manifest` lives under `root`.
fn record_path(root: &Path, manifest: &str) -> PathBuf {
    root.join("manifests")
        .join(format!("{}.json", &hash_bytes(manifest.as_bytes())[..32]))
}

fn read(file: &Path) -> Option<Value> {
    serde_json::from_slice(&fs::read(file).ok()?).ok()
}

impl LastKeys {
    /// The record of the manifest at `manifest` (its absolute path names it).
    pub fn load(root: &Path, manifest: &Path) -> LastKeys {
        let manifest = fs::canonicalize(manifest)
            .unwrap_or_else(|_| manifest.to_path_buf())
            .to_string_lossy()
            .into_owned();
        let file = record_path(root, &manifest);
        let stages = read(&file)
            .and_then(|v| v["stages"].as_object().cloned())
            .unwrap_or_default();
        LastKeys {
            file: Some(file),
            manifest,
            stages,
        }
    }

    /// A record that knows nothing and is never saved (for `--no-cache`).
    pub fn none() -> LastKeys {
        LastKeys {
            file: None,
            manifest: String::new(),
            stages: Map::new(),
        }
    }

    /// The fingerprint and key `stage` had when it last ran.
    pub fn get(&self, stage: &str) -> Option<(&str, &Value)> {
        let s = self.stages.get(stage)?;
        Some((s["fingerprint"].as_str()?, &s["key"]))
    }

    /// Records `stage`'s fingerprint and key, and saves the record if it changed.
    pub fn record(&mut self, stage: &str, fingerprint: &str, key: &Value) -> io::Result<()> {
        if self.get(stage) == Some((fingerprint, key)) {
            return Ok(());
        }
        self.stages.insert(
            stage.to_string(),
            json!({ "fingerprint": fingerprint, "key": key }),
        );
        match &self.file {
            Some(file) => {
                // `<root>/manifests/<name>.json`: nothing is written into a non-cache.
                if let Some(root) = file.parent().and_then(Path::parent) {
                    crate::root::ensure(root)?;
                }
                write_atomic(
                    file,
                    &serde_json::to_vec_pretty(
                        &json!({ "manifest": self.manifest, "stages": self.stages }),
                    )
                    .expect("JSON values serialise"),
                )
            }
            None => Ok(()),
        }
    }
}

/// Every recorded (manifest path, stage name, fingerprint) under `root`, for `cache ls`.
pub fn recorded_stages(root: &Path) -> Vec<(String, String, String)> {
    let mut all = Vec::new();
    for entry in fs::read_dir(root.join("manifests"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(v) = read(&entry.path()) else {
            continue;
        };
        let manifest = v["manifest"].as_str().unwrap_or_default().to_string();
        for (stage, s) in v["stages"].as_object().into_iter().flatten() {
            if let Some(fp) = s["fingerprint"].as_str() {
                all.push((manifest.clone(), stage.clone(), fp.to_string()));
            }
        }
    }
    all.sort();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_a_reload_and_are_per_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.kdl"), dir.path().join("b.kdl"));
        fs::write(&a, "").unwrap();
        fs::write(&b, "").unwrap();
        let root = dir.path().join("cache");
        let mut keys = LastKeys::load(&root, &a);
        assert_eq!(keys.get("train"), None);
        keys.record("train", "f1", &json!({"lr": 0.1})).unwrap();
        let again = LastKeys::load(&root, &a);
        assert_eq!(again.get("train"), Some(("f1", &json!({"lr": 0.1}))));
        assert_eq!(LastKeys::load(&root, &b).get("train"), None);
        let listed = recorded_stages(&root);
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].1.as_str(), listed[0].2.as_str()),
            ("train", "f1")
        );
    }
}
