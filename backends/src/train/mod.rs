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
mod processes;
mod rates;
mod step_log;
mod update;
mod validation;

pub use step_log::{StepLogState, Totals};

use crate::callbacks::CHECK_EVERY;
use crate::callbacks::{
    At, Callbacks, Control, Out, RunEnd, RunStart, Setup, Snapshot, StepEnd, Validation,
};
use crate::data::Loader;
use crate::error::torch_error;
use crate::finetune;
use crate::loss;
use crate::model::Model;
use crate::numerics::{self, Scaler};
use crate::observer::{EpochRecord, Observer};
use crate::session::Session;
use crate::snapshot::{Position, Saved, Snapshots, Sums};
use manifests::{Diagnostic, Manifest, StageSpec, TrainSpec};
use pipeline_core::finetune::InitMatch;
use pipeline_core::report::KeptWeights;
use pipeline_core::rng::Rng;
use plan::{batch_plan, optimizer_for, sampler_for};
use processes::{agree, agree_on_snapshots, decide, sum_over_processes};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use step_log::StepLog;
use tch::{Kind, Tensor};
use update::optimizer_step;
use validation::{share, Validator};

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
    /// The weights `keep-best` kept, the best first.
    pub kept: Vec<KeptWeights>,
}

/// A failure of libtorch in stage `name` while doing `what`, explained (a deterministic
/// algorithm that does not exist names `deterministic`).
fn failure(manifest: &Manifest, name: &str, what: &str, e: tch::TchError) -> Diagnostic {
    numerics::nondeterministic(manifest, &e).unwrap_or_else(|| {
        torch_error(
            "pipeline::train::failed",
            &format!("stage `{name}`: {what}"),
            &e,
        )
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
    let (manifest, data, device) = (session.manifest, &session.data, session.device);
    let numerics = &session.numerics;
    let accelerator = &manifest.accelerator;
    let name = stage.name();
    let fail = |what: &str, e: tch::TchError| failure(manifest, name, what, e);

    tch::manual_seed(manifest.seed as i64);
    let mut model = Model::build(&manifest.model, &data.inputs(), device, numerics.weights)?;
    let init = match &spec.init {
        Some(init) => Some(finetune::load_init(
            &model, manifest, stage, spec, init, obs,
        )?),
        None => None,
    };
    if let Some(start) = start {
        model
            .vs
            .copy(&start.vs)
            .map_err(|e| fail("cannot copy the starting weights", e))?;
    }
    finetune::freeze(&model, stage, spec, obs)?;
    let group = session.group.as_ref();
    let distributed = &accelerator.distributed;
    let (mut opt, mut shards) = optimizer_for(manifest, &model, group, session.strategy)?;
    let clipping = Some(&accelerator.clipping).filter(|c| c.enabled());
    let mut scaler = match accelerator.scales_loss() {
        true => Some(Scaler::new(device).map_err(|e| fail("setting up the loss scaler", e))?),
        false => None,
    };

    let train_samples = &data.splits.train;
    // Under `ddp` and `zero1`, this process trains on every world-th sample of each epoch's order.
    let (rank, world) = group.map_or((0, 1), |g| (g.rank, g.world));
    let sampler = sampler_for(data, accelerator, name)?;
    // Every epoch deals the same number of samples to this process.
    let n = sampler
        .epoch(
            train_samples,
            manifest.seed,
            1,
            spec.shuffle,
            spec.batch_size as usize,
            rank,
            world,
        )
        .len() as u64;
    let (batch, batches) = batch_plan(manifest, stage, spec, n)?;
    // An optimizer step every `accumulate` batches, and one at the end of each epoch.
    let accumulate = accelerator.accumulate.max(1);
    let steps = batches.div_ceil(accumulate);
    let schedule = rates::Rates::new(
        &manifest.schedule,
        manifest.optimizer.lr,
        steps,
        spec.epochs,
    )?;
    let setup = Setup {
        manifest,
        stage,
        spec,
        schedule: &manifest.schedule,
        lr: manifest.optimizer.lr,
        device,
        world,
        rank,
        batches,
        dir: dirs.own.to_path_buf(),
        run_dir: dirs.run,
        snapshots: saved.snapshots,
        final_state: saved.final_state,
        tensorboard: dirs.tensorboard,
        inputs,
    };
    let validator = Validator::new(session, stage, spec, rank)?;
    let mut out = Out { log, obs };
    let mut callbacks = Callbacks::for_stage(&setup)?;
    if let Some(g) = group {
        // Every process starts from rank 0's weights (and batch-norm statistics).
        let mut named: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let mut vars: Vec<Tensor> = named.into_iter().map(|(_, t)| t).collect();
        g.broadcast_all(&mut vars, 0)
            .map_err(|e| fail("sharing the initial weights", e))?;
    }
    let bucket_bytes = (distributed.bucket_mb * 1e6) as usize;
    let sync_batch_norm = group.filter(|_| distributed.sync_batch_norm);
    let mut order: Vec<usize> = train_samples.clone();
    let sums = || -> Result<(Tensor, Tensor), tch::TchError> {
        Ok((
            Tensor::f_zeros([], (Kind::Double, device))?,
            Tensor::f_zeros([], (Kind::Int64, device))?,
        ))
    };
    let (mut loss_sum, mut hits_sum) = sums().map_err(|e| fail("setting up", e))?;
    let mut at = Position {
        epoch: 1,
        step_in_epoch: 0,
        step: 0,
        seen: 0,
        counted: 0,
        last: None,
        callbacks: Default::default(),
        step_log: None,
    };
    let extended = |(index, tensors)| crate::snapshot::load_stored(index, tensors);
    let mut restored = (saved.snapshots.and_then(Snapshots::load))
        .or_else(|| saved.extends.map(extended))
        .map(|r| {
        r.and_then(|r| match r.position.fits(spec.epochs, batches) {
            true => Ok(r),
            false => Err(format!(
                "its position (epoch {}, batch {}) is outside this stage's {} epochs of {batches} batches",
                r.position.epoch, r.position.step_in_epoch, spec.epochs
            )),
        })
        .and_then(|r| callbacks.restore(&r.position.callbacks).map(|()| r))
    });
    if let Some(g) = group {
        restored = agree_on_snapshots(g, restored, name, out.obs)
            .map_err(|e| fail("comparing the processes' snapshots", e))?;
    }
    let resumed = matches!(restored, Some(Ok(_)));
    match restored {
        Some(Ok(restored)) => {
            let sums = Sums {
                loss: &loss_sum,
                hits: &hits_sum,
            };
            restored
                .apply(&mut model, &mut opt, scaler.as_mut(), sums, device)
                .map_err(|e| fail("resuming from the snapshot", e))?;
            at = restored.position;
        }
        Some(Err(why)) => {
            // Callbacks that took part of the snapshot's state start afresh.
            callbacks = Callbacks::for_stage(&setup)?;
            out.obs.notice(&format!(
                "warning: the snapshot of `{name}` is unusable ({why}); training from the start"
            ))
        }
        None => {}
    }
    let mut step_log = StepLog::new(
        manifest.logging.log_every_steps,
        at.step_log.take(),
        at.seen,
        world,
    );
    callbacks.run_started(
        &RunStart {
            batch,
            accumulate,
            steps,
            resumed: resumed.then_some(&at),
        },
        &mut out,
    );
    let mut step = at.step;
    let mut last = at.last.take();
    let mut stopped = None;
    let every = &spec.validate;

    // The loop proper: an error ends it, and the callbacks hear of it.
    let result = (|| -> Result<(), Diagnostic> {
        for epoch in at.epoch..=spec.epochs {
            callbacks.epoch_started(epoch, &mut out);
            // A callback that ends the training ends it after the step it decides at.
            let mut finish: Option<String> = None;
            // Whether the training ended before the epoch's last batch.
            let mut ended_within = false;
            // The values of a validation within the epoch that ended the training.
            let mut validated_at_stop: Option<BTreeMap<String, f64>> = None;
            let started = Instant::now();
            if spec.shuffle {
                order.copy_from_slice(train_samples);
                Rng::derived(manifest.seed, epoch).shuffle(&mut order);
            }
            let shard = sampler.epoch(
                &order,
                manifest.seed,
                epoch,
                spec.shuffle,
                batch as usize,
                rank,
                world,
            );
            let resumed = epoch == at.epoch;
            let first = if resumed { at.step_in_epoch } else { 0 };
            let (mut seen, mut counted) = if resumed {
                (at.seen, at.counted)
            } else {
                (0, 0)
            };
            if first == 0 {
                (loss_sum, hits_sum) = sums().map_err(|e| fail("setting up", e))?;
                step_log.epoch_started();
            }
            let mut lr = manifest.optimizer.lr;
            let mut comm = std::time::Duration::ZERO;
            // The gradients' norm at the last optimizer step, when it was taken.
            let mut grad_norm: Option<Tensor> = None;
            let steps_before = step;
            // The samples of the accumulation window that batch `s` belongs to.
            let window_samples = |s: u64| {
                let start = s / accumulate * accumulate;
                let end = (start + accumulate).min(batches);
                (end * batch).min(n) - start * batch
            };
            // The batches of this epoch's share, assembled ahead by the data's workers.
            std::thread::scope(|scope| -> Result<(), Diagnostic> {
                let mut loader = Loader::start(
                    scope,
                    data,
                    &shard,
                    batch as usize,
                    first as usize..batches as usize,
                    Some(epoch),
                )
                .map_err(|e| fail(&format!("epoch {epoch}: starting the data loader"), e))?;
                for s in first..batches {
                    let begin = (s * batch) as i64;
                    let len = (batch as i64).min(n as i64 - begin);
                    let boundary = (s + 1).is_multiple_of(accumulate) || s + 1 == batches;
                    let result = (|| -> Result<Tensor, tch::TchError> {
                        let (xb, yb) = loader.next_batch()?;
                        let (out, loss) = numerics.autocast(|| {
                            let out = model.forward_synced(&xb, true, sync_batch_norm)?;
                            let loss = session.loss.compute(&out, &yb)?;
                            Ok((out, loss))
                        })?;
                        // Each micro-batch weighs by its samples, so that the step's gradient
                        // is the mean over the union of the accumulated micro-batches (a short
                        // last batch counts for what it holds).
                        let mut backward = match accumulate {
                            1 => loss.shallow_clone(),
                            _ => loss.f_div_scalar(window_samples(s) as f64 / len as f64)?,
                        };
                        if let Some(scaler) = &scaler {
                            backward = scaler.scale(&backward)?;
                        }
                        backward.f_backward()?;
                        if boundary {
                            lr = schedule.lr_at(step)? * callbacks.lr_scale();
                            opt.set_lr(lr);
                            let stepped = optimizer_step(
                                &mut opt,
                                scaler.as_mut(),
                                &mut shards,
                                group.map(|g| (g, session.strategy)),
                                clipping,
                                bucket_bytes,
                                manifest.logging.grad_norm && step_log.due(step + 1),
                            )?;
                            comm += stepped.comm;
                            grad_norm = stepped.grad_norm;
                        }
                        tch::no_grad(|| -> Result<(), tch::TchError> {
                            let _ = loss_sum.f_add_(&loss.f_mul_scalar(len)?)?;
                            if let Some((hits, count)) =
                                loss::correct(manifest.loss.kind.target(), &out, &yb)?
                            {
                                let _ = hits_sum.f_add_(&hits)?;
                                counted += count;
                            }
                            Ok(())
                        })?;
                        Ok(loss)
                    })();
                    let at_batch = |e| fail(&format!("epoch {epoch}, batch {}", s + 1), e);
                    let loss = result.map_err(at_batch)?;
                    seen += len;
                    let step_end = StepEnd {
                        epoch,
                        batch: s + 1,
                        step: step + u64::from(boundary),
                        boundary,
                        lr,
                        loss: &loss,
                    };
                    let control = callbacks
                        .step_ended(&step_end, &mut out)
                        .map_err(at_batch)?;
                    let control = match group {
                        Some(g) if boundary && (step + 1).is_multiple_of(CHECK_EVERY) => {
                            agree(g, control, name).map_err(at_batch)?
                        }
                        _ => control,
                    };
                    match control {
                        Control::Continue => {}
                        Control::Finish(why) => {
                            finish.get_or_insert(why);
                        }
                        Control::Fail(d) => return Err(*d),
                    }
                    if !boundary {
                        continue;
                    }
                    step += 1;
                    if step_log.due(step) {
                        let due = step_log::At {
                            stage: name,
                            epoch,
                            step,
                            lr,
                            loss_sum: &loss_sum,
                            hits_sum: &hits_sum,
                            seen,
                            counted,
                            grad_norm: grad_norm.as_ref(),
                            loss_scale: scaler.as_ref().map(Scaler::current_tensor),
                        };
                        let record = step_log.record(&due, group).map_err(at_batch)?;
                        if let Control::Fail(d) = callbacks.step_logged(&record, &mut out) {
                            return Err(*d);
                        }
                    }
                    if finish.is_some() {
                        ended_within = s + 1 < batches;
                        break;
                    }
                    if every.every_steps > 0
                        && step.is_multiple_of(every.every_steps)
                        && s + 1 < batches
                    {
                        let (train_loss, train_accuracy) =
                            Totals::read(&loss_sum, &hits_sum, seen, counted)
                                .map_err(|e| fail("reading the training loss", e))?
                                .mean();
                        let mut values = validator.measure(&model, train_loss, train_accuracy)?;
                        if let Some(g) = group {
                            share(g, &validator.keys, &mut values).map_err(at_batch)?;
                        }
                        let validation = Validation {
                            epoch,
                            step,
                            within_epoch: true,
                            values: &values,
                            model: &model,
                        };
                        let control = callbacks.validated(&validation, &mut out);
                        let control = decide(group, control, name).map_err(at_batch)?;
                        match control {
                            Control::Continue => {}
                            Control::Finish(why) => {
                                finish = Some(why);
                                validated_at_stop = Some(values);
                                ended_within = s + 1 < batches;
                                break;
                            }
                            Control::Fail(d) => return Err(*d),
                        }
                    }
                    if s + 1 < batches && callbacks.snapshot_due(At::Step(step)) {
                        // Every process saves at the same steps: they agree here too.
                        let control = callbacks.before_snapshot();
                        let control = decide(group, control, name).map_err(at_batch)?;
                        match control {
                            Control::Continue => {}
                            Control::Finish(why) => {
                                finish = Some(why);
                                ended_within = true;
                                break;
                            }
                            Control::Fail(d) => return Err(*d),
                        }
                        let position = Position {
                            epoch,
                            step_in_epoch: s + 1,
                            step,
                            seen,
                            counted,
                            last: last.clone(),
                            callbacks: callbacks.state(),
                            step_log: step_log.state(),
                        };
                        let snapshot = Snapshot {
                            position: &position,
                            model: &model,
                            opt: &opt,
                            scaler: scaler.as_ref(),
                            sums: Sums {
                                loss: &loss_sum,
                                hits: &hits_sum,
                            },
                            device,
                        };
                        callbacks.save(At::Step(step), &snapshot)?;
                    }
                }
                Ok(())
            })?;
            if let Some(g) = group {
                (loss_sum, hits_sum, seen, counted) =
                    sum_over_processes(g, device, &loss_sum, &hits_sum, seen, counted)
                        .map_err(|e| fail("summing the epoch's metrics", e))?;
            }
            let totals = Totals::read(&loss_sum, &hits_sum, seen, counted)
                .map_err(|e| fail("reading the epoch's loss", e))?;
            step_log.epoch_ended(totals);
            let (loss, accuracy) = totals.mean();
            // Validated as `validate` says, and always where the training ends.
            let due = finish.is_some()
                || epoch == spec.epochs
                || (every.every_epochs > 0 && epoch.is_multiple_of(every.every_epochs))
                || (every.every_steps > 0
                    && step > steps_before
                    && step.is_multiple_of(every.every_steps));
            let mut control = Control::Continue;
            let values = match (validated_at_stop, due) {
                // Measured at this very step, where a callback ended the training.
                (Some(values), _) => Some(values),
                (None, true) => {
                    let mut values = validator.measure(&model, loss, accuracy)?;
                    if let Some(g) = group {
                        share(g, &validator.keys, &mut values)
                            .map_err(|e| fail("sharing the validation", e))?;
                    }
                    let validation = Validation {
                        epoch,
                        step,
                        within_epoch: false,
                        values: &values,
                        model: &model,
                    };
                    control = callbacks.validated(&validation, &mut out);
                    Some(values)
                }
                (None, false) => None,
            };
            let seconds = started.elapsed().as_secs_f64();
            let value = |key: &str| values.as_ref().and_then(|v| v.get(key).copied());
            let record = EpochRecord {
                stage: name.to_string(),
                epoch,
                epochs: spec.epochs,
                loss,
                accuracy,
                val_loss: value("val_loss"),
                val_accuracy: value("val_accuracy"),
                val_metrics: values
                    .iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.strip_prefix("val_")?.to_string(), *v)))
                    .filter(|(k, _)| k != "loss" && k != "accuracy")
                    .collect(),
                // `lr_monitor` records the learning rate.
                lr: f64::NAN,
                seconds,
                samples_per_second: seen as f64 / seconds.max(1e-9),
                comm_seconds: group.map(|_| comm.as_secs_f64()),
                steps: step - steps_before,
            };
            let record = callbacks.record(record);
            // The first callback to end the training decides: at the validation, at the
            // epoch's end, or at the step it ended within the epoch.
            for next in [
                callbacks.epoch_ended(&record, &mut out),
                finish.map_or(Control::Continue, Control::Finish),
            ] {
                if matches!(control, Control::Continue) {
                    control = next;
                }
            }
            let control = decide(group, control, name).map_err(|e| fail("ending the epoch", e))?;
            if let Control::Fail(d) = control {
                return Err(*d);
            }
            last = Some(record);
            // A stopped training needs no snapshot: resumed from the one before, it stops at
            // the same step again. Ended at its last epoch, it keeps no final state either: a
            // longer training would end there too.
            let ended = matches!(control, Control::Finish(_));
            if let Control::Finish(why) = control {
                if epoch < spec.epochs || ended_within {
                    stopped = Some((epoch, why, ended_within));
                    break;
                }
            }
            if !ended && callbacks.snapshot_due(At::EpochEnd(epoch)) {
                let position = Position {
                    epoch: epoch + 1,
                    step_in_epoch: 0,
                    step,
                    seen: 0,
                    counted: 0,
                    last: last.clone(),
                    callbacks: callbacks.state(),
                    step_log: step_log.state(),
                };
                let snapshot = Snapshot {
                    position: &position,
                    model: &model,
                    opt: &opt,
                    scaler: scaler.as_ref(),
                    sums: Sums {
                        loss: &loss_sum,
                        hits: &hits_sum,
                    },
                    device,
                };
                callbacks.save(At::EpochEnd(epoch), &snapshot)?;
            }
        }
        Ok(())
    })();
    if let Err(error) = &result {
        callbacks.failed(error, &mut out);
    }
    result?;
    let end = RunEnd {
        step,
        stopped: stopped
            .as_ref()
            .map(|(e, why, within)| (*e, why.as_str(), *within)),
    };
    callbacks.run_ended(&end, &mut out);
    Ok(Trained {
        model,
        last_epoch: last.expect("epochs ≥ 1"),
        steps: step,
        skipped_steps: scaler.as_ref().map(|s| s.skipped),
        init,
        stopped: stopped.map(|(epoch, why, _)| (epoch, why)),
        resumed_at: resumed.then_some(at.epoch),
        kept: callbacks.outputs(),
    })
}
