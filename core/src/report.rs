//! What a run reports: each stage's status, time, metrics and outputs. Stages taken from
//! the cache get their result here, without libtorch, so a fully cached run never needs
//! to load it.

use crate::freshness::{predictions_output, CHECKPOINT_METADATA, CHECKPOINT_OUTPUT};
use cache::Entry;
use manifests::{Diagnostic, Manifest, StageConfig, StageKind};
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
}

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
/// missing or differs; otherwise its outputs are the files in the cache.
pub fn cached_result(
    manifest: &Manifest,
    index: usize,
    entry: &Entry,
) -> Result<StageResult, Diagnostic> {
    let mut result = StageResult::new(manifest, index);
    result.status = StageStatus::Cached;
    result.metrics = stored_metrics(entry);
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
    let stored = |name| {
        entry
            .output(name)
            .ok_or_else(|| incomplete(entry, &format!("no {name}")))
    };
    let predictions = match &manifest.stages[index].config {
        StageConfig::Predict(spec) => Some((&spec.output, spec.format)),
        StageConfig::Eval(spec) => spec.predictions.map(|f| (&spec.output, f)),
        _ => None,
    };
    if let Some((output, format)) = predictions {
        let predictions = stored(predictions_output(format))?;
        result.outputs = match output {
            Some(path) => {
                let path = manifest.resolve(&path.value);
                if !same_content(predictions, &path) {
                    crate::outputs::may_replace(manifest, index, &path)?;
                    restore(predictions, &path)?;
                    crate::outputs::record_written(manifest, &path)?;
                }
                vec![path]
            }
            None => vec![predictions.to_path_buf()],
        };
    }
    if let StageConfig::Checkpoint(spec) = &manifest.stages[index].config {
        let (weights, metadata) = (stored(CHECKPOINT_OUTPUT)?, stored(CHECKPOINT_METADATA)?);
        result.outputs = match &spec.path {
            Some(url) if crate::outputs::is_url(&url.value) => crate::outputs::send_checkpoint(
                manifest,
                index,
                &url.value.to_string_lossy(),
                (weights, metadata),
                &entry.fingerprint,
            )?,
            Some(path) => {
                let path = manifest.resolve(&path.value);
                let meta_path = crate::outputs::metadata_path(&path);
                if !same_content(weights, &path) || !same_content(metadata, &meta_path) {
                    crate::outputs::may_replace(manifest, index, &path)?;
                    restore(weights, &path)?;
                    restore(metadata, &meta_path)?;
                }
                vec![path, meta_path]
            }
            None => vec![weights.to_path_buf(), metadata.to_path_buf()],
        };
    }
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

/// Whether regular file `to` holds what `from` (in the cache) holds.
fn same_content(from: &Path, to: &Path) -> bool {
    std::fs::symlink_metadata(to).is_ok_and(|m| m.is_file())
        && std::fs::metadata(from).ok().map(|m| m.len())
            == std::fs::metadata(to).ok().map(|m| m.len())
        && cache::hash_file(from).ok() == cache::hash_file(to).ok()
}

/// Copies `from` (in the cache) to `to` unless `to` already has the same content.
fn restore(from: &Path, to: &Path) -> Result<(), Diagnostic> {
    if same_content(from, to) {
        return Ok(());
    }
    cache::write_atomic_with(to, |tmp| std::fs::copy(from, tmp).map(drop)).map_err(|e| {
        Diagnostic::error(
            "pipeline::run::write_failed",
            format!("cannot write {}: {e}", to.display()),
        )
        .help("check that the directory is writable and the disk is not full")
    })
}
