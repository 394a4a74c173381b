//! The training loop of a `train` stage.
//!
//! Per step: gather a batch by index on the device, forward, loss, backward, optimizer
//! step, with the learning rate from the schedule. Loss and accuracy sums stay on the
//! device; they are read once per epoch, so the loop never waits on the device.
//!
//! With [`Snapshots`], the loop saves a resumable snapshot as often as the stage says and,
//! when one exists, resumes from it instead of starting over.
//!
//! The validation split is measured as `validate` says (every epoch by default, also
//! every N steps, and always where the training ends); callbacks decide at every
//! validation (early stopping, best weights) and at every step (`max-steps`,
//! `max-time`, a loss that is not finite). A training that ends within an epoch ends
//! after that step, and the epoch's record covers the batches it trained on.

use crate::callbacks::CHECK_EVERY;
use crate::callbacks::{Callbacks, Control, Setup, StepEnd, Validation};
use crate::data::{Dataset, Loader};
use crate::error::torch_error;
use crate::evaluate::evaluate;
use crate::finetune;
use crate::loss;
use crate::model::Model;
use crate::numerics::{self, Scaler};
use crate::observer::{EpochRecord, Observer};
use crate::optimizer::Optimizer;
use crate::process_group::ProcessGroup;
use crate::session::Session;
use crate::snapshot::{Position, Restored, Snapshots, Sums};
use manifests::{
    AcceleratorSpec, Diagnostic, Layer, Manifest, SplitName, StageSpec, Strategy, TrainSpec,
};
use pipeline_core::finetune::InitMatch;
use pipeline_core::metrics::{self, Metric, Score};
use pipeline_core::report::KeptWeights;
use pipeline_core::rng::Rng;
use pipeline_core::sampler::{batches_per_epoch, Sampler};
use pipeline_core::schedule::LrSchedule;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

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
    /// The weights `keep-best` kept, the best first.
    pub kept: Vec<KeptWeights>,
}

/// Trains a fresh model (or a copy of `start`) as `stage` says, resuming from the last of
/// `snapshots` if there is one. `log` receives every epoch's record (and every validation
/// within an epoch) as a `metrics.jsonl` line, before observers see it. Callbacks keep
/// their files in `dir`.
#[allow(clippy::too_many_arguments)]
pub fn train(
    session: &Session,
    stage: &StageSpec,
    spec: &TrainSpec,
    start: Option<&Model>,
    snapshots: Option<&Snapshots>,
    dir: &Path,
    log: &mut dyn FnMut(&Value) -> Result<(), Diagnostic>,
    obs: &mut dyn Observer,
) -> Result<Trained, Diagnostic> {
    let (manifest, data, device) = (session.manifest, &session.data, session.device);
    let numerics = &session.numerics;
    let accelerator = &manifest.accelerator;
    let name = stage.name();
    let fail = |what: &str, e: tch::TchError| {
        numerics::nondeterministic(manifest, &e).unwrap_or_else(|| {
            torch_error(
                "pipeline::train::failed",
                &format!("stage `{name}`: {what}"),
                &e,
            )
        })
    };

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
    let (mut opt, mut shards) = optimizer_for(manifest, &model, group)?;
    let clips = accelerator.clipping.enabled();
    let mut scaler = match accelerator.scales_loss() {
        true => Some(Scaler::new(device).map_err(|e| fail("setting up the loss scaler", e))?),
        false => None,
    };

    let train_samples = &data.splits.train;
    let val_samples = data.splits.get(SplitName::Val);
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
    let processes = match world {
        1 => "1 process".to_string(),
        w => format!("{w} processes"),
    };
    obs.message(&format!(
        "`{name}`: {batches} batches of {batch} per epoch · effective batch {} ({batch} × {accumulate} accumulated × {processes}) · {steps} optimizer steps per epoch",
        batch * accumulate * world as u64
    ));
    let schedule = LrSchedule::new(
        &manifest.schedule,
        manifest.optimizer.lr,
        steps,
        spec.epochs,
    );
    let setup = Setup {
        stage,
        spec,
        schedule: &manifest.schedule,
        lr: manifest.optimizer.lr,
        device,
        world,
        rank,
        dir: dir.to_path_buf(),
        snapshots: snapshots.is_some(),
    };
    let val_metrics = validation_metrics(manifest, spec);
    // What every validation gives, in order: under `ddp`, rank 0's values for all.
    let shared_keys = validation_keys(manifest, &val_metrics, !val_samples.is_empty());
    // The training batches' loss and accuracy so far, with (on rank 0) the validation
    // split's `val_loss`, `val_accuracy` and `val_METRIC`s.
    let measure = |model: &Model,
                   train_loss: f64,
                   train_accuracy: Option<f64>|
     -> Result<BTreeMap<String, f64>, Diagnostic> {
        let mut values = BTreeMap::from([("loss".to_string(), train_loss)]);
        if let Some(a) = train_accuracy {
            values.insert("accuracy".into(), a);
        }
        if val_samples.is_empty() || rank != 0 {
            return Ok(values);
        }
        let collect = !val_metrics.is_empty();
        let (scores, predicted) = evaluate(
            model,
            numerics,
            &session.loss,
            data,
            val_samples,
            1024,
            collect,
        )
        .map_err(|e| fail("validation", e))?;
        values.insert("val_loss".into(), scores.loss);
        if let Some(a) = scores.accuracy {
            values.insert("val_accuracy".into(), a);
        }
        let Some(predicted) = predicted else {
            return Ok(values);
        };
        let predictions = predicted.as_predictions(manifest.loss.kind);
        for metric in &val_metrics {
            let undefined = |why: String| {
                Diagnostic::error(
                    "pipeline::train::undefined_metric",
                    format!(
                        "stage `{name}`: `{}` is undefined on the validation split: {why}",
                        metric.name()
                    ),
                )
                .label_opt(spec.validate.span.or(stage.name.span), "validated here")
            };
            match metric.compute(&predictions).map_err(undefined)? {
                Score::One(x) => values.insert(format!("val_{}", metric.name()), x),
                Score::PerClass(_) | Score::Matrix(_) => {
                    return Err(undefined("it gives more than one value".into()))
                }
            };
        }
        Ok(values)
    };
    let mut callbacks =
        Callbacks::for_stage(&setup).map_err(|e| fail("setting up the callbacks", e))?;
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
    };
    let mut restored = snapshots.and_then(Snapshots::load).map(|r| {
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
        restored = agree_on_snapshots(g, restored, name, obs)
            .map_err(|e| fail("comparing the processes' snapshots", e))?;
    }
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
            obs.notice(&format!(
                "resuming `{name}` from its snapshot: epoch {}/{}, batch {}/{batches}",
                at.epoch, spec.epochs, at.step_in_epoch
            ));
        }
        Some(Err(why)) => {
            // Callbacks that took part of the snapshot's state start afresh.
            callbacks =
                Callbacks::for_stage(&setup).map_err(|e| fail("setting up the callbacks", e))?;
            obs.notice(&format!(
                "warning: the snapshot of `{name}` is unusable ({why}); training from the start"
            ))
        }
        None => {}
    }
    let mut step = at.step;
    let mut last = at.last.take();
    let mut stopped = None;
    let every = &spec.validate;

    for epoch in at.epoch..=spec.epochs {
        obs.epoch_started(name, epoch, spec.epochs, batches);
        callbacks.epoch_started(epoch);
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
        }
        let mut lr = manifest.optimizer.lr;
        let mut comm = std::time::Duration::ZERO;
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
                        lr = schedule.lr_at(step) * callbacks.lr_scale();
                        opt.set_lr(lr);
                        // Averaged (over processes), unscaled (16-mixed) and clipped
                        // gradients: the only reasons to touch them between backward and
                        // the step.
                        let mut grads = match group.is_some() || scaler.is_some() || clips {
                            true => opt.grads(),
                            false => Vec::new(),
                        };
                        if let Some(g) = group {
                            let started = Instant::now();
                            g.average(&mut grads, bucket_bytes)?;
                            comm += started.elapsed();
                        }
                        let finite = match &mut scaler {
                            Some(scaler) => scaler.unscale(&mut grads)?,
                            None => true,
                        };
                        if finite {
                            if clips {
                                numerics::clip(&mut grads, &accelerator.clipping)?;
                            }
                            opt.step()?;
                            if let (false, Some(g)) = (shards.is_empty(), group) {
                                let started = Instant::now();
                                for (owner, mine) in shards.iter_mut().enumerate() {
                                    g.broadcast_all(mine, owner)?;
                                }
                                comm += started.elapsed();
                            }
                        }
                        if let Some(scaler) = &mut scaler {
                            scaler.update()?;
                        }
                        opt.zero_grad()?;
                    }
                    tch::no_grad(|| -> Result<(), tch::TchError> {
                        let _ = loss_sum.f_add_(&loss.f_mul_scalar(len)?)?;
                        if let Some((hits, count)) = loss::correct(manifest.loss.kind, &out, &yb)? {
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
                obs.step(s + 1);
                let step_end = StepEnd {
                    epoch,
                    batch: s + 1,
                    step: step + u64::from(boundary),
                    boundary,
                    loss: &loss,
                };
                let control = callbacks.step_ended(&step_end).map_err(at_batch)?;
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
                if finish.is_some() {
                    ended_within = s + 1 < batches;
                    break;
                }
                if every.every_steps > 0
                    && step.is_multiple_of(every.every_steps)
                    && s + 1 < batches
                {
                    let (train_loss, train_accuracy) = running(&loss_sum, &hits_sum, seen, counted)
                        .map_err(|e| fail("reading the training loss", e))?;
                    let mut values = measure(&model, train_loss, train_accuracy)?;
                    if let Some(g) = group {
                        share(g, &shared_keys, &mut values).map_err(at_batch)?;
                    }
                    let mut line = json!({"stage": name, "epoch": epoch, "step": step});
                    for (k, v) in values.iter().filter(|(k, _)| k.starts_with("val_")) {
                        line[k] = json!(v);
                    }
                    log(&line)?;
                    let control = callbacks.validated(&Validation {
                        epoch,
                        step,
                        values: &values,
                        model: &model,
                    });
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
                if let Some(snaps) =
                    snapshots.filter(|sn| s + 1 < batches && sn.due_after_step(step))
                {
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
                    };
                    let sums = Sums {
                        loss: &loss_sum,
                        hits: &hits_sum,
                    };
                    snaps.save(&position, &model, &opt, scaler.as_ref(), sums, device)?;
                    callbacks.snapshot_saved();
                }
            }
            Ok(())
        })?;
        if let Some(g) = group {
            (loss_sum, hits_sum, seen, counted) =
                sum_over_processes(g, device, &loss_sum, &hits_sum, seen, counted)
                    .map_err(|e| fail("summing the epoch's metrics", e))?;
        }
        let (loss, accuracy) = running(&loss_sum, &hits_sum, seen, counted)
            .map_err(|e| fail("reading the epoch's loss", e))?;
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
                let mut values = measure(&model, loss, accuracy)?;
                if let Some(g) = group {
                    share(g, &shared_keys, &mut values)
                        .map_err(|e| fail("sharing the validation", e))?;
                }
                control = callbacks.validated(&Validation {
                    epoch,
                    step,
                    values: &values,
                    model: &model,
                });
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
            lr,
            seconds,
            samples_per_second: seen as f64 / seconds.max(1e-9),
            comm_seconds: group.map(|_| comm.as_secs_f64()),
            steps: step - steps_before,
        };
        // The first callback to end the training decides: at the validation, at the
        // epoch's end, or at the step it ended within the epoch.
        for next in [
            callbacks.epoch_ended(&record),
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
        log(&record.to_json())?;
        obs.epoch_finished(&record);
        last = Some(record);
        // A stopped training needs no snapshot: resumed from the one before, it stops at
        // the same step again.
        if let Control::Finish(why) = control {
            if epoch < spec.epochs || ended_within {
                let within = match ended_within {
                    true => format!(" at step {step}, within"),
                    false => " after".into(),
                };
                obs.notice(&format!(
                    "`{name}` stopped early{within} epoch {epoch} of {}: {why}",
                    spec.epochs
                ));
                stopped = Some((epoch, why));
                break;
            }
        }
        if let Some(snaps) = snapshots.filter(|sn| sn.due_after_epoch(epoch, spec.epochs)) {
            let position = Position {
                epoch: epoch + 1,
                step_in_epoch: 0,
                step,
                seen: 0,
                counted: 0,
                last: last.clone(),
                callbacks: callbacks.state(),
            };
            let sums = Sums {
                loss: &loss_sum,
                hits: &hits_sum,
            };
            snaps.save(&position, &model, &opt, scaler.as_ref(), sums, device)?;
            callbacks.snapshot_saved();
        }
    }
    Ok(Trained {
        model,
        last_epoch: last.expect("epochs ≥ 1"),
        steps: step,
        skipped_steps: scaler.as_ref().map(|s| s.skipped),
        init,
        stopped,
        kept: callbacks.outputs(),
    })
}

/// The metrics of every validation: those `validate` lists and those a monitor watches
/// on the validation split (besides its loss and accuracy, always measured), once each.
fn validation_metrics(manifest: &Manifest, spec: &TrainSpec) -> Vec<Box<dyn Metric>> {
    let watched = manifest
        .monitors(spec)
        .into_iter()
        .map(|(_, m)| &m.value)
        .filter(|m| m.validation && m.metric != "loss" && m.metric != "accuracy")
        .map(|m| m.metric.as_str());
    let mut names: Vec<&str> = spec
        .validate
        .metrics
        .iter()
        .map(|m| m.value.as_str())
        .collect();
    for name in watched {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    // `check` refuses names that are not metrics.
    names.into_iter().filter_map(metrics::parse).collect()
}

/// The names of the values of every validation (`Validation::values`), in order.
fn validation_keys(
    manifest: &Manifest,
    val_metrics: &[Box<dyn Metric>],
    validation_split: bool,
) -> Vec<String> {
    // The losses whose predictions count as hits (`loss::correct`) have an accuracy.
    let accuracy = !manifest.loss.kind.is_regression();
    let mut keys = vec!["loss".to_string()];
    if accuracy {
        keys.push("accuracy".into());
    }
    if validation_split {
        keys.push("val_loss".into());
        if accuracy {
            keys.push("val_accuracy".into());
        }
        keys.extend(val_metrics.iter().map(|m| format!("val_{}", m.name())));
    }
    keys
}

/// Rank 0's `values` for every process of `group`: rank 0 alone validates, and within
/// an epoch each process has only its own share's training loss; every process then
/// decides the same (early stopping, the learning rate on a plateau).
fn share(
    group: &ProcessGroup,
    keys: &[String],
    values: &mut BTreeMap<String, f64>,
) -> Result<(), tch::TchError> {
    let mine: Vec<f64> = keys
        .iter()
        .map(|k| values.get(k).copied().unwrap_or(f64::NAN))
        .collect();
    let mut t = [Tensor::f_from_slice(&mine)?.f_to_device(group.device)?];
    group.broadcast_all(&mut t, 0)?;
    let shared = Vec::<f64>::try_from(&t[0].f_to_device(Device::Cpu)?)?;
    values.extend(keys.iter().cloned().zip(shared));
    Ok(())
}

/// The mean training loss and the accuracy over the samples of the epoch so far.
fn running(
    loss_sum: &Tensor,
    hits_sum: &Tensor,
    seen: i64,
    counted: i64,
) -> Result<(f64, Option<f64>), tch::TchError> {
    let loss = loss_sum.f_double_value(&[])? / seen as f64;
    let accuracy = (counted > 0)
        .then(|| hits_sum.f_int64_value(&[]))
        .transpose()?
        .map(|h| h as f64 / counted as f64);
    Ok((loss, accuracy))
}

/// `control`, agreed by every process of `group` when there is one.
fn decide(
    group: Option<&ProcessGroup>,
    control: Control,
    name: &str,
) -> Result<Control, tch::TchError> {
    match group {
        Some(g) => agree(g, control, name),
        None => Ok(control),
    }
}

/// One decision for every process: any process's failure fails them all (the first
/// process's own diagnostic where it has one), else rank 0's decision to finish (rank 0
/// alone validates) or to go on.
fn agree(group: &ProcessGroup, control: Control, name: &str) -> Result<Control, tch::TchError> {
    let code = match &control {
        Control::Continue => 0.0,
        Control::Finish(_) => 1.0,
        Control::Fail(_) => 2.0,
    };
    let codes = group.gather_values(code)?;
    Ok(match (control, codes.contains(&2.0), codes[0] == 1.0) {
        (Control::Fail(d), _, _) => Control::Fail(d),
        (_, true, _) => Control::Fail(Box::new(Diagnostic::error(
            "pipeline::train::diverged",
            format!("stage `{name}`: another process's training loss stopped being finite"),
        ))),
        (Control::Finish(why), false, true) => Control::Finish(why),
        (_, false, true) => Control::Finish("rank 0 stopped the training".into()),
        (_, false, false) => Control::Continue,
    })
}

/// The batch size and the number of batches per epoch for `n` samples per process; an
/// error when there would be no batch, or a batch of one sample for batch-norm.
fn batch_plan(
    manifest: &Manifest,
    stage: &StageSpec,
    spec: &TrainSpec,
    n: u64,
) -> Result<(u64, u64), Diagnostic> {
    let name = stage.name();
    let (batch, batches) = batches_per_epoch(n, spec.batch_size, spec.drop_last);
    if batches == 0 {
        return Err(Diagnostic::error(
            "pipeline::train::no_steps",
            format!(
                "stage `{name}`: the training split has {n} samples, fewer than one batch of {}",
                spec.batch_size
            ),
        )
        .label_opt(stage.name.span, "trains on no batch")
        .help("lower `batch-size`, or turn off `drop-last`"));
    }
    let layers = manifest.model.layers();
    let batch_norm = layers
        .iter()
        .find(|l| matches!(l.layer, Layer::BatchNorm(_)));
    if let Some(bn) = batch_norm {
        if batch == 1 || (!spec.drop_last && n % batch == 1) {
            // libtorch would compute a variance from one sample: NaN running statistics.
            return Err(Diagnostic::error(
                "pipeline::train::batch_of_one",
                format!("stage `{name}`: a training batch would hold one sample ({n} samples in batches of {batch}), and batch-norm needs at least two"),
            )
            .label_opt(stage.name.span, "this stage")
            .label_opt(bn.span, "batch-norm")
            .help("add `drop-last #true` to the stage, or change `batch-size`"));
        }
    }
    Ok((batch, batches))
}

/// The optimizer and, under `zero1`, each process's parameters (shallow handles, gathered
/// once), which their owner broadcasts after its optimizer step: each process updates
/// (and keeps optimizer state for) its own share of the parameters only.
fn optimizer_for(
    manifest: &Manifest,
    model: &Model,
    group: Option<&ProcessGroup>,
) -> Result<(Optimizer, Vec<Vec<Tensor>>), Diagnostic> {
    let (Some(g), Strategy::Zero1) = (group, manifest.accelerator.distributed.strategy) else {
        return Ok((Optimizer::new(&manifest.optimizer, &model.vs)?, Vec::new()));
    };
    let params = crate::optimizer::trainable(&model.vs);
    let owners = owners(&params, g.world);
    let opt = Optimizer::sharded(&manifest.optimizer, &model.vs, |i| owners[i] == g.rank)?;
    let shards = (0..g.world)
        .map(|rank| {
            params
                .iter()
                .zip(&owners)
                .filter(|(_, owner)| **owner == rank)
                .map(|(p, _)| p.shallow_clone())
                .collect()
        })
        .collect();
    Ok((opt, shards))
}

/// How the training samples are dealt to the processes (one process takes them all).
fn sampler_for(
    data: &Dataset,
    accelerator: &AcceleratorSpec,
    name: &str,
) -> Result<Sampler, Diagnostic> {
    let distributed = &accelerator.distributed;
    Ok(match distributed.bucket_by {
        Some(column) if distributed.bucketed => {
            let keys = bucket_keys(data, column as i64).map_err(|why| {
                Diagnostic::error(
                    "pipeline::accelerator::bad_bucket_key",
                    format!("stage `{name}`: {why}"),
                )
                .label_opt(accelerator.span("bucket-by"), "this feature")
                .help("`bucket-by` is an index into a sample's flattened features, from 0")
            })?;
            Sampler::bucketed(
                &data.splits.train,
                |i| keys[i],
                distributed.buckets as usize,
                distributed.drop_remainder,
            )
        }
        _ => Sampler::Distributed {
            drop: distributed.drop_remainder,
        },
    })
}

/// `restored` if every process of `group` holds a snapshot of the same step, else none:
/// a process killed while saving leaves its snapshot one step behind the others'.
fn agree_on_snapshots(
    group: &ProcessGroup,
    restored: Option<Result<Restored, String>>,
    name: &str,
    obs: &mut dyn Observer,
) -> Result<Option<Result<Restored, String>>, tch::TchError> {
    let mine = match &restored {
        Some(Ok(r)) => r.position.step as f64,
        _ => -1.0,
    };
    let steps = group.gather_values(mine)?;
    if steps.iter().all(|s| *s == steps[0]) {
        return Ok(restored);
    }
    let steps: Vec<String> = steps
        .iter()
        .map(|s| match *s < 0.0 {
            true => "none".into(),
            false => format!("step {s}"),
        })
        .collect();
    obs.notice(&format!(
        "warning: the processes' snapshots of `{name}` differ ({}); training from the start",
        steps.join(", ")
    ));
    Ok(None)
}

/// The epoch's loss and hit sums and sample counts over every process's shard.
fn sum_over_processes(
    group: &ProcessGroup,
    device: Device,
    loss_sum: &Tensor,
    hits_sum: &Tensor,
    seen: i64,
    counted: i64,
) -> Result<(Tensor, Tensor, i64, i64), tch::TchError> {
    let totals = [
        loss_sum.f_double_value(&[])?,
        hits_sum.f_int64_value(&[])? as f64,
        seen as f64,
        counted as f64,
    ];
    let mut t = [Tensor::f_from_slice(&totals)?.f_to_device(group.device)?];
    group.all_reduce_sum(&mut t)?;
    let totals = Vec::<f64>::try_from(&t[0].f_to_device(Device::Cpu)?)?;
    Ok((
        Tensor::from(totals[0]).f_to_device(device)?,
        Tensor::from(totals[1] as i64).f_to_device(device)?,
        totals[2] as i64,
        totals[3] as i64,
    ))
}

/// The value of feature `column` of every sample, for the bucketed sampler.
fn bucket_keys(data: &Dataset, column: i64) -> Result<Vec<f64>, String> {
    if data.images.is_some() {
        return Err(format!(
            "`bucket-by {column}` reads a feature column, and image data has none"
        ));
    }
    if let Some(stream) = &data.stream {
        let width: i64 = stream.sample_shape().iter().product();
        if column >= width {
            return Err(format!(
                "`bucket-by {column}`: a sample has {width} features"
            ));
        }
        return stream.column(column as usize, &data.rows);
    }
    let n = data.features.size()[0];
    let flat = data.features.reshape([n, -1]);
    let width = flat.size()[1];
    if column >= width {
        return Err(format!(
            "`bucket-by {column}`: a sample has {width} features"
        ));
    }
    let keys = flat
        .select(1, column)
        .to_device(tch::Device::Cpu)
        .to_kind(Kind::Double);
    Vec::<f64>::try_from(&keys).map_err(|e| e.to_string())
}

/// The process that owns each parameter under `zero1`: the largest parameters first, each
/// to the process with the fewest elements so far, so the optimizer state divides evenly.
pub fn owners(params: &[Tensor], world: usize) -> Vec<usize> {
    let mut by_size: Vec<usize> = (0..params.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(params[i].numel()));
    let mut load = vec![0usize; world];
    let mut owner = vec![0; params.len()];
    for i in by_size {
        let least = (0..world).min_by_key(|&r| (load[r], r)).unwrap_or(0);
        owner[i] = least;
        load[least] += params[i].numel();
    }
    owner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero1_divides_the_parameters_evenly() {
        let params: Vec<Tensor> = [100, 10, 50, 40]
            .iter()
            .map(|&n| Tensor::zeros([n], (tch::Kind::Float, tch::Device::Cpu)))
            .collect();
        assert_eq!(owners(&params, 2), [0, 1, 1, 1], "100 elements each");
        assert_eq!(owners(&params, 1), [0, 0, 0, 0]);
    }
}
