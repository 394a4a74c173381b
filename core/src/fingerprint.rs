//! Stage fingerprints: the key that decides whether a stage's earlier outputs can be
//! reused. A key is an explicit struct, serialised as canonical JSON (ordered maps only)
//! and hashed with blake3; a stage's key holds its upstream stages' fingerprints, so a
//! change reaches exactly the stage and its descendants (Merkle-style, as cargo's).
//! The keys of every example's stages are pinned byte for byte
//! (`tests/fixtures/stage-keys/`, `the_keys_of_the_examples_are_pinned`): a renamed field
//! or a changed default cannot change keys unnoticed. What changed between two keys is
//! said by typed reasons ([`crate::stale::Reason`]).
//!
//! | in the key | why |
//! |---|---|
//! | key format version | changing this table must invalidate every entry |
//! | tool version, libtorch version | kernels and numerics may change between versions |
//! | device kind (`cpu`, `cuda`), precision | numerics differ between them |
//! | the number of processes (when more than one) | each process sees its share of every batch |
//! | on the CPU, the number of threads the math runs on (`accelerator.threads`, or the cores this process may use) | libtorch's parallel reductions sum in another order with another count: a GRU's test MSE was 464.19 on 2 threads and 477.66 on 1 |
//! | seed | initialisation, data order and dropout depend on it |
//! | the stage's kind and settings, defaults applied | what the stage does (for `train`: `strict` when #false, `freeze` patterns when any, sorted) |
//! | the manifest sections the stage reads (defaults applied) | `train`: data, model, loss, optimizer, schedule, and how steps are taken (`accelerator`'s accumulation, clipping, loss scaling, determinism, strategy, sampler, synchronised batch-norm); `eval`: data, loss |
//! | content hashes of the files it reads | the data file (and a labels file, a tokenizer; for images every image and a listing; for `.npy` shards each shard's content, in order), `init` weights, a `torchscript` model, a `torchscript` loss (`train`, `eval`), each scripted `metric` it measures |
//! | the name and `mode` of each scripted `metric` it measures | a monitor's direction decides which weights are kept and when to stop |
//! | `load: stream` when the features are streamed (`data.load`, `auto` resolved) and `scale` or `missing "mean"` is fitted | streamed statistics are summed in another order; otherwise streamed and held batches are the same |
//! | the fingerprints of the stages it needs | a change upstream reaches every descendant |
//!
//! Deliberately **not** in the key: stage names (renaming reruns nothing), the order and
//! formatting of the manifest, comments, how a value was written (property, child node,
//! `--set`, or left to its default), data file paths (content counts, not location),
//! `bucket-mb`, `timeout` and `backend`, `data.workers` and
//! `data.prefetch` (speed only), how often a
//! `train` stage saves resumable snapshots
//! (`snapshot-every-*`: they do not change the result), the manifest's own path and the run
//! directory.

use crate::stages::{self, KeyParts};
use crate::stale::{Platform, Reason};
use manifests::{Manifest, Missing, Scale};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bump when the contents of [`StageKey`] change meaning.
///
/// 2: layers initialise as `torch.nn` does (convolution biases, batch-norm weights), so
/// the same settings train other weights than under 1.
/// 3: `data` holds the CSV dialect, column selections (label lists), missing values and
/// stratification; an eval stage's key hashes a labels file.
/// 4: the environment holds the CPU thread count (entries of 3 were stored whatever the
/// count, so none can be trusted for a given one).
pub const KEY_VERSION: u32 = 4;

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
    /// On the CPU, the threads each process computes on ([`cpu_threads`]): libtorch's
    /// parallel reductions give other bits with another count. `None` on a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
}

/// The threads a process computes on, on the CPU: `accelerator.threads`, or else
/// `OMP_NUM_THREADS` when it is a positive integer (as libtorch itself reads it: a job
/// script's way to keep processes from oversubscribing the cores), or else every core this
/// process may use. The worker sets libtorch's count to this, so that the key says what
/// the math ran on.
pub fn cpu_threads(accelerator: &manifests::AcceleratorSpec) -> u64 {
    threads_from(
        accelerator.threads,
        std::env::var("OMP_NUM_THREADS").ok().as_deref(),
    )
}

fn threads_from(threads: Option<u64>, omp: Option<&str>) -> u64 {
    threads
        .or_else(|| omp?.trim().parse::<u64>().ok().filter(|&n| n > 0))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
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

pub(crate) fn to_value(x: &impl Serialize) -> Value {
    serde_json::to_value(x).expect("specs serialise")
}

/// The role of the file of `data.inputs.NAME`.
pub fn input_role(name: &str) -> String {
    format!("input {name}")
}

/// The role of the file of input `name` (`data.inputs`) for a stage's own `source`
/// (`input "NAME" "FILE"` of an `eval` or `predict` stage).
pub fn source_input_role(name: &str) -> String {
    format!("source input {name}")
}

/// The role of a stage's own `source` among its inputs (an `eval` on another file, a
/// `predict`).
pub const SOURCE_ROLE: &str = "source";

/// The files a stage reads, by role, resolved against the manifest's directory.
pub fn stage_inputs(manifest: &Manifest, index: usize) -> BTreeMap<String, PathBuf> {
    let mut files = BTreeMap::new();
    stages::member(&manifest.stages[index].config).key_inputs(manifest, &mut files);
    for metric in manifest.scripted_metrics_of(index) {
        files.insert(metric_role(&metric.name.value), metric.script.file.clone());
    }
    files
}

/// The role of the module of the scripted metric `name`.
pub fn metric_role(name: &str) -> String {
    format!("metric {name}")
}

/// The fields of a stage's settings (as serialised) left out of its key: `init` is an
/// input (its content is hashed), snapshots do not change the result.
const UNKEYED_STAGE: [&str; 3] = ["init", "snapshot_every_epochs", "snapshot_every_steps"];
/// … of `accelerator`: the device is in the environment, the precision in the key of its
/// own, the thread count changes only the speed.
const UNKEYED_ACCELERATOR: [&str; 3] = ["device", "precision", "threads"];
/// … of `accelerator`'s distributed settings: they change how fast, not what.
const UNKEYED_DISTRIBUTED: [&str; 3] = ["bucket_mb", "timeout_seconds", "backend"];

/// The stage's settings plus the manifest sections it reads, with file paths removed
/// (their contents are hashed as inputs instead).
fn stage_spec(manifest: &Manifest, index: usize) -> Value {
    let mut data = to_value(&manifest.data);
    if let Some(map) = data.as_object_mut() {
        map.remove("source");
        // Streamed features are filled and scaled with statistics summed in another
        // order: the key says so (only then: streamed and held batches are otherwise the
        // same, and the keys of in-memory data stay as they were).
        let fitted = manifest.data.scale != Scale::None || manifest.data.missing == Missing::Mean;
        if fitted && crate::load::streams(manifest) {
            map.insert("load".into(), json!("stream"));
        }
    }
    let mut stage = to_value(&manifest.stages[index].config);
    if let Some(map) = stage.as_object_mut() {
        for unkeyed in UNKEYED_STAGE {
            map.remove(unkeyed);
        }
        // The same patterns freeze the same parameters in any order.
        if let Some(Value::Array(patterns)) = map.get_mut("freeze") {
            patterns.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            patterns.dedup();
        }
    }
    // How the steps are taken.
    let mut accelerator = to_value(&manifest.accelerator);
    if let Some(map) = accelerator.as_object_mut() {
        for unkeyed in UNKEYED_ACCELERATOR {
            map.remove(unkeyed);
        }
        if let Some(d) = map.get_mut("distributed").and_then(Value::as_object_mut) {
            for unkeyed in UNKEYED_DISTRIBUTED {
                d.remove(unkeyed);
            }
        }
    }
    // The scripted metrics the stage measures, by name and direction (a monitor's
    // direction decides which weights are kept); left out when none, as before them.
    let metrics = manifest.scripted_metrics_of(index);
    let parts = KeyParts {
        stage,
        data,
        accelerator,
    };
    let mut spec = stages::member(&manifest.stages[index].config).key_spec(manifest, parts);
    if let (Some(map), false) = (spec.as_object_mut(), metrics.is_empty()) {
        map.insert("metrics".into(), to_value(&metrics));
    }
    spec
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
) -> Vec<Reason> {
    let mut reasons = Vec::new();
    diff_values(
        "",
        &as_written(&old.spec),
        &as_written(&new.spec),
        &mut reasons,
    );
    for (role, hash) in &new.inputs {
        let file = files
            .get(role)
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let role = role.clone();
        match old.inputs.get(&role) {
            Some(h) if h == hash => {}
            Some(_) => reasons.push(Reason::FileChanged { role, file }),
            None => reasons.push(Reason::FileAdded { role, file }),
        }
    }
    let differ = |a: &dyn std::fmt::Display, b: &dyn std::fmt::Display| {
        let (a, b) = (a.to_string(), b.to_string());
        (a != b).then_some((a, b))
    };
    for (key, from, to) in [
        (
            "seed",
            &old.seed as &dyn std::fmt::Display,
            &new.seed as &dyn std::fmt::Display,
        ),
        ("accelerator.precision", &old.precision, &new.precision),
        (
            "accelerator.threads",
            &shown_count(old.environment.threads),
            &shown_count(new.environment.threads),
        ),
    ] {
        if let Some((from, to)) = differ(from, to) {
            reasons.push(Reason::Setting {
                key: key.into(),
                from,
                to,
            });
        }
    }
    let (a, b) = (&old.environment, &new.environment);
    for (what, from, to) in [
        (
            Platform::Device,
            &a.device as &dyn std::fmt::Display,
            &b.device as &dyn std::fmt::Display,
        ),
        (Platform::Processes, &a.processes, &b.processes),
        (Platform::Libtorch, &a.libtorch, &b.libtorch),
        (Platform::Tool, &a.tool, &b.tool),
        (Platform::KeyFormat, &old.version, &new.version),
    ] {
        if let Some((from, to)) = differ(from, to) {
            reasons.push(Reason::Platform { what, from, to });
        }
    }
    reasons
}

/// A thread count as `status` says it (none: off the CPU).
fn shown_count(n: Option<u64>) -> String {
    n.map_or_else(|| "none".into(), |n| n.to_string())
}

/// The spec as a user writes the manifest, so that every path of a difference is a key
/// of the manifest (`accelerator.strategy`, `schedule.min-lr`, `data.label`): the stage's
/// own settings under its kind (`train`, `eval`, …), the accelerator's `distributed`
/// settings at the accelerator's level under their own names and values (`sampler
/// "bucketed"`, `shard-remainder "drop"`), a schedule's parameters beside its kind, a
/// label column as written, and the model's layers by position (see [`diff_model`]).
fn as_written(spec: &Value) -> Value {
    let mut spec = spec.clone();
    let Some(map) = spec.as_object_mut() else {
        return spec;
    };
    if let Some(mut stage) = map.remove("stage") {
        let kind = stage.as_object_mut().and_then(|s| s.remove("kind"));
        let name = kind
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or("stage")
            .to_string();
        // Left out of the key at their defaults (so that older keys stay valid).
        if let (Some(s), "train") = (stage.as_object_mut(), name.as_str()) {
            s.entry("strict").or_insert(json!(true));
            s.entry("freeze").or_insert(json!([]));
        }
        map.insert(name, stage);
    }
    if let Some(acc) = map.get_mut("accelerator").and_then(Value::as_object_mut) {
        if let Some(Value::Object(distributed)) = acc.remove("distributed") {
            for (k, v) in distributed {
                let (key, value) = match (k.as_str(), v) {
                    ("drop_remainder", Value::Bool(drop)) => {
                        ("shard-remainder", json!(if drop { "drop" } else { "pad" }))
                    }
                    ("bucketed", Value::Bool(b)) => {
                        ("sampler", json!(if b { "bucketed" } else { "distributed" }))
                    }
                    ("timeout_seconds", v) => ("timeout", v),
                    (k, v) => (k, v),
                };
                acc.insert(key.replace('_', "-"), value);
            }
        }
        // Left out of the key when off (so that older keys stay valid): off when absent.
        acc.entry("sync-batch-norm").or_insert(json!(false));
    }
    if let Some(schedule) = map.get_mut("schedule").and_then(Value::as_object_mut) {
        if let Some(Value::Object(kind)) = schedule.remove("kind") {
            for (k, v) in kind {
                schedule.insert(k, v);
            }
        }
    }
    if let Some(data) = map.get_mut("data").and_then(Value::as_object_mut) {
        // `skip_rows` is written `skip-rows`.
        *data = std::mem::take(data)
            .into_iter()
            .map(|(k, v)| (k.replace('_', "-"), v))
            .collect();
    }
    spec
}

/// Every node of a serialised model with its position (1-based, through the
/// structures: `3.2` is the second node of the third one's body, `4.branch 1.2` the
/// second of a parallel block's first branch), and its own settings (without bodies).
fn flatten_model(nodes: &Value, prefix: &str, out: &mut Vec<(String, Value)>) {
    for (i, node) in nodes.as_array().into_iter().flatten().enumerate() {
        let path = match prefix {
            "" => (i + 1).to_string(),
            p => format!("{p}.{}", i + 1),
        };
        // Keys from before layers were types held `{"layer": {…}}`.
        let node = node.get("layer").unwrap_or(node);
        let mut own = node.clone();
        if let Some(map) = own.as_object_mut() {
            map.remove("body");
            map.remove("branches");
        }
        out.push((path.clone(), own));
        if let Some(body) = node.get("body") {
            flatten_model(body, &path, out);
        }
        for (j, branch) in node["branches"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            flatten_model(branch, &format!("{path}.branch {}", j + 1), out);
        }
    }
}

/// The differences between two models, node by node: `model layer 3 (linear): out
/// changed 8 → 16`, `model layer 2 changed relu → gelu`, `model layer 4.1 (conv2d):
/// kernel changed 3 → 5`, `model changed 5 layers → 6 layers`.
fn diff_model(old: &Value, new: &Value, out: &mut Vec<Reason>) {
    let nodes = |v: &Value| {
        let mut all = Vec::new();
        flatten_model(v.get("nodes").unwrap_or(&v["layers"]), "", &mut all);
        all
    };
    let (a, b) = (nodes(old), nodes(new));
    let same_places = a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.0 == y.0);
    if !same_places {
        out.push(Reason::ModelSize {
            from: a.len(),
            to: b.len(),
        });
        return;
    }
    for ((path, x), (_, y)) in a.iter().zip(&b) {
        let (kx, ky) = (
            x["kind"].as_str().unwrap_or("?"),
            y["kind"].as_str().unwrap_or("?"),
        );
        if kx != ky {
            out.push(Reason::LayerKind {
                at: path.clone(),
                from: kx.into(),
                to: ky.into(),
            });
            continue;
        }
        let mut changes = Vec::new();
        diff_values("", x, y, &mut changes);
        for change in changes {
            out.push(match change {
                Reason::Setting { key, from, to } => Reason::LayerSetting {
                    at: path.clone(),
                    kind: kx.into(),
                    key,
                    from,
                    to,
                },
                other => other,
            });
        }
    }
}

/// A value as a difference shows it: JSON, with `unset` for an absent one.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "unset".into(),
        v => v.to_string(),
    }
}

fn diff_values(path: &str, old: &Value, new: &Value, out: &mut Vec<Reason>) {
    match (old, new) {
        _ if path == "model" => diff_model(old, new, out),
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
        (a, b) => out.push(Reason::Setting {
            key: path.replace('_', "-"),
            from: shown(a),
            to: shown(b),
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The reasons in words.
    fn explain(old: &StageKey, new: &StageKey, files: &BTreeMap<String, PathBuf>) -> Vec<String> {
        explain_change(old, new, files)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

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

    /// The keys of `text`'s stages, on one process of a machine of 4 cores.
    pub(crate) fn keys(text: &str) -> Vec<Fingerprint> {
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
            // The count of a machine of 4 cores (the tests' keys do not depend on this one).
            threads: Some(m.accelerator.threads.unwrap_or(4)),
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

    /// A field left out of the key by its serialised name must be there to leave out: a
    /// renamed Rust field would otherwise slip into every key unnoticed.
    #[test]
    fn every_field_left_out_of_the_key_is_a_field_the_specs_have() {
        let lowered = manifests::lower(BASE, "m", Path::new(""), &[]);
        let m = lowered.manifest.unwrap();
        let manifests::StageConfig::Train(train) = &m.stages[0].config else {
            panic!("the first stage trains")
        };
        let accelerator = to_value(&m.accelerator);
        for (fields, value) in [
            (&UNKEYED_STAGE, to_value(train)),
            (&UNKEYED_ACCELERATOR, accelerator.clone()),
            (&UNKEYED_DISTRIBUTED, accelerator["distributed"].clone()),
        ] {
            for field in fields {
                assert!(value.get(field).is_some(), "`{field}` is not in {value}");
            }
        }
        assert!(to_value(&m.data).get("source").is_some());
    }

    /// The keys of every stage of every example, pinned byte for byte
    /// (`tests/fixtures/stage-keys/`, with the example's own hash): a change in what a
    /// key holds, or in how a spec serialises (a renamed field, a new one), changes these.
    /// When that is meant, bump [`KEY_VERSION`] so that no entry is served under a new
    /// meaning, and rewrite them with `PIPELINE_BLESS=1` (which refuses keys that changed
    /// while neither their example nor the version did); review the diff.
    #[test]
    fn the_keys_of_the_examples_are_pinned() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut examples: Vec<PathBuf> = std::fs::read_dir(root.join("examples"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "kdl"))
            .collect();
        examples.sort();
        assert!(examples.len() >= 10, "{examples:?}");
        let env = |m: &Manifest| Environment {
            tool: "pinned".into(),
            libtorch: "2.13.0".into(),
            device: "cpu".into(),
            processes: 1,
            threads: Some(m.accelerator.threads.unwrap_or(2)),
        };
        for example in examples {
            let name = example.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&example).unwrap();
            // Lowered without `check`, which would read the data files.
            let lowered = manifests::lower(&text, &name, Path::new("examples"), &[]);
            let m = lowered
                .manifest
                .unwrap_or_else(|| panic!("{name}: {:#?}", lowered.diagnostics));
            let plan = crate::Plan::new(&m);
            let all = fingerprints(&m, &plan.order, &env(&m), |p| {
                Ok::<_, ()>(cache::hash_bytes(p.to_string_lossy().as_bytes()))
            })
            .unwrap();
            let stages: serde_json::Map<String, Value> = all
                .iter()
                .map(|(&i, f)| {
                    let key: Value = serde_json::from_str(&f.key.canonical()).unwrap();
                    (
                        m.stages[i].name().to_string(),
                        json!({"fingerprint": f.hash, "key": key}),
                    )
                })
                .collect();
            let pinned = json!({"example": cache::hash_bytes(text.as_bytes()), "stages": stages});
            let text = serde_json::to_string_pretty(&pinned).unwrap() + "\n";
            let path = root
                .join("tests/fixtures/stage-keys")
                .join(format!("{name}.json"));
            if std::env::var_os("PIPELINE_BLESS").is_some() {
                let old: Option<Value> = std::fs::read(&path)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok());
                if let Some(old) = old.filter(|o| o["example"] == pinned["example"]) {
                    let version = |v: &Value| {
                        v["stages"]
                            .as_object()
                            .and_then(|s| s.values().next())
                            .map(|s| s["key"]["version"].clone())
                    };
                    assert!(
                        old["stages"] == pinned["stages"] || version(&old) != version(&pinned),
                        "the keys of examples/{name}.kdl changed while it did not: bump KEY_VERSION first"
                    );
                }
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &text).unwrap();
                continue;
            }
            let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
                panic!("{} is missing; run with PIPELINE_BLESS=1", path.display())
            });
            assert!(
                text == expected,
                "the stage keys of examples/{name}.kdl changed (see this test's doc):\n{text}"
            );
        }
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
    fn a_torchscript_models_content_is_in_the_key_and_its_path_is_not() {
        // Lowered without `check`, which would look for the files.
        let keys = |text: &str, hash: &str| {
            let lowered = manifests::lower(text, "m", Path::new("proj"), &[]);
            let m = lowered.manifest.unwrap();
            let plan = crate::Plan::new(&m);
            let env = Environment {
                tool: "t".into(),
                libtorch: "2.13.0".into(),
                device: "cpu".into(),
                processes: 1,
                threads: Some(2),
            };
            fingerprints(&m, &plan.order, &env, |p| {
                Ok::<_, ()>(match p.extension().and_then(|e| e.to_str()) {
                    Some("pt") => hash.to_string(),
                    _ => "data".to_string(),
                })
            })
            .unwrap()
            .into_values()
            .collect::<Vec<_>>()
        };
        let script = |path: &str| {
            BASE.replace(
                "model { linear 8; relu; linear 3; }",
                &format!("model {{ torchscript \"{path}\"; }}"),
            )
        };
        let a = keys(&script("net.pt"), "one");
        assert_eq!(a[0].key.inputs["model"], "one");
        let moved = keys(&script("models/copy.pt"), "one");
        assert_eq!(changed(&a, &moved), [false, false, false]);
        let other = keys(&script("net.pt"), "two");
        assert_eq!(changed(&a, &other), [true, true, true]);
        let native = keys(BASE, "one");
        assert_eq!(changed(&a, &native), [true, true, true]);
        let files = BTreeMap::from([("model".to_string(), PathBuf::from("proj/net.pt"))]);
        assert_eq!(
            explain(&a[0].key, &other[0].key, &files),
            ["model file net.pt changed"]
        );
    }

    #[test]
    fn strict_and_freeze_are_in_the_key_and_their_defaults_are_not() {
        // The train stage with `body` in its block.
        let train = |body: &str| {
            keys(&BASE.replace(
                "train\n",
                &format!("train {{ init \"w.safetensors\"; {body} }}\n"),
            ))
        };
        let a = train("");
        assert_eq!(changed(&a, &train("strict #true;")), [false, false, false]);
        let spec = a[0].key.canonical();
        assert!(
            !spec.contains("strict") && !spec.contains("freeze"),
            "left out at their defaults, as in keys from before them: {spec}"
        );
        let loose = train("strict #false;");
        assert_eq!(changed(&a, &loose), [true, true, true]);
        let frozen = train("freeze \"0.*\";");
        assert_eq!(changed(&a, &frozen), [true, true, true]);
        let ab = train("freeze \"0.*\" \"2.*\";");
        let ba = train("freeze \"2.*\" \"0.*\" \"0.*\";");
        assert_eq!(
            changed(&ab, &ba),
            [false, false, false],
            "a set of patterns"
        );
        assert_eq!(changed(&ab, &frozen), [true, true, true]);

        let files = BTreeMap::from([("init".to_string(), PathBuf::from("w.safetensors"))]);
        assert_eq!(
            explain(&a[0].key, &loose[0].key, &files),
            ["train.strict changed true → false"]
        );
        assert_eq!(
            explain(&a[0].key, &frozen[0].key, &files),
            ["train.freeze changed [] → [\"0.*\"]"]
        );
        assert_eq!(
            explain(&frozen[0].key, &ab[0].key, &files),
            ["train.freeze changed [\"0.*\"] → [\"0.*\",\"2.*\"]"]
        );
        for reason in ["train.strict changed", "train.freeze changed"] {
            assert!(names_a_manifest_key(reason), "{reason}");
        }
    }

    #[test]
    fn the_thread_count_is_the_manifests_then_omp_num_threads_then_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        assert_eq!(threads_from(Some(3), Some("5")), 3);
        assert_eq!(threads_from(None, Some("5")), 5);
        assert_eq!(threads_from(None, Some(" 1 ")), 1);
        for ignored in ["0", "-2", "four", ""] {
            assert_eq!(threads_from(None, Some(ignored)), cores, "{ignored}");
        }
        assert_eq!(threads_from(None, None), cores);
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
        // The thread count changes the bits on the CPU (issue 32): every stage reruns.
        let threads = keys(&format!("{BASE}accelerator {{ threads 1; }}\n"));
        assert_eq!(changed(&a, &threads), [true, true, true]);
        assert_eq!(
            explain(&a[0].key, &threads[0].key, &BTreeMap::new()),
            ["accelerator.threads changed 4 → 1"]
        );
        let written = keys(&format!("{BASE}accelerator {{ threads 4; }}\n"));
        assert_eq!(
            changed(&a, &written),
            [false, false, false],
            "the count it had"
        );
        let snapshots = keys(&BASE.replace("train\n", "train snapshot-every-steps=5\n"));
        assert_eq!(changed(&a, &snapshots), [false, false, false]);
        let logging = keys(&format!("{BASE}logging {{ tensorboard #false; }}\n"));
        assert_eq!(changed(&a, &logging), [false, false, false]);
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
            explain(&a[0].key, &b[0].key, &files),
            ["optimizer.lr changed 0.001 → 0.0003"]
        );
        assert_eq!(
            explain(&a[1].key, &b[1].key, &files),
            Vec::<String>::new(),
            "upstream changes are the caller's to name"
        );
        let c = keys(&BASE.replace("train\n", "train epochs=3\n"));
        assert_eq!(
            explain(&a[0].key, &c[0].key, &files),
            ["train.epochs changed 10 → 3"]
        );
        let mut d = c[0].key.clone();
        d.inputs.insert("data".into(), "another hash".into());
        d.environment.device = "cuda".into();
        d.environment.processes = 2;
        assert_eq!(
            explain(&c[0].key, &d, &files),
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
    /// Whether a reason's key (`accelerator.strategy` in `accelerator.strategy changed …`)
    /// is a key of the manifest's schema, or names a model layer.
    fn names_a_manifest_key(reason: &str) -> bool {
        use manifests::schema::{sections, Ty, STAGES};
        if reason.starts_with("model layer ") || reason.starts_with("model changed ") {
            return true;
        }
        let path = reason.split(' ').next().unwrap();
        let mut parts = path.split('.');
        let first = parts.next().unwrap();
        let Some(mut section) = sections()
            .into_iter()
            .chain(STAGES.iter().copied())
            .find(|s| s.name == first)
        else {
            return false;
        };
        let mut rest: Vec<&str> = parts.collect();
        while let Some(name) = (!rest.is_empty()).then(|| rest.remove(0)) {
            let Some(key) = section.keys.iter().find(|k| k.name == name) else {
                return false;
            };
            match (&key.ty, rest.is_empty()) {
                (_, true) => return true,
                (Ty::Section(inner), false) => section = inner,
                _ => return false,
            }
        }
        false
    }

    #[test]
    fn every_reason_names_a_key_as_the_manifest_writes_it() {
        let files = BTreeMap::from([("data".to_string(), PathBuf::from("d.csv"))]);
        let why = |a: &str, b: &str| -> Vec<String> {
            let (a, b) = (keys(a), keys(b));
            explain(&a[0].key, &b[0].key, &files)
        };
        let acc = |body: &str| match body.contains("strategy") {
            true => format!("{BASE}accelerator {{ {body} }}\n"),
            false => format!("{BASE}accelerator {{ strategy \"ddp\"; {body} }}\n"),
        };
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "",
                "strategy \"zero1\"",
                &["accelerator.strategy changed \"ddp\" → \"zero1\""],
            ),
            (
                "",
                "sync-batch-norm #true",
                &["accelerator.sync-batch-norm changed false → true"],
            ),
            (
                "",
                "shard-remainder \"drop\"",
                &["accelerator.shard-remainder changed \"pad\" → \"drop\""],
            ),
            (
                "",
                "sampler \"bucketed\"; bucket-by 0",
                &[
                    "accelerator.bucket-by changed unset → 0",
                    "accelerator.sampler changed \"distributed\" → \"bucketed\"",
                ],
            ),
            (
                "sampler \"bucketed\"; bucket-by 0",
                "sampler \"bucketed\"; bucket-by 1; buckets 8",
                &[
                    "accelerator.bucket-by changed 0 → 1",
                    "accelerator.buckets changed 4 → 8",
                ],
            ),
            (
                "",
                "max-norm 1.0",
                &["accelerator.max-norm changed unset → 1.0"],
            ),
            (
                "max-norm 1.0",
                "max-norm 1.0; norm-type 1.0",
                &["accelerator.norm-type changed 2.0 → 1.0"],
            ),
            (
                "",
                "clip-value 0.5",
                &["accelerator.clip-value changed unset → 0.5"],
            ),
            (
                "",
                "accumulate 2",
                &["accelerator.accumulate changed 1 → 2"],
            ),
            (
                "",
                "deterministic #true",
                &["accelerator.deterministic changed false → true"],
            ),
        ];
        for (a, b, expected) in cases {
            assert_eq!(why(&acc(a), &acc(b)), *expected, "{a} → {b}");
        }
        // Speed-only keys are not in the key, so they never show.
        assert!(why(&acc(""), &acc("bucket-mb 50; timeout 60; backend \"gloo\"")).is_empty());
        assert_eq!(
            why(
                BASE,
                &BASE.replace("optimizer", "accelerator { strategy \"ddp\"; }\noptimizer")
            ),
            ["accelerator.strategy changed \"none\" → \"ddp\""]
        );

        let other: &[(&str, &str, &[&str])] = &[
            (
                "train\n",
                "train batch-size=64 drop-last=#true\n",
                &[
                    "train.batch-size changed 32 → 64",
                    "train.drop-last changed false → true",
                ],
            ),
            (
                "loss \"cross-entropy\"",
                "loss \"cross-entropy\" label-smoothing=0.1",
                &["loss.label-smoothing changed 0.0 → 0.1"],
            ),
            (
                "lr=0.001",
                "lr=0.001 weight-decay=0.01",
                &["optimizer.weight-decay changed 0.0 → 0.01"],
            ),
            (
                "data { source \"d.csv\"; }",
                "data { source \"d.csv\"; label 0; split train=0.5 test=0.5; }",
                &[
                    "data.label changed \"last\" → 0",
                    "data.split.test changed 0.2 → 0.5",
                    "data.split.train changed 0.8 → 0.5",
                ],
            ),
            (
                "data { source \"d.csv\"; }",
                "data { source \"d.csv\"; label \"y\"; }",
                &["data.label changed \"last\" → \"y\""],
            ),
            (
                "train\n",
                "train\nschedule \"cosine\" min-lr=0.0001 warmup-epochs=2\n",
                &[
                    "schedule.kind changed \"constant\" → \"cosine\"",
                    "schedule.min-lr changed unset → 0.0001",
                    "schedule.warmup-epochs changed 0 → 2",
                ],
            ),
            (
                "train\n",
                "train\nschedule \"step\" step-size=5 gamma=0.5\n",
                &[
                    "schedule.gamma changed unset → 0.5",
                    "schedule.kind changed \"constant\" → \"step\"",
                    "schedule.step-size changed unset → 5",
                ],
            ),
            (
                "linear 8; relu;",
                "linear 16; gelu;",
                &[
                    "model layer 1 (linear): out changed 8 → 16",
                    "model layer 2 changed relu → gelu",
                ],
            ),
            (
                "relu;",
                "relu; dropout 0.1;",
                &["model changed 3 layers → 4 layers"],
            ),
            (
                "linear 8; relu;",
                "residual { linear 8; relu; };",
                &["model changed 3 layers → 4 layers"],
            ),
            (
                "model { linear 8; relu; linear 3; }",
                "model { repeat 2 { residual { linear 8; relu; }; }; parallel { branch { linear 2; }; branch { linear 3; }; }; }",
                &["model changed 3 layers → 7 layers"],
            ),
        ];
        for (from, to, expected) in other {
            let changed = BASE.replace(from, to);
            assert_ne!(changed, BASE, "{from} is in BASE");
            let reasons = why(BASE, &changed);
            assert_eq!(reasons, *expected, "{from} → {to}");
        }
        // Inside structures, a change is named by its place: `2.1.1` is the first node
        // of the first node of the second's body.
        let nested = "model { linear 8; repeat 2 { residual { linear 8; relu; }; }; parallel { branch { linear 2; }; branch { linear 3; }; }; }";
        let base = BASE.replace("model { linear 8; relu; linear 3; }", nested);
        let inside: &[(&str, &str, &[&str])] = &[
            (
                "residual { linear 8; relu; }",
                "residual { linear 16; relu; }",
                &["model layer 2.1.1 (linear): out changed 8 → 16"],
            ),
            (
                "repeat 2",
                "repeat 3",
                &["model layer 2 (repeat): times changed 2 → 3"],
            ),
            (
                "branch { linear 3; }",
                "branch { gelu; }",
                &["model layer 3.branch 2.1 changed linear → gelu"],
            ),
            (
                "parallel {",
                "parallel \"add\" {",
                &["model layer 3 (parallel): join changed \"concat\" → \"add\""],
            ),
        ];
        for (from, to, expected) in inside {
            let changed = base.replace(from, to);
            assert_ne!(changed, base, "{from} is in the nested model");
            assert_eq!(why(&base, &changed), *expected, "{from} → {to}");
        }
        let other: &[(&str, &str, &[&str])] = &[];
        for (from, to, expected) in other {
            let changed = BASE.replace(from, to);
            assert_ne!(changed, BASE, "{from} is in BASE");
            let reasons = why(BASE, &changed);
            assert_eq!(reasons, *expected, "{from} → {to}");
            for r in &reasons {
                assert!(names_a_manifest_key(r), "{r}");
            }
        }
        for (a, b, _) in cases {
            for r in why(&acc(a), &acc(b)) {
                assert!(names_a_manifest_key(&r), "{r}");
            }
        }
    }
}
