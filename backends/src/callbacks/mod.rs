//! Callbacks: everything that reacts to the events of a `train` stage's loop (run start,
//! epoch start, step end, validation, epoch end, snapshot, run end, error), as
//! pytorch-accelerated's `TrainerCallback`s do. One trait, [`Callback`], and a registry
//! ([`DECIDING`], [`REPORTING`]): one file per member, each built from the stage's spec
//! when the stage asks for it. A program built on pipeline adds its own with
//! [`register_callback`], turned on by name (`train { callbacks "epochs-csv" }`). What the loop reports goes through them too: `metrics.jsonl` (`metrics_log`),
//! TensorBoard's event files (`tensorboard`), the progress shown (`progress`), the
//! learning rate in the records (`lr_monitor`), the resumable snapshots (`snapshots`),
//! the final state a longer training continues from (`final_state`), and the check that
//! the input files are still those the stage's key hashed (`inputs_unchanged`).
//!
//! A callback may end the training: successfully ([`Control::Finish`], early stopping,
//! `max-steps`, `max-time`) or with an error ([`Control::Fail`], a loss that is not
//! finite). A callback may also leave files as outputs of the stage (`keep-best`). Its
//! state (a patience counter, the best value so far) goes into every snapshot under its
//! name and comes back on resume, so a killed run makes the same decisions as one that was
//! never stopped.
//!
//! Under `ddp` every process runs the same callbacks; what they decide from values only
//! rank 0 has (validation) is rank 0's decision, shared by the training loop.

mod early_stop;
mod final_state;
mod inputs_unchanged;
mod keep_best;
mod lr_monitor;
mod max_steps;
mod max_time;
mod metrics_log;
mod nan_stop;
mod progress;
mod snapshots;
mod tensorboard;

use crate::model::Model;
use crate::numerics::Scaler;
use crate::observer::{EpochRecord, Observer, StepRecord};
use crate::optimizer::Optimizer;
use crate::snapshot::{Position, Snapshots, Sums};
use manifests::callbacks::CallbackDescription;
use manifests::registry::Registry;
use manifests::{Diagnostic, Manifest, ScheduleSpec, StageSpec, TrainSpec};
use pipeline_core::report::KeptWeights;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tch::{Device, TchError, Tensor};

pub use nan_stop::CHECK_EVERY;

/// What the training does after an event.
#[derive(Debug)]
pub enum Control {
    Continue,
    /// End the training now, successfully: the weights so far are the stage's result.
    Finish(String),
    /// End the training with this error.
    Fail(Box<Diagnostic>),
}

/// What a callback is built from.
pub struct Setup<'a> {
    pub manifest: &'a Manifest,
    pub stage: &'a StageSpec,
    pub spec: &'a TrainSpec,
    /// The learning-rate schedule, and the peak learning rate.
    pub schedule: &'a ScheduleSpec,
    pub lr: f64,
    pub device: Device,
    /// Processes training together (1 without a group), and this one's rank.
    pub world: usize,
    pub rank: usize,
    /// Batches per epoch (of this process's share).
    pub batches: u64,
    /// Where a callback keeps files that outlive a kill (with snapshots: beside them).
    pub dir: PathBuf,
    /// The run's directory, where `metrics.jsonl` is: records of a callback's own go
    /// beside it.
    pub run_dir: &'a Path,
    /// Where snapshots go, when the stage takes them (a file a snapshot names must stay
    /// until the next).
    pub snapshots: Option<&'a Snapshots>,
    /// Where the training keeps its final state, when a longer one could continue it.
    pub final_state: Option<&'a Snapshots>,
    /// Where TensorBoard's event files go, a directory per stage (`RUN/tensorboard/`, or
    /// `DIR/PIPELINE/RUN/` under `run --tensorboard-dir DIR`).
    pub tensorboard: &'a Path,
    /// The files the stage's key hashed, each as the version hashed.
    pub inputs: &'a [cache::HashedFile],
}

/// Where callbacks report to: the run's `metrics.jsonl`, one JSON line at a time, and
/// whoever shows the run's progress.
pub struct Out<'o> {
    pub log: &'o mut dyn FnMut(&Value) -> Result<(), Diagnostic>,
    pub obs: &'o mut dyn Observer,
}

/// The training is about to take its first step (or its first since a snapshot).
pub struct RunStart<'a> {
    /// Samples per batch, batches accumulated per optimizer step, and optimizer steps per
    /// epoch.
    pub batch: u64,
    pub accumulate: u64,
    pub steps: u64,
    /// Where it resumes, when it resumes from a snapshot.
    pub resumed: Option<&'a Position>,
}

/// A validation: where the loop is and what was measured. `values` holds the training
/// batches' `loss` (and `accuracy`) of the epoch so far, and on rank 0 the validation
/// split's `val_loss`, `val_accuracy` and `val_METRIC`, by their names in the records.
pub struct Validation<'a> {
    pub epoch: u64,
    /// Optimizer steps taken so far.
    pub step: u64,
    /// Whether it was measured within the epoch (`validate every-steps=N`), rather than
    /// at its end (where the epoch's record carries it).
    pub within_epoch: bool,
    pub values: &'a BTreeMap<String, f64>,
    pub model: &'a Model,
}

/// The end of one batch: where the loop is, and that batch's mean loss, on the device
/// (reading it waits for the device: a callback that needs it reads it rarely).
pub struct StepEnd<'a> {
    pub epoch: u64,
    /// The batch of the epoch just done (1-based).
    pub batch: u64,
    /// Optimizer steps taken so far, this one included when the batch ended one.
    pub step: u64,
    /// Whether the batch ended an optimizer step (the last of an accumulation window).
    pub boundary: bool,
    /// The learning rate of the last optimizer step.
    pub lr: f64,
    pub loss: &'a Tensor,
}

/// Where a snapshot could be taken: after an optimizer step within an epoch (counted over
/// all epochs), or at the end of an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Step(u64),
    EpochEnd(u64),
}

/// Everything a snapshot holds: the position (with every callback's state), the weights,
/// the optimizer's and the loss scaler's state, and the epoch's sums so far.
pub struct Snapshot<'a> {
    pub position: &'a Position,
    pub model: &'a Model,
    pub opt: &'a Optimizer,
    pub scaler: Option<&'a Scaler>,
    pub sums: Sums<'a>,
    pub device: Device,
}

impl Snapshot<'_> {
    /// Writes the snapshot to `snapshots`, replacing the one before.
    pub fn save_to(&self, snapshots: &Snapshots) -> Result<(), Diagnostic> {
        let sums = Sums {
            loss: self.sums.loss,
            hits: self.sums.hits,
        };
        snapshots.save(
            self.position,
            self.model,
            self.opt,
            self.scaler,
            sums,
            self.device,
        )
    }
}

/// How the training ended.
pub struct RunEnd<'a> {
    /// Optimizer steps taken in all.
    pub step: u64,
    /// Ended before its last step: the epoch, why, and whether within that epoch.
    pub stopped: Option<(u64, &'a str, bool)>,
}

/// A reaction to the training loop's events, with state that survives a resume. Every
/// event also hands it [`Out`], where it may report.
pub trait Callback {
    /// The name its state is saved under in a snapshot (stable across versions).
    fn name(&self) -> &'static str;
    fn run_started(&mut self, _start: &RunStart, _out: &mut Out) {}
    fn epoch_started(&mut self, _epoch: u64, _out: &mut Out) {}
    fn step_ended(&mut self, _step: &StepEnd, _out: &mut Out) -> Result<Control, TchError> {
        Ok(Control::Continue)
    }
    /// A step record was taken (`logging { log-every-steps N }`).
    fn step_logged(&mut self, _record: &StepRecord, _out: &mut Out) -> Control {
        Control::Continue
    }
    /// The validation split was measured (or, without one, the training metrics so far
    /// are in).
    fn validated(&mut self, _validation: &Validation, _out: &mut Out) -> Control {
        Control::Continue
    }
    /// Adds what it follows to the epoch's record, before any callback sees it.
    fn record(&mut self, _record: &mut EpochRecord) {}
    /// The epoch is over: its record holds the training metrics, and the validation
    /// metrics when it was validated (on rank 0 only).
    fn epoch_ended(&mut self, _record: &EpochRecord, _out: &mut Out) -> Control {
        Control::Continue
    }
    /// Whether it wants a snapshot taken at `at`.
    fn snapshot_due(&self, _at: At) -> bool {
        false
    }
    /// A snapshot is about to be taken mid-epoch (the epoch's end has `epoch_ended`).
    fn before_snapshot(&mut self) -> Control {
        Control::Continue
    }
    /// Saves the snapshot it asked for at `at`.
    fn save(&mut self, _at: At, _snapshot: &Snapshot) -> Result<(), Diagnostic> {
        Ok(())
    }
    /// Whether it writes the resumable snapshots (then it saves one a signal asks for
    /// too: [`Callbacks::save_requested`]).
    fn writes_snapshots(&self) -> bool {
        false
    }
    /// A snapshot was saved: what the one before needed may go.
    fn snapshot_saved(&mut self) {}
    /// The training is over (stopped early or not); not after an error.
    fn run_ended(&mut self, _end: &RunEnd, _out: &mut Out) {}
    /// The training failed with `error` (which the run reports).
    fn failed(&mut self, _error: &Diagnostic, _out: &mut Out) {}
    /// Weights it leaves as outputs of the stage (`keep-best`), once the training is over.
    fn outputs(&self) -> Vec<KeptWeights> {
        Vec::new()
    }
    /// What to save in a snapshot (`Value::Null`: nothing).
    fn state(&self) -> Value {
        Value::Null
    }
    /// Puts back what [`Callback::state`] saved.
    fn restore(&mut self, _state: &Value) -> Result<(), String> {
        Ok(())
    }
}

/// What building a callback gives: `None` when the stage does not ask for it.
pub type Made<'a> = Result<Option<Box<dyn Callback + 'a>>, Diagnostic>;

/// Builds a callback for the stage.
pub type Make = for<'a> fn(&Setup<'a>) -> Made<'a>;

/// pipeline's callbacks that decide (stop, keep), in the order they see
/// each event.
const DECIDING: &[Make] = &[
    inputs_unchanged::make,
    nan_stop::make,
    max_steps::make,
    max_time::make,
    early_stop::make,
    keep_best::make,
];

/// pipeline's callbacks that report what was decided, after the registered ones.
const REPORTING: &[Make] = &[
    lr_monitor::make,
    snapshots::make,
    final_state::make,
    metrics_log::make,
    tensorboard::make,
    progress::make,
];

/// A callback a program built on pipeline adds ([`register_callback`]): its description
/// (what `check` and `explain` know) and what builds it for a stage that names it.
pub struct CallbackMember {
    pub description: &'static CallbackDescription,
    /// Builds it for a stage that turned it on (`None`: it has nothing to do there).
    pub make: Make,
}

static REGISTERED: Registry<CallbackMember> = Registry::new(Vec::new, |c| c.description.name);

/// Adds a callback that a `train` stage turns on by name (`callbacks "epochs-csv"`).
/// Refused when the name is taken or cannot be written.
pub fn register_callback(member: &'static CallbackMember) -> Result<(), String> {
    manifests::callbacks::register(member.description)?;
    REGISTERED.register(member)
}

/// The callbacks of one `train` stage.
pub struct Callbacks<'a> {
    members: Vec<Box<dyn Callback + 'a>>,
}

impl<'a> Callbacks<'a> {
    /// pipeline's deciding callbacks the stage asks for, the registered ones it names in
    /// the order it names them, then the reporting ones.
    pub fn for_stage(setup: &Setup<'a>) -> Result<Callbacks<'a>, Diagnostic> {
        let mut members = Vec::new();
        for make in DECIDING {
            members.extend(make(setup)?);
        }
        for name in &setup.spec.callbacks {
            let member = REGISTERED.get(&name.value).ok_or_else(|| {
                Diagnostic::error(
                    "pipeline::train::unknown_callback",
                    format!("no callback is registered as `{}`", name.value),
                )
                .label_opt(name.span, "not a registered callback")
            })?;
            members.extend((member.make)(setup)?);
        }
        for make in REPORTING {
            members.extend(make(setup)?);
        }
        Ok(Callbacks { members })
    }

    pub fn run_started(&mut self, start: &RunStart, out: &mut Out) {
        for c in &mut self.members {
            c.run_started(start, out);
        }
    }

    pub fn epoch_started(&mut self, epoch: u64, out: &mut Out) {
        for c in &mut self.members {
            c.epoch_started(epoch, out);
        }
    }

    /// Every callback sees the step, until one fails; the first that ends the training
    /// decides.
    pub fn step_ended(&mut self, step: &StepEnd, out: &mut Out) -> Result<Control, TchError> {
        self.each(|c| c.step_ended(step, out))
    }

    /// Every callback sees the step record, until one fails.
    pub fn step_logged(&mut self, record: &StepRecord, out: &mut Out) -> Control {
        self.each(|c| Ok(c.step_logged(record, out)))
            .expect("step_logged cannot fail")
    }

    /// Every callback sees the validation, until one fails; the first that ends the
    /// training decides.
    pub fn validated(&mut self, validation: &Validation, out: &mut Out) -> Control {
        self.each(|c| Ok(c.validated(validation, out)))
            .expect("validated cannot fail")
    }

    /// Every callback sees the epoch, until one fails (a failed epoch is not recorded);
    /// the first that ends the training decides.
    pub fn epoch_ended(&mut self, record: &EpochRecord, out: &mut Out) -> Control {
        self.each(|c| Ok(c.epoch_ended(record, out)))
            .expect("epoch_ended cannot fail")
    }

    /// The epoch's record, as the callbacks complete it.
    pub fn record(&mut self, mut record: EpochRecord) -> EpochRecord {
        for c in &mut self.members {
            c.record(&mut record);
        }
        record
    }

    pub fn snapshot_due(&self, at: At) -> bool {
        self.members.iter().any(|c| c.snapshot_due(at))
    }

    /// Every callback before a mid-epoch snapshot, until one fails; the first that ends
    /// the training decides.
    pub fn before_snapshot(&mut self) -> Control {
        self.each(|c| Ok(c.before_snapshot()))
            .expect("before_snapshot cannot fail")
    }

    /// Each callback that asked for a snapshot at `at` saves it; then every callback
    /// hears that it was saved.
    pub fn save(&mut self, at: At, snapshot: &Snapshot) -> Result<(), Diagnostic> {
        for c in &mut self.members {
            if c.snapshot_due(at) {
                c.save(at, snapshot)?;
            }
        }
        for c in &mut self.members {
            c.snapshot_saved();
        }
        Ok(())
    }

    /// A snapshot no schedule asked for (a signal did), saved by the callback that
    /// writes snapshots; then every callback hears that it was saved. Whether one was
    /// written (none is without such a callback: a run without a cache).
    pub fn save_requested(&mut self, at: At, snapshot: &Snapshot) -> Result<bool, Diagnostic> {
        let mut written = false;
        for c in &mut self.members {
            if c.writes_snapshots() {
                c.save(at, snapshot)?;
                written = true;
            }
        }
        if written {
            for c in &mut self.members {
                c.snapshot_saved();
            }
        }
        Ok(written)
    }

    pub fn run_ended(&mut self, end: &RunEnd, out: &mut Out) {
        for c in &mut self.members {
            c.run_ended(end, out);
        }
    }

    pub fn failed(&mut self, error: &Diagnostic, out: &mut Out) {
        for c in &mut self.members {
            c.failed(error, out);
        }
    }

    /// Every callback's output files.
    pub fn outputs(&self) -> Vec<KeptWeights> {
        self.members.iter().flat_map(|c| c.outputs()).collect()
    }

    /// `event` for every callback in order until one fails; the first answer that is not
    /// `Continue`.
    fn each(
        &mut self,
        mut event: impl FnMut(&mut dyn Callback) -> Result<Control, TchError>,
    ) -> Result<Control, TchError> {
        let mut control = Control::Continue;
        for c in &mut self.members {
            let mine = event(c.as_mut())?;
            if matches!(control, Control::Continue) {
                control = mine;
            }
            if matches!(control, Control::Fail(_)) {
                break;
            }
        }
        Ok(control)
    }

    /// Every callback's state, by name, for a snapshot.
    pub fn state(&self) -> BTreeMap<String, Value> {
        self.members
            .iter()
            .map(|c| (c.name().to_string(), c.state()))
            .filter(|(_, v)| !v.is_null())
            .collect()
    }

    /// Puts back the states of a snapshot; a callback without one starts afresh.
    pub fn restore(&mut self, states: &BTreeMap<String, Value>) -> Result<(), String> {
        for c in &mut self.members {
            if let Some(state) = states.get(c.name()) {
                c.restore(state)
                    .map_err(|e| format!("the state of `{}`: {e}", c.name()))?;
            }
        }
        Ok(())
    }
}
