//! The history of runs: every run that ran a stage leaves `run.json` in its run directory
//! (`.pipeline/runs/ID/`, beside `metrics.jsonl` and `split.json`): when, which manifest,
//! on what, and each stage's status, time, metrics, fingerprint and cache key. `pipeline
//! runs` lists them, shows one, and says what changed between two, in the words `pipeline
//! status` uses (the keys' differences) with the metrics' deltas.

use crate::fingerprint::{explain_change, stage_inputs, StageKey};
use crate::freshness::StageState;
use crate::report::RunReport;
use crate::stale::Reason;
use manifests::Manifest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file a run directory keeps its record in.
pub const RECORD: &str = "run.json";

/// One run, as `run.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub pipeline: String,
    /// The manifest, as the command line named it.
    pub manifest: PathBuf,
    /// When the run ended, in seconds since the Unix epoch.
    pub finished: u64,
    pub device: String,
    pub ok: bool,
    pub stages: Vec<StageRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub name: String,
    pub kind: String,
    /// `ran`, `cached`, `failed` or `skipped`.
    pub status: String,
    pub seconds: f64,
    pub metrics: BTreeMap<String, f64>,
    pub fingerprint: String,
    pub key: StageKey,
    /// The input files its key hashes, by role (`data`, `source`, …), so that a change
    /// of one is said by its name. (Absent from records before it.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, PathBuf>,
}

impl RunRecord {
    /// The record of a finished run of `manifest` (written at `path`): `states` are the
    /// stages as planned (in the report's order).
    pub fn of(
        report: &RunReport,
        states: &[StageState],
        manifest: &Manifest,
        path: &Path,
    ) -> RunRecord {
        let finished = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        RunRecord {
            pipeline: report.pipeline.clone(),
            manifest: path.to_path_buf(),
            finished,
            device: report.device.clone(),
            ok: report.ok(),
            stages: report
                .stages
                .iter()
                .zip(states)
                .map(|(s, state)| StageRecord {
                    name: s.name.clone(),
                    kind: s.kind.as_str().to_string(),
                    status: s.status.as_str().to_string(),
                    seconds: s.seconds,
                    metrics: s.metrics.clone(),
                    fingerprint: state.fingerprint.hash.clone(),
                    key: state.fingerprint.key.clone(),
                    files: stage_inputs(manifest, state.index),
                })
                .collect(),
        }
    }

    /// Writes `run.json` into `run_dir` (whole or not at all).
    pub fn write(&self, run_dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        cache::write_atomic(&run_dir.join(RECORD), text.as_bytes())
    }
}

/// Where the runs of the manifests of `base_dir` are.
pub fn runs_dir(base_dir: &Path) -> PathBuf {
    base_dir.join(".pipeline").join("runs")
}

/// The record of the run in `run_dir`, if it has a readable one (a killed run has none).
pub fn read(run_dir: &Path) -> Option<RunRecord> {
    let text = std::fs::read_to_string(run_dir.join(RECORD)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Every recorded run of `manifest` (by file name) under `base_dir`, oldest first (by the
/// start its id names, then its end); run directories without a readable record are left
/// out.
pub fn list(base_dir: &Path, manifest: &Path) -> Vec<(String, RunRecord)> {
    let Ok(entries) = std::fs::read_dir(runs_dir(base_dir)) else {
        return Vec::new();
    };
    let mut runs: Vec<(String, RunRecord)> = entries
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_string_lossy().into_owned();
            Some((id, read(&e.path())?))
        })
        .filter(|(_, r)| r.manifest.file_name() == manifest.file_name())
        .collect();
    // Ids start with the second the run started; within a second, the end decides.
    let started = |id: &str| id.get(..15).unwrap_or(id).to_string();
    runs.sort_by_key(|(id, r)| (started(id), r.finished, id.clone()));
    runs
}

/// The run `id` names among `runs`: its id, a unique prefix of one, or `last` (the newest)
/// and `last~N` (N before it).
pub fn find<'a>(
    runs: &'a [(String, RunRecord)],
    id: &str,
) -> Result<&'a (String, RunRecord), String> {
    if let Some(back) = id.strip_prefix("last") {
        let back: usize = match back.strip_prefix('~') {
            Some(n) => n
                .parse()
                .map_err(|_| format!("`{id}`: write `last` or `last~N`"))?,
            None if back.is_empty() => 0,
            None => return Err(format!("`{id}`: write `last` or `last~N`")),
        };
        return back
            .checked_add(1)
            .and_then(|back| runs.len().checked_sub(back))
            .map(|i| &runs[i])
            .ok_or_else(|| format!("there are {} recorded runs: `{id}` is not one", runs.len()));
    }
    let matching: Vec<_> = runs.iter().filter(|(r, _)| r.starts_with(id)).collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("no recorded run is `{id}`")),
        many => Err(format!(
            "`{id}` names {} runs: {}",
            many.len(),
            many.iter()
                .map(|(r, _)| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// What changed from run `a` to run `b`, stage by stage (matched by name): the settings
/// and inputs that differ, in words, and each metric's change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageDiff {
    pub name: String,
    /// `changed`, `same`, `added` (only in `b`) or `removed` (only in `a`).
    pub change: String,
    pub reasons: Vec<Reason>,
    /// Metric name → (in `a`, in `b`): present in both and different, or in one only.
    pub metrics: BTreeMap<String, (Option<f64>, Option<f64>)>,
}

pub fn diff(a: &RunRecord, b: &RunRecord) -> Vec<StageDiff> {
    let mut out = Vec::new();
    for sb in &b.stages {
        let Some(sa) = a.stages.iter().find(|s| s.name == sb.name) else {
            out.push(StageDiff {
                name: sb.name.clone(),
                change: "added".into(),
                reasons: Vec::new(),
                metrics: sb
                    .metrics
                    .iter()
                    .map(|(k, v)| (k.clone(), (None, Some(*v))))
                    .collect(),
            });
            continue;
        };
        let mut reasons = explain_change(&sa.key, &sb.key, &sb.files);
        if reasons.is_empty() && sa.key.upstream != sb.key.upstream {
            reasons.push(Reason::SomeUpstreamChanged);
        }
        let names: std::collections::BTreeSet<&String> =
            sa.metrics.keys().chain(sb.metrics.keys()).collect();
        let metrics = names
            .into_iter()
            .map(|k| {
                (
                    k.clone(),
                    (sa.metrics.get(k).copied(), sb.metrics.get(k).copied()),
                )
            })
            .filter(|(_, (x, y))| x != y)
            .collect();
        out.push(StageDiff {
            name: sb.name.clone(),
            change: match (reasons.is_empty(), sa.fingerprint == sb.fingerprint) {
                (true, true) => "same",
                _ => "changed",
            }
            .into(),
            reasons,
            metrics,
        });
    }
    for sa in a
        .stages
        .iter()
        .filter(|s| !b.stages.iter().any(|t| t.name == s.name))
    {
        out.push(StageDiff {
            name: sa.name.clone(),
            change: "removed".into(),
            reasons: Vec::new(),
            metrics: sa
                .metrics
                .iter()
                .map(|(k, v)| (k.clone(), (Some(*v), None)))
                .collect(),
        });
    }
    out
}
