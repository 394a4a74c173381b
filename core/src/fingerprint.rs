//! Stage fingerprints: the key that decides whether a stage's earlier outputs can be
//! reused. A key is an explicit struct, serialised as canonical JSON (ordered maps only)
//! and hashed with blake3; a stage's key holds its upstream stages' fingerprints, so a
//! change reaches exactly the stage and its descendants (Merkle-style, as cargo's).
//!
//! | in the key | why |
//! |---|---|
//! | key format version | changing this table must invalidate every entry |
//! | tool version, libtorch version | kernels and numerics may change between versions |
//! | device kind (`cpu`, `cuda`), precision | numerics differ between them |
//! | the number of processes (when more than one) | each process sees its share of every batch |
//! | seed | initialisation, data order and dropout depend on it |
//! | the stage's kind and settings, defaults applied | what the stage does |
//! | the manifest sections the stage reads (defaults applied) | `train`: data, model, loss, optimizer, schedule, and how steps are taken (`accelerator`'s accumulation, clipping, loss scaling, determinism, strategy, sampler, synchronised batch-norm); `eval`: data, loss |
//! | content hashes of the files it reads | the data file (and an NPY labels file), `init` weights |
//! | the fingerprints of the stages it needs | a change upstream reaches every descendant |
//!
//! Deliberately **not** in the key: stage names (renaming reruns nothing), the order and
//! formatting of the manifest, comments, how a value was written (property, child node,
//! `--set`, or left to its default), data file paths (content counts, not location),
//! `accelerator.threads`, `bucket-mb`, `timeout` and `backend` (speed only), how often a
//! `train` stage saves resumable snapshots
//! (`snapshot-every-*`: they do not change the result), the manifest's own path and the run
//! directory.

use manifests::{Manifest, StageConfig};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bump when the contents of [`StageKey`] change meaning.
pub const KEY_VERSION: u32 = 1;

/// What the keys of one run share: where and with what the stages would run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    pub tool: String,
    pub libtorch: String,
    /// `cpu` or `cuda`, as resolved for the run.
    pub device: String,
    /// Processes training together: with N, each sees 1/N of every batch of the epoch.
    /// Left out of the key for one process, so that keys from before it stay valid.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub processes: u64,
}

fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

/// Everything a stage's outputs depend on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageKey {
    pub version: u32,
    pub environment: Environment,
    pub precision: String,
    pub seed: u64,
    /// The stage's kind and settings, and the manifest sections it reads.
    pub spec: Value,
    /// Content hashes of the files the stage reads, by role.
    pub inputs: BTreeMap<String, String>,
    /// Fingerprints of the stages it needs, sorted (their names are not part of the key).
    pub upstream: Vec<String>,
}

impl StageKey {
    /// The canonical JSON text of the key.
    pub fn canonical(&self) -> String {
        serde_json::to_string(self).expect("keys serialise")
    }

    /// blake3 of the canonical JSON, as hex.
    pub fn fingerprint(&self) -> String {
        cache::hash_bytes(self.canonical().as_bytes())
    }
}

/// A stage's key and fingerprint.
#[derive(Debug, Clone)]
pub struct Fingerprint {
    pub key: StageKey,
    pub hash: String,
}

fn to_value(x: &impl Serialize) -> Value {
    serde_json::to_value(x).expect("specs serialise")
}

/// The files a stage reads, by role, resolved against the manifest's directory.
pub fn stage_inputs(manifest: &Manifest, index: usize) -> BTreeMap<String, PathBuf> {
    let mut files = BTreeMap::new();
    match &manifest.stages[index].config {
        StageConfig::Train(train) => {
            files.insert(
                "data".to_string(),
                manifest.resolve(&manifest.data.source.value),
            );
            if manifest.data.format == manifests::DataFormat::Npy {
                files.insert(
                    "labels".to_string(),
                    manifest.resolve(Path::new(&manifest.data.labels)),
                );
            }
            if let Some(init) = &train.init {
                files.insert("init".to_string(), manifest.resolve(&init.value));
            }
        }
        StageConfig::Eval(_) => {
            files.insert(
                "data".to_string(),
                manifest.resolve(&manifest.data.source.value),
            );
        }
        StageConfig::Checkpoint(_) => {}
    }
    files
}

/// The stage's settings plus the manifest sections it reads, with file paths removed
/// (their contents are hashed as inputs instead).
fn stage_spec(manifest: &Manifest, index: usize) -> Value {
    let mut data = to_value(&manifest.data);
    if let Some(map) = data.as_object_mut() {
        map.remove("source");
    }
    let mut stage = to_value(&manifest.stages[index].config);
    if let Some(map) = stage.as_object_mut() {
        for unkeyed in ["init", "snapshot_every_epochs", "snapshot_every_steps"] {
            map.remove(unkeyed);
        }
    }
    // How the steps are taken; the device is in the environment, precision in the key,
    // and the thread count changes only the speed.
    let mut accelerator = to_value(&manifest.accelerator);
    if let Some(map) = accelerator.as_object_mut() {
        for unkeyed in ["device", "precision", "threads"] {
            map.remove(unkeyed);
        }
        // Bucket sizes, timeouts and the collectives' engine change how fast, not what.
        if let Some(d) = map.get_mut("distributed").and_then(Value::as_object_mut) {
            d.remove("bucket_mb");
            d.remove("timeout_seconds");
            d.remove("backend");
        }
    }
    match &manifest.stages[index].config {
        StageConfig::Train(_) => json!({
            "stage": stage,
            "data": data,
            "model": to_value(&manifest.model),
            "loss": to_value(&manifest.loss),
            "optimizer": to_value(&manifest.optimizer),
            "schedule": to_value(&manifest.schedule),
            "accelerator": accelerator,
        }),
        StageConfig::Eval(_) => {
            json!({ "stage": stage, "data": data, "loss": to_value(&manifest.loss) })
        }
        StageConfig::Checkpoint(_) => json!({ "stage": stage }),
    }
}

/// Fingerprints every stage in `order` (dependencies first, as `Plan::order`).
/// `hash_file` gives a file's content hash; its error is returned with the stage and role.
pub fn fingerprints<E>(
    manifest: &Manifest,
    order: &[usize],
    environment: &Environment,
    mut hash_file: impl FnMut(&Path) -> Result<String, E>,
) -> Result<BTreeMap<usize, Fingerprint>, (usize, String, E)> {
    let mut done: BTreeMap<usize, Fingerprint> = BTreeMap::new();
    for &index in order {
        let mut inputs = BTreeMap::new();
        for (role, path) in stage_inputs(manifest, index) {
            let hash = hash_file(&path).map_err(|e| (index, role.clone(), e))?;
            inputs.insert(role, hash);
        }
        let mut upstream: Vec<String> = manifest.stages[index]
            .needs
            .iter()
            .filter_map(|n| manifest.stages.iter().position(|s| s.name.value == n.value))
            .filter_map(|i| done.get(&i).map(|f| f.hash.clone()))
            .collect();
        upstream.sort();
        let key = StageKey {
            version: KEY_VERSION,
            environment: environment.clone(),
            precision: to_value(&manifest.accelerator.precision)
                .as_str()
                .unwrap_or("32")
                .to_string(),
            seed: manifest.seed,
            spec: stage_spec(manifest, index),
            inputs,
            upstream,
        };
        let hash = key.fingerprint();
        done.insert(index, Fingerprint { key, hash });
    }
    Ok(done)
}

/// What changed between two keys of the same stage, in words a user reads:
/// `optimizer.lr changed 0.001 → 0.0003`, `data file digits.csv.gz changed`. `files` names
/// the stage's input files by role (see [`stage_inputs`]). Upstream fingerprints are left
/// to the caller, which knows the upstream stages' names.
pub fn explain_change(
    old: &StageKey,
    new: &StageKey,
    files: &BTreeMap<String, PathBuf>,
) -> Vec<String> {
    let mut reasons = Vec::new();
    diff_values(
        "",
        &by_section(&old.spec),
        &by_section(&new.spec),
        &mut reasons,
    );
    for (role, hash) in &new.inputs {
        let file = files
            .get(role)
            .and_then(|p| p.file_name())
            .map_or(String::new(), |n| format!(" {}", n.to_string_lossy()));
        match old.inputs.get(role) {
            Some(h) if h == hash => {}
            Some(_) => reasons.push(format!("{role} file{file} changed")),
            None => reasons.push(format!("{role} file{file} added")),
        }
    }
    let mut changed = |what: &str, a: &dyn std::fmt::Display, b: &dyn std::fmt::Display| {
        let (a, b) = (a.to_string(), b.to_string());
        if a != b {
            reasons.push(format!("{what} changed {a} → {b}"));
        }
    };
    changed("seed", &old.seed, &new.seed);
    changed("accelerator.precision", &old.precision, &new.precision);
    let (a, b) = (&old.environment, &new.environment);
    changed("the device", &a.device, &b.device);
    changed("the number of processes", &a.processes, &b.processes);
    changed("libtorch", &a.libtorch, &b.libtorch);
    changed("pipeline", &a.tool, &b.tool);
    changed("the cache key format", &old.version, &new.version);
    reasons
}

/// The spec with the stage's own settings under its kind (`train`, `eval`, …), so that
/// paths read like the manifest: `train.epochs`, `optimizer.lr`.
fn by_section(spec: &Value) -> Value {
    let mut spec = spec.clone();
    if let Some(map) = spec.as_object_mut() {
        if let Some(mut stage) = map.remove("stage") {
            let kind = stage.as_object_mut().and_then(|s| s.remove("kind"));
            let name = kind
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or("stage")
                .to_string();
            map.insert(name, stage);
        }
    }
    spec
}

fn diff_values(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff_values(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{} changed {} → {}", path.replace('_', "-"), a, b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
seed 1
data { source "d.csv"; }
model { linear 8; relu; linear 3; }
loss "cross-entropy"
optimizer "adam" lr=0.001
train
eval "test" needs="train"
checkpoint needs="train"
"#;

    fn keys(text: &str) -> Vec<Fingerprint> {
        let checked = crate::load(text, Path::new("m.kdl"), &[]);
        let m = checked
            .valid()
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics));
        let plan = crate::Plan::new(m);
        let env = Environment {
            tool: "t".into(),
            libtorch: "2.13.0".into(),
            device: "cpu".into(),
            processes: 1,
        };
        let all = fingerprints(m, &plan.order, &env, |p| {
            Ok::<_, ()>(format!("hash of {}", p.display()))
        })
        .unwrap();
        (0..m.stages.len()).map(|i| all[&i].clone()).collect()
    }

    fn changed(a: &[Fingerprint], b: &[Fingerprint]) -> Vec<bool> {
        a.iter().zip(b).map(|(x, y)| x.hash != y.hash).collect()
    }

    #[test]
    fn formatting_order_comments_and_written_defaults_do_not_change_keys() {
        let a = keys(BASE);
        let b = keys(&BASE.replace(
            "optimizer \"adam\" lr=0.001",
            "// tuned\noptimizer {\n    lr 0.001\n    kind \"adam\"\n    beta1 0.9\n}",
        ));
        assert_eq!(changed(&a, &b), [false, false, false]);
        let renamed = keys(&BASE.replace("eval \"test\"", "eval \"holdout\""));
        assert_eq!(
            changed(&a, &renamed),
            [false, false, false],
            "names are not part of the key"
        );
    }

    #[test]
    fn a_change_reaches_exactly_the_stage_and_its_descendants() {
        let a = keys(BASE);
        let lr = keys(&BASE.replace("lr=0.001", "lr=0.0003"));
        assert_eq!(changed(&a, &lr), [true, true, true]);
        let eval_batch = keys(&BASE.replace(
            "eval \"test\" needs=\"train\"",
            "eval \"test\" needs=\"train\" batch-size=64",
        ));
        assert_eq!(
            changed(&a, &eval_batch),
            [false, true, false],
            "the trained model is reused"
        );
        let threads = keys(&format!("{BASE}accelerator {{ threads 1; }}\n"));
        assert_eq!(changed(&a, &threads), [false, false, false]);
        let snapshots = keys(&BASE.replace("train\n", "train snapshot-every-steps=5\n"));
        assert_eq!(changed(&a, &snapshots), [false, false, false]);
        let accumulate = keys(&format!("{BASE}accelerator {{ accumulate 2; }}\n"));
        assert_eq!(
            changed(&a, &accumulate),
            [true, true, true],
            "how steps are taken is part of training"
        );
    }

    #[test]
    fn changes_are_explained_in_words() {
        let a = keys(BASE);
        let b = keys(&BASE.replace("lr=0.001", "lr=0.0003"));
        let files = BTreeMap::from([("data".to_string(), PathBuf::from("d.csv"))]);
        assert_eq!(
            explain_change(&a[0].key, &b[0].key, &files),
            ["optimizer.lr changed 0.001 → 0.0003"]
        );
        assert_eq!(
            explain_change(&a[1].key, &b[1].key, &files),
            Vec::<String>::new(),
            "upstream changes are the caller's to name"
        );
        let c = keys(&BASE.replace("train\n", "train epochs=3\n"));
        assert_eq!(
            explain_change(&a[0].key, &c[0].key, &files),
            ["train.epochs changed 10 → 3"]
        );
        let mut d = c[0].key.clone();
        d.inputs.insert("data".into(), "another hash".into());
        d.environment.device = "cuda".into();
        d.environment.processes = 2;
        assert_eq!(
            explain_change(&c[0].key, &d, &files),
            [
                "data file d.csv changed",
                "the device changed cpu → cuda",
                "the number of processes changed 1 → 2"
            ]
        );
        // One process leaves the key as it was before processes were counted.
        assert!(serde_json::to_value(&c[0].key).unwrap()["environment"]
            .get("processes")
            .is_none());
    }
}
