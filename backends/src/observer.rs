//! [`Observer`]: how a run reports progress (a progress bar, plain lines, or nothing).
//!
//! Every method has a default that ignores the event, so an observer implements only
//! what it shows. Events never wait on the device: `step` carries no loss.

use manifests::{Diagnostic, StageKind};
use pipeline_core::report::StageResult;
use serde_json::{json, Value};

/// The metrics of one finished epoch of a `train` stage.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    pub stage: String,
    pub epoch: u64,
    pub epochs: u64,
    pub loss: f64,
    pub accuracy: Option<f64>,
    pub val_loss: Option<f64>,
    pub val_accuracy: Option<f64>,
    /// The validation metrics `validate` (or a monitor) asks for, by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub val_metrics: std::collections::BTreeMap<String, f64>,
    pub lr: f64,
    pub seconds: f64,
    pub samples_per_second: f64,
    /// Seconds spent averaging gradients and exchanging parameters with the other
    /// processes (distributed runs only).
    #[serde(default)]
    pub comm_seconds: Option<f64>,
    /// Optimizer steps in the epoch.
    #[serde(default)]
    pub steps: u64,
}

impl EpochRecord {
    /// The line written to `metrics.jsonl`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "record": "epoch",
            "stage": self.stage,
            "epoch": self.epoch,
            "loss": self.loss,
            "lr": self.lr,
            "seconds": self.seconds,
            "samples_per_second": self.samples_per_second,
            "steps": self.steps,
        });
        for (key, value) in [
            ("accuracy", self.accuracy),
            ("val_loss", self.val_loss),
            ("val_accuracy", self.val_accuracy),
            ("comm_seconds", self.comm_seconds),
        ] {
            if let Some(x) = value {
                v[key] = json!(x);
            }
        }
        for (name, x) in &self.val_metrics {
            v[format!("val_{name}")] = json!(x);
        }
        v
    }
}

/// What a `train` stage did since its last step record (`logging { log-every-steps N }`):
/// the values are over every process.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub stage: String,
    pub epoch: u64,
    /// Optimizer steps taken so far, this one included.
    pub step: u64,
    /// The mean training loss of the samples since the last step record, and their
    /// accuracy (of a classification).
    pub loss: f64,
    pub accuracy: Option<f64>,
    /// The samples those are over (from every process).
    pub samples: u64,
    /// The learning rate of this step.
    pub lr: f64,
    /// The gradients' total norm before clipping, when it was taken.
    pub grad_norm: Option<f64>,
    /// The loss scale after this step (`16-mixed`).
    pub loss_scale: Option<f64>,
    /// Samples trained per second since the last step record (or the epoch's start).
    pub samples_per_second: f64,
}

impl StepRecord {
    /// The line written to `metrics.jsonl`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "record": "step",
            "stage": self.stage,
            "epoch": self.epoch,
            "step": self.step,
            "loss": self.loss,
            "samples": self.samples,
            "lr": self.lr,
            "samples_per_second": self.samples_per_second,
        });
        for (key, value) in [
            ("accuracy", self.accuracy),
            ("grad_norm", self.grad_norm),
            ("loss_scale", self.loss_scale),
        ] {
            if let Some(x) = value.filter(|x| x.is_finite()) {
                v[key] = json!(x);
            }
        }
        v
    }
}

pub trait Observer {
    /// A line of information, such as the model's size.
    fn message(&mut self, _text: &str) {}
    /// Something the user must see even when progress is not shown: a resumed stage, a
    /// warning. Printed on stderr unless an observer does otherwise.
    fn notice(&mut self, text: &str) {
        eprintln!("{text}");
    }
    /// A warning found when the run starts (a compatibility rule decided at run time, a
    /// category not seen in training), with its code.
    fn warning(&mut self, d: &Diagnostic) {
        let help = d
            .help
            .as_deref()
            .map_or(String::new(), |h| format!("\n  help: {h}"));
        self.notice(&format!("warning[{}]: {}{help}", d.code, d.message));
    }
    fn stage_started(&mut self, _name: &str, _kind: StageKind) {}
    fn epoch_started(&mut self, _stage: &str, _epoch: u64, _epochs: u64, _steps: u64) {}
    /// `done` batches of the current epoch have been queued.
    fn step(&mut self, _done: u64) {}
    /// A step record (`logging { log-every-steps N }`): the running loss and throughput.
    fn step_logged(&mut self, _record: &StepRecord) {}
    fn epoch_finished(&mut self, _record: &EpochRecord) {}
    /// The stage failed with `error`, which the run reports after this.
    fn stage_failed(&mut self, _stage: &str, _error: &Diagnostic) {}
    fn stage_finished(&mut self, _result: &StageResult) {}
}

/// An observer that shows nothing.
pub struct Silent;

impl Observer for Silent {}
