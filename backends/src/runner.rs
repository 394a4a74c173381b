//! Executing a plan: set up once (threads, device, data, a dry forward pass that checks
//! the model against the data), then run the stages in order.
//!
//! A stage that fails is reported with its error and its dependents are skipped; stages
//! that do not depend on it still run, and everything written before stays on disk.

use crate::checkpoint;
use crate::device;
use crate::error::torch_error;
use crate::evaluate::evaluate;
use crate::observer::{EpochRecord, Observer};
use crate::session::Session;
use crate::train::{train, Trained};
use cache::{MetricsLog, RunDir};
use manifests::{Diagnostic, Manifest, StageConfig, StageKind, StageSpec};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;
use tch::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    Ran,
    Failed,
    /// Not run because a stage it needs failed.
    Skipped,
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
}

#[derive(Debug)]
pub struct RunReport {
    pub pipeline: String,
    pub run_dir: PathBuf,
    pub device: String,
    pub stages: Vec<StageResult>,
}

impl RunReport {
    pub fn ok(&self) -> bool {
        self.stages.iter().all(|s| s.status == StageStatus::Ran)
    }
}

/// What the stages of one run share.
struct Context<'a> {
    session: Session<'a>,
    run_dir: &'a RunDir,
    manifest_hash: &'a str,
    log: MetricsLog,
    trained: HashMap<usize, Trained>,
}

fn write_failed(path: &std::path::Path, e: std::io::Error) -> Diagnostic {
    Diagnostic::error(
        "pipeline::run::write_failed",
        format!("cannot write {}: {e}", path.display()),
    )
    .help("check that the directory is writable and the disk is not full")
}

/// Appends one line to `metrics.jsonl`.
fn append(log: &mut MetricsLog, line: &serde_json::Value) -> Result<(), Diagnostic> {
    log.append(&line.to_string())
        .map_err(|e| write_failed(log.path(), e))
}

/// The `train` stage that `stage` takes its model from, if any.
fn model_source(manifest: &Manifest, stage: &StageSpec) -> Option<usize> {
    stage.needs.iter().find_map(|n| {
        manifest
            .stages
            .iter()
            .position(|s| s.name.value == n.value && s.kind() == StageKind::Train)
    })
}

impl Context<'_> {
    fn run_stage(
        &mut self,
        index: usize,
        obs: &mut dyn Observer,
    ) -> Result<(BTreeMap<String, f64>, Vec<PathBuf>), Diagnostic> {
        let manifest = self.session.manifest;
        let stage = &manifest.stages[index];
        let source = model_source(manifest, stage);
        let mut metrics = BTreeMap::new();
        match &stage.config {
            StageConfig::Train(spec) => {
                let start = source.and_then(|s| self.trained.get(&s)).map(|t| &t.model);
                let log = &mut self.log;
                let mut write = |r: &EpochRecord| append(log, &r.to_json());
                let trained = train(&self.session, stage, spec, start, &mut write, obs)?;
                let last = &trained.last_epoch;
                metrics.insert("loss".into(), last.loss);
                metrics.insert("epochs".into(), last.epoch as f64);
                metrics.insert("steps".into(), trained.steps as f64);
                for (k, v) in [
                    ("accuracy", last.accuracy),
                    ("val_loss", last.val_loss),
                    ("val_accuracy", last.val_accuracy),
                ] {
                    if let Some(v) = v {
                        metrics.insert(k.into(), v);
                    }
                }
                self.trained.insert(index, trained);
                Ok((metrics, Vec::new()))
            }
            StageConfig::Eval(spec) => {
                let trained = &self.trained
                    [&source.expect("check ensures an eval stage needs a train stage")];
                let data = &self.session.data;
                let indices = data.indices(spec.split.value);
                let scores = evaluate(
                    &trained.model,
                    &manifest.loss,
                    data,
                    &indices,
                    spec.batch_size as i64,
                )
                .map_err(|e| {
                    torch_error(
                        "pipeline::eval::failed",
                        &format!("stage `{}`", stage.name()),
                        &e,
                    )
                })?;
                if scores.samples > 0 && !scores.loss.is_finite() {
                    return Err(Diagnostic::error(
                        "pipeline::eval::not_finite",
                        format!("stage `{}`: the loss on the `{}` split is {}", stage.name(), spec.split.value.as_str(), scores.loss),
                    )
                    .label_opt(stage.name.span, "this evaluation")
                    .help("the trained weights are not finite: lower `optimizer.lr` or check the data"));
                }
                metrics.insert("loss".into(), scores.loss);
                metrics.insert("samples".into(), scores.samples as f64);
                if let Some(a) = scores.accuracy {
                    metrics.insert("accuracy".into(), a);
                }
                let mut line = json!({"stage": stage.name(), "split": spec.split.value.as_str(), "loss": scores.loss, "samples": scores.samples});
                if let Some(a) = scores.accuracy {
                    line["accuracy"] = json!(a);
                }
                append(&mut self.log, &line)?;
                Ok((metrics, Vec::new()))
            }
            StageConfig::Checkpoint(spec) => {
                let source = source.expect("check ensures a checkpoint stage needs a train stage");
                let trained = &self.trained[&source];
                let path = match &spec.path {
                    Some(p) => manifest.resolve(p),
                    None => self
                        .run_dir
                        .path
                        .join(format!("{}.safetensors", stage.name())),
                };
                let source_metrics: BTreeMap<&str, f64> = [
                    ("loss", Some(trained.last_epoch.loss)),
                    ("accuracy", trained.last_epoch.accuracy),
                    ("val_loss", trained.last_epoch.val_loss),
                    ("val_accuracy", trained.last_epoch.val_accuracy),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
                let metadata = json!({
                    "pipeline": manifest.name,
                    "stage": stage.name(),
                    "from_stage": manifest.stages[source].name(),
                    "manifest_blake3": self.manifest_hash,
                    "epoch": trained.last_epoch.epoch,
                    "step": trained.steps,
                    "metrics": source_metrics,
                    "dtype": format!("{:?}", Kind::Float).to_lowercase(),
                    "model": manifest.model.layers.iter().map(|l| &l.layer).collect::<Vec<_>>(),
                    "input_shape": self.session.data.sample_shape,
                    "scaling": self.session.data.scaling.as_ref().map(|(shift, divide)| json!({"kind": manifest.data.scale, "subtract": shift, "divide": divide})),
                    "tool": concat!("pipeline ", env!("CARGO_PKG_VERSION")),
                });
                let outputs = checkpoint::save(&trained.model, &path, &metadata)?;
                Ok((metrics, outputs))
            }
        }
    }
}

/// Runs the stages `order` (indices into `manifest.stages`, dependencies first), writing
/// to a new run directory next to the manifest. `Err` means the run could not start
/// (bad device, data or model) and nothing was written; stage failures are in the report.
pub fn run(
    manifest: &Manifest,
    order: &[usize],
    manifest_hash: &str,
    obs: &mut dyn Observer,
) -> Result<RunReport, Diagnostic> {
    let session = Session::open(manifest)?;
    let (data, device) = (&session.data, session.device);
    let (total, trainable) = session.parameters;
    obs.message(&format!(
        "{} samples ({} train, {} val, {} test) · model {} parameters ({} trainable) · device {}",
        data.splits.train.len() + data.splits.val.len() + data.splits.test.len(),
        data.splits.train.len(),
        data.splits.val.len(),
        data.splits.test.len(),
        total,
        trainable,
        device::describe(device)
    ));
    let base = match manifest.base_dir.as_os_str().is_empty() {
        true => std::path::Path::new("."),
        false => manifest.base_dir.as_path(),
    };
    let run_dir =
        RunDir::create(base).map_err(|e| write_failed(&base.join(".pipeline/runs"), e))?;
    let log = run_dir
        .metrics_log()
        .map_err(|e| write_failed(&run_dir.path.join("metrics.jsonl"), e))?;
    let device_name = device::describe(device);
    let mut ctx = Context {
        session,
        run_dir: &run_dir,
        manifest_hash,
        log,
        trained: HashMap::new(),
    };
    let mut results: Vec<StageResult> = Vec::new();
    for &index in order {
        let stage = &manifest.stages[index];
        let blocked = stage.needs.iter().any(|n| {
            results
                .iter()
                .any(|r| r.name == n.value && r.status != StageStatus::Ran)
        });
        let mut result = StageResult {
            name: stage.name().to_string(),
            kind: stage.kind(),
            status: StageStatus::Skipped,
            seconds: 0.0,
            metrics: BTreeMap::new(),
            outputs: Vec::new(),
            error: None,
        };
        if !blocked {
            obs.stage_started(stage.name(), stage.kind());
            let started = Instant::now();
            match ctx.run_stage(index, obs) {
                Ok((metrics, outputs)) => {
                    result.status = StageStatus::Ran;
                    result.metrics = metrics;
                    result.outputs = outputs;
                }
                Err(e) => {
                    result.status = StageStatus::Failed;
                    result.error = Some(e);
                }
            }
            result.seconds = started.elapsed().as_secs_f64();
        }
        obs.stage_finished(&result);
        results.push(result);
    }
    Ok(RunReport {
        pipeline: manifest.name.clone(),
        run_dir: run_dir.path,
        device: device_name,
        stages: results,
    })
}
