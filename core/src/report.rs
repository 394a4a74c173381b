//! What a run reports: each stage's status, time, metrics and outputs. Stages taken from
//! the cache get their result here, without libtorch, so a fully cached run never needs
//! to load it.

use cache::Entry;
use manifests::{Diagnostic, Manifest, StageKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    Ran,
    /// Its outputs came from the cache.
    Cached,
    Failed,
    /// Not run because a stage it needs failed.
    Skipped,
}

impl StageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Ran => "ran",
            StageStatus::Cached => "cached",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
        }
    }

    pub fn succeeded(self) -> bool {
        matches!(self, StageStatus::Ran | StageStatus::Cached)
    }
}

#[derive(Debug, Clone)]
pub struct StageResult {
    pub name: String,
    pub kind: StageKind,
    pub status: StageStatus,
    pub seconds: f64,
    pub metrics: BTreeMap<String, f64>,
    pub outputs: Vec<PathBuf>,
    pub error: Option<Diagnostic>,
    /// A `train` stage that ran from `init` weights: what it loaded from the file.
    pub init: Option<crate::finetune::InitMatch>,
    /// A `train` stage that ran and stopped before its last epoch (early stopping): after
    /// which epoch, and why. (Its metrics say `stopped_epoch`, cached or not.)
    pub stopped: Option<(u64, String)>,
    /// A `train` stage that ran from a saved state rather than from its first epoch (a
    /// snapshot of a killed run, or the final state of a shorter training it extends):
    /// the epoch it started at.
    pub resumed_at: Option<u64>,
    /// A `train` stage's `keep-best` weights, the best first (cached or not).
    pub best: Vec<KeptWeights>,
    /// An `eval` stage of k-fold cross-validation: each metric's standard deviation over
    /// the folds (as numpy's `std`), `metrics` holding their mean. In the cache entry's
    /// metrics under [`STD`].
    pub metrics_std: BTreeMap<String, f64>,
}

/// Where a cache entry's metrics hold the standard deviations over the folds.
pub const STD: &str = "std";

/// Weights a `train` stage's `keep-best` kept: the `rank`-th best by `monitor`, measured
/// at `epoch` and `step`, stored at `path`. In the cache entry's metrics under `best`
/// (without the path: the entry's output [`best_output`] is the file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptWeights {
    pub rank: usize,
    pub epoch: u64,
    pub step: u64,
    pub monitor: String,
    pub score: f64,
    #[serde(skip_deserializing)]
    pub path: PathBuf,
}

impl KeptWeights {
    /// What a stage using these weights reports of them (a checkpoint's metadata): where
    /// they were measured, and their score by the monitor's name in the records.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        BTreeMap::from([
            ("epochs".to_string(), self.epoch as f64),
            ("steps".to_string(), self.step as f64),
            (
                manifests::Monitor::parse(&self.monitor).record_key(),
                self.score,
            ),
        ])
    }
}

/// The name of the `rank`-th best weights among a `train` stage's outputs in the cache.
pub fn best_output(rank: usize) -> String {
    format!("best-{rank}.safetensors")
}

impl StageResult {
    /// A result with nothing in it yet (status `skipped`).
    pub fn new(manifest: &Manifest, index: usize) -> StageResult {
        let stage = &manifest.stages[index];
        StageResult {
            name: stage.name().to_string(),
            kind: stage.kind(),
            status: StageStatus::Skipped,
            seconds: 0.0,
            metrics: BTreeMap::new(),
            outputs: Vec::new(),
            error: None,
            init: None,
            stopped: None,
            resumed_at: None,
            best: Vec::new(),
            metrics_std: BTreeMap::new(),
        }
    }
}

#[derive(Debug)]
pub struct RunReport {
    pub pipeline: String,
    /// Where this run wrote its metrics; `None` when every stage came from the cache.
    pub run_dir: Option<PathBuf>,
    pub device: String,
    pub stages: Vec<StageResult>,
}

impl RunReport {
    pub fn ok(&self) -> bool {
        self.stages.iter().all(|s| s.status.succeeded())
    }
}

/// The metrics stored in a cache entry.
pub fn stored_metrics(entry: &Entry) -> BTreeMap<String, f64> {
    entry
        .metrics
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
        .collect()
}

/// The result of stage `index` taken from its cache entry. A checkpoint with a declared
/// `path`, or predictions with a declared `output`, are copied there when the file is
/// missing or differs ([`crate::outputs::place`]); otherwise its outputs are the files in
/// the cache.
pub fn cached_result(
    manifest: &Manifest,
    index: usize,
    entry: &Entry,
) -> Result<StageResult, Diagnostic> {
    let mut result = StageResult::new(manifest, index);
    result.status = StageStatus::Cached;
    result.metrics = stored_metrics(entry);
    if let Some(std) = entry.metrics.get(STD).and_then(|v| v.as_object()) {
        result.metrics_std = std
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect();
    }
    if let Some(best) = entry.metrics.get("best") {
        let best: Vec<KeptWeights> = serde_json::from_value(best.clone())
            .map_err(|e| incomplete(entry, &format!("a `best` list that does not read ({e})")))?;
        for mut k in best {
            k.path = entry
                .output(&best_output(k.rank))
                .ok_or_else(|| incomplete(entry, &format!("no {}", best_output(k.rank))))?
                .to_path_buf();
            result.best.push(k);
        }
    }
    result.outputs = crate::outputs::place(
        manifest,
        index,
        &|name| {
            entry
                .output(name)
                .map(Path::to_path_buf)
                .ok_or_else(|| incomplete(entry, &format!("no {name}")))
        },
        None,
        &entry.fingerprint,
    )?;
    Ok(result)
}

/// A cache entry that lacks what it must hold.
fn incomplete(entry: &Entry, what: &str) -> Diagnostic {
    Diagnostic::error(
        "pipeline::cache::entry_incomplete",
        format!("the cache entry {} has {what}", entry.fingerprint),
    )
    .help("run with `--force` to rebuild it")
}
