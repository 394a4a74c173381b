//! Callbacks: what reacts to the events of a `train` stage's loop (epoch start, step end,
//! validation end, epoch end, a snapshot about to be saved and saved), as
//! pytorch-accelerated's `TrainerCallback`s do. One trait, [`Callback`], and a registry, [`REGISTRY`]: one file
//! per member, each built from the stage's spec when the stage asks for it.
//!
//! A callback may end the training: successfully ([`Control::Finish`], early stopping,
//! `max-steps`, `max-time`) or with an error ([`Control::Fail`], a loss that is not
//! finite). A callback may also leave files as outputs of the stage (`keep-best`). Its state (a patience
//! counter, the best value so far) goes into every snapshot under its name and comes back
//! on resume, so a killed run makes the same decisions as one that was never stopped.
//!
//! Under `ddp` every process runs the same callbacks; what they decide from values only
//! rank 0 has (validation) is rank 0's decision, shared by the training loop.

mod early_stop;
mod keep_best;
mod max_steps;
mod max_time;
mod nan_stop;
mod reduce_on_plateau;

use crate::model::Model;
use crate::observer::EpochRecord;
use manifests::{Diagnostic, ScheduleSpec, StageSpec, TrainSpec};
use pipeline_core::report::KeptWeights;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
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
    pub stage: &'a StageSpec,
    pub spec: &'a TrainSpec,
    /// The learning-rate schedule, and the peak learning rate.
    pub schedule: &'a ScheduleSpec,
    pub lr: f64,
    pub device: Device,
    /// Processes training together (1 without a group), and this one's rank.
    pub world: usize,
    pub rank: usize,
    /// Where a callback keeps files that outlive a kill (with snapshots: beside them).
    pub dir: PathBuf,
    /// Whether snapshots are saved (a file a snapshot names must stay until the next).
    pub snapshots: bool,
}

/// A validation: where the loop is and what was measured. `values` holds the training
/// batches' `loss` (and `accuracy`) of the epoch so far, and on rank 0 the validation
/// split's `val_loss`, `val_accuracy` and `val_METRIC`, by their names in the records.
pub struct Validation<'a> {
    pub epoch: u64,
    /// Optimizer steps taken so far.
    pub step: u64,
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
    pub loss: &'a Tensor,
}

/// A reaction to the training loop's events, with state that survives a resume.
pub trait Callback {
    /// The name its state is saved under in a snapshot (stable across versions).
    fn name(&self) -> &'static str;
    fn epoch_started(&mut self, _epoch: u64) {}
    fn step_ended(&mut self, _step: &StepEnd) -> Result<Control, TchError> {
        Ok(Control::Continue)
    }
    /// The validation split was measured (or, without one, the epoch's training
    /// metrics are in).
    fn validated(&mut self, _validation: &Validation) -> Control {
        Control::Continue
    }
    /// The epoch is over: its record holds the training metrics, and the validation
    /// metrics when it was validated (on rank 0 only).
    fn epoch_ended(&mut self, _record: &EpochRecord) -> Control {
        Control::Continue
    }
    /// A snapshot is about to be saved mid-epoch (the epoch's end has `epoch_ended`).
    fn before_snapshot(&mut self) -> Control {
        Control::Continue
    }
    /// A snapshot was saved: what the one before needed may go.
    fn snapshot_saved(&mut self) {}
    /// Weights it leaves as outputs of the stage (`keep-best`), once the training is over.
    fn outputs(&self) -> Vec<KeptWeights> {
        Vec::new()
    }
    /// What it multiplies the schedule's learning rate by (`reduce-on-plateau`).
    fn lr_scale(&self) -> f64 {
        1.0
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

/// Builds a callback for the stage, or `None` when the stage does not ask for it.
type Make = fn(&Setup) -> Result<Option<Box<dyn Callback>>, TchError>;

/// Every callback, in the order they see each event.
pub const REGISTRY: &[Make] = &[
    nan_stop::make,
    max_steps::make,
    max_time::make,
    early_stop::make,
    keep_best::make,
    reduce_on_plateau::make,
];

/// The callbacks of one `train` stage.
pub struct Callbacks {
    members: Vec<Box<dyn Callback>>,
}

impl Callbacks {
    pub fn for_stage(setup: &Setup) -> Result<Callbacks, TchError> {
        let mut members = Vec::new();
        for make in REGISTRY {
            members.extend(make(setup)?);
        }
        Ok(Callbacks { members })
    }

    pub fn epoch_started(&mut self, epoch: u64) {
        for c in &mut self.members {
            c.epoch_started(epoch);
        }
    }

    /// Every callback sees the step (unless one fails to read the device); the first
    /// that ends the training decides.
    pub fn step_ended(&mut self, step: &StepEnd) -> Result<Control, TchError> {
        self.each(|c| c.step_ended(step))
    }

    /// Every callback sees the validation; the first that ends the training decides.
    pub fn validated(&mut self, validation: &Validation) -> Control {
        self.each(|c| Ok(c.validated(validation)))
            .expect("validated cannot fail")
    }

    pub fn snapshot_saved(&mut self) {
        for c in &mut self.members {
            c.snapshot_saved();
        }
    }

    /// What the schedule's learning rate is multiplied by.
    pub fn lr_scale(&self) -> f64 {
        self.members.iter().map(|c| c.lr_scale()).product()
    }

    /// Every callback's output files.
    pub fn outputs(&self) -> Vec<KeptWeights> {
        self.members.iter().flat_map(|c| c.outputs()).collect()
    }

    /// Every callback sees the epoch; the first that ends the training decides.
    pub fn epoch_ended(&mut self, record: &EpochRecord) -> Control {
        self.each(|c| Ok(c.epoch_ended(record)))
            .expect("epoch_ended cannot fail")
    }

    /// Every callback before a mid-epoch snapshot; the first that ends the training
    /// decides.
    pub fn before_snapshot(&mut self) -> Control {
        self.each(|c| Ok(c.before_snapshot()))
            .expect("before_snapshot cannot fail")
    }

    /// `event` for every callback in order; the first answer that is not `Continue`.
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
