//! The training loop of a `train` stage: the core that trains and emits events; the
//! [`crate::callbacks`] react to them (logging, progress, snapshots, stopping, best
//! weights).
//!
//! Per step: gather a batch by index on the device, forward, loss, backward, optimizer
//! step, with the learning rate from the schedule. Loss and accuracy sums stay on the
//! device; they are read once per epoch, so the loop never waits on the device.
//!
//! When the stage has a snapshot, the loop resumes from it instead of starting over; it
//! takes a new one where a callback asks (`snapshots`), with every callback's state.
//!
//! The validation split is measured as `validate` says (every epoch by default, also
//! every N steps, and always where the training ends); callbacks decide at every
//! validation (early stopping, best weights) and at every step (`max-steps`,
//! `max-time`, a loss that is not finite). A training that ends within an epoch ends
//! after that step, and the epoch's record covers the batches it trained on.

mod plan;
pub(crate) mod processes;
mod rates;
mod reshard;
mod step_log;
mod trainer;
mod update;
mod validation;

pub use step_log::{StepLogState, Totals};

use crate::callbacks::{Out, Setup};
use crate::error::torch_error;
use crate::model::Model;
use crate::numerics;
use crate::observer::{EpochRecord, Observer};
use crate::session::Session;
use crate::snapshot::Saved;
use manifests::{Diagnostic, Manifest, StageSpec, TrainSpec};
use pipeline_core::finetune::InitMatch;
use pipeline_core::report::KeptWeights;
use serde_json::Value;
use std::path::Path;
use trainer::{Layout, Trainer};

/// What a finished `train` stage leaves behind.
#[derive(Debug)]
pub struct Trained {
    pub model: Model,
    pub last_epoch: EpochRecord,
    /// Optimizer steps taken (skipped ones included).
    pub steps: u64,
    /// Steps the loss scaler skipped for inf/NaN gradients (`16-mixed` only).
    pub skipped_steps: Option<u64>,
    /// How the `init` file met the model, when there was one.
    pub init: Option<InitMatch>,
    /// Training ended before its last step (early stopping, `max-steps`, `max-time`):
    /// the epoch, and why.
    pub stopped: Option<(u64, String)>,
    /// The epoch it started at, when it started from a saved state (a snapshot, or the
    /// final state of a shorter training it extends).
    pub resumed_at: Option<u64>,
    /// It went on from another global batch's snapshot (`--reshard`): not to be stored.
    pub reordered: bool,
    /// The weights `keep-best` kept, the best first.
    pub kept: Vec<KeptWeights>,
}

/// A failure of libtorch in stage `name` while doing `what`, explained (a deterministic
/// algorithm that does not exist names `deterministic`).
fn failure(manifest: &Manifest, name: &str, what: &str, e: tch::TchError) -> Diagnostic {
    numerics::nondeterministic(manifest, &e).unwrap_or_else(|| {
        let stage = manifest.stages.iter().find(|s| s.name() == name);
        torch_error(
            "pipeline::train::failed",
            &format!("stage `{name}`: {what}"),
            &e,
        )
        .label_opt(stage.and_then(|s| s.name.span), "this training")
    })
}

/// Where a training's callbacks write.
pub struct Dirs<'a> {
    /// Their own files, which outlive a kill (beside the snapshots).
    pub own: &'a Path,
    /// TensorBoard's event files, a directory per stage.
    pub tensorboard: &'a Path,
    /// The run's directory (`metrics.jsonl`).
    pub run: &'a Path,
}

/// Trains a fresh model (or a copy of `start`) as `stage` says, resuming from the last of
/// its snapshots if there is one, else continuing the shorter training it extends, if
/// any (`saved`). The callbacks report through `log` (`metrics.jsonl`
/// lines), `obs` (progress) and TensorBoard's event files in `dirs.tensorboard/STAGE/`,
/// and keep their own files in `dirs.own`. `inputs` are the files the stage's key hashed, as it
/// hashed them: one that changes ends the training.
#[allow(clippy::too_many_arguments)]
pub fn train(
    session: &Session,
    stage: &StageSpec,
    spec: &TrainSpec,
    start: Option<&Model>,
    saved: Saved,
    inputs: &[cache::HashedFile],
    dirs: Dirs,
    log: &mut dyn FnMut(&Value) -> Result<(), Diagnostic>,
    obs: &mut dyn Observer,
) -> Result<Trained, Diagnostic> {
    let manifest = session.manifest;
    let layout = Layout::new(session, stage, spec, start, obs)?;
    let (rank, world) = session.group.as_ref().map_or((0, 1), |g| (g.rank, g.world));
    let setup = Setup {
        manifest,
        stage,
        spec,
        schedule: &manifest.schedule,
        lr: manifest.optimizer.lr,
        device: session.device,
        world,
        rank,
        batches: layout.batches,
        dir: dirs.own.to_path_buf(),
        run_dir: dirs.run,
        snapshots: saved.snapshots,
        final_state: saved.final_state,
        tensorboard: dirs.tensorboard,
        inputs,
    };
    let out = Out { log, obs };
    let (trainer, at, resumed) = Trainer::new(session, stage, spec, layout, &setup, &saved, out)?;
    trainer.run(at, resumed)
}
