//! The training loop as an object. [`Layout`] is what a `train` stage is laid out with
//! before its first step (the model, the optimizer, the batches, the schedule);
//! [`Trainer`] holds that, the callbacks and the device-side sums, and where the training
//! stands. Its methods are the loop's parts: an epoch ([`Trainer::epoch`]), a batch
//! ([`Trainer::batch`]: forward and backward in [`Trainer::compute`], the optimizer step
//! at the rate [`Trainer::rate`] asks the schedule for), a validation
//! ([`Trainer::validate`]), a snapshot ([`Trainer::snapshot`], at the [`Position`] that
//! [`Trainer::position`] builds) and an epoch's end ([`Trainer::end_epoch`]). What a
//! callback decides ([`Control`]) is settled in one place, [`settle`].

use super::plan::{batch_plan, optimizer_for, sampler_for};
use super::processes::{
    agree, agree_on_snapshots, common_snapshot, decide, sum_over_processes, sum_values,
};
use super::rates::Rates;
use super::reshard;
use super::step_log::{self, StepLog, Totals};
use super::update::optimizer_step;
use super::validation::{share, Validator};
use super::{failure, Trained};
use crate::callbacks::{
    At, Callbacks, Control, Out, RunEnd, RunStart, Setup, Snapshot, StepEnd, Validation,
    CHECK_EVERY,
};
use crate::data::Loader;
use crate::finetune;
use crate::loss;
use crate::model::Model;
use crate::numerics::Scaler;
use crate::observer::{EpochRecord, Observer};
use crate::optimizer::Optimizer;
use crate::process_group::ProcessGroup;
use crate::session::Session;
use crate::snapshot::{Position, Restored, Saved, Snapshots, Sums};
use manifests::{Diagnostic, StageSpec, TrainSpec};
use pipeline_core::finetune::InitMatch;
use pipeline_core::rng::Rng;
use pipeline_core::sampler::Sampler;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tch::{Device, Kind, TchError, Tensor};

/// What a training is laid out with before its callbacks start.
pub(super) struct Layout {
    /// Fresh (or a copy of the starting weights), its `init` loaded, frozen as the stage
    /// says.
    model: Model,
    /// How the `init` file met the model, when there was one.
    init: Option<InitMatch>,
    opt: Optimizer,
    /// Under `zero1`, the weights each process owns.
    shards: Vec<Vec<Tensor>>,
    /// The loss scaler (`16-mixed`).
    scaler: Option<Scaler>,
    sampler: Sampler,
    /// Samples this process trains on each epoch.
    samples: u64,
    /// The batch size, batches per epoch, batches per optimizer step, and optimizer steps
    /// per epoch.
    pub batch: u64,
    pub batches: u64,
    accumulate: u64,
    steps: u64,
    /// The learning rate of every step.
    schedule: Rates,
}

impl Layout {
    /// The model (a copy of `start` when given), the optimizer, how the samples are dealt
    /// to this process and batched, and the schedule, as `stage` says.
    pub(super) fn new(
        session: &Session,
        stage: &StageSpec,
        spec: &TrainSpec,
        start: Option<&Model>,
        obs: &mut dyn Observer,
    ) -> Result<Layout, Diagnostic> {
        let (manifest, data, device) = (session.manifest, &session.data, session.device);
        let accelerator = &manifest.accelerator;
        let name = stage.name();
        let fail = |what: &str, e: TchError| failure(manifest, name, what, e);
        tch::manual_seed(manifest.seed as i64);
        let numerics = &session.numerics;
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
        let (opt, shards) = optimizer_for(manifest, &model, group, session.strategy)?;
        let scaler = match accelerator.scales_loss() {
            true => Some(Scaler::new(device).map_err(|e| fail("setting up the loss scaler", e))?),
            false => None,
        };
        // Under `ddp` and `zero1`, this process trains on every world-th sample of each
        // epoch's order; every epoch deals it the same number of samples.
        let (rank, world) = group.map_or((0, 1), |g| (g.rank, g.world));
        let sampler = sampler_for(data, accelerator, name)?;
        let samples = sampler
            .epoch(
                &data.splits.train,
                manifest.seed,
                1,
                spec.shuffle,
                spec.batch_size as usize,
                rank,
                world,
            )
            .len() as u64;
        let (batch, batches) = batch_plan(manifest, stage, spec, samples)?;
        // An optimizer step every `accumulate` batches, and one at the end of each epoch.
        let accumulate = accelerator.accumulate.max(1);
        let steps = batches.div_ceil(accumulate);
        let schedule = Rates::of(manifest, steps, spec.epochs)?;
        Ok(Layout {
            model,
            init,
            opt,
            shards,
            scaler,
            sampler,
            samples,
            batch,
            batches,
            accumulate,
            steps,
            schedule,
        })
    }
}

/// Whether the epoch goes on after a batch.
enum Flow {
    Continue,
    Break,
}

/// What a callback decided, settled: `Err` when it failed the training, the reason when
/// it ends it, `None` when the training goes on.
fn settle(control: Control) -> Result<Option<String>, Diagnostic> {
    match control {
        Control::Continue => Ok(None),
        Control::Finish(why) => Ok(Some(why)),
        Control::Fail(d) => Err(*d),
    }
}

/// Where an epoch stands.
struct Epoch {
    number: u64,
    /// Samples trained on, and counted for accuracy, in this epoch so far.
    seen: i64,
    counted: i64,
    /// The learning rate of the last optimizer step.
    lr: f64,
    /// Time spent reducing gradients among the processes.
    comm: Duration,
    /// The gradients' norm at the last optimizer step, when it was taken.
    grad_norm: Option<Tensor>,
    /// Optimizer steps taken before the epoch.
    steps_before: u64,
    /// A callback ends the training after the step it decided at, for this reason.
    finish: Option<String>,
    /// Whether the training ended before the epoch's last batch.
    ended_within: bool,
    /// The values of a validation within the epoch that ended the training.
    validated_at_stop: Option<BTreeMap<String, f64>>,
    started: Instant,
}

/// The batch a failure happened at, as a message says it (`epoch 2, batch 7`): put into
/// words only when there is a failure, not at every step.
#[derive(Clone, Copy)]
struct BatchAt {
    epoch: u64,
    batch: u64,
}

impl std::fmt::Display for BatchAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "epoch {}, batch {}", self.epoch, self.batch)
    }
}

/// How a training stopped before its last step: the epoch, why, and whether within it.
type Stop = (u64, String, bool);

/// A training in progress.
pub(super) struct Trainer<'a, 'o> {
    session: &'a Session<'a>,
    stage: &'a StageSpec,
    spec: &'a TrainSpec,
    layout: Layout,
    validator: Validator<'a>,
    callbacks: Callbacks<'a>,
    out: Out<'o>,
    step_log: StepLog,
    /// The training samples in this epoch's order.
    order: Vec<usize>,
    /// The epoch's loss (weighted by samples) and correct predictions so far, on the
    /// device: read once an epoch, so that the loop never waits on the device.
    loss_sum: Tensor,
    hits_sum: Tensor,
    /// Optimizer steps taken in all.
    step: u64,
    /// The record of the last finished epoch.
    last: Option<EpochRecord>,
    stopped: Option<Stop>,
    /// When the processes next ask each other whether a signal came.
    signal_checks: SignalChecks,
    /// Whether it went on from another global batch's snapshot ([`Position::reordered`]).
    reordered: bool,
}

/// The processes of a distributed training ask each other whether a signal came
/// (`crate::preemption`) at every epoch's end, with the epoch's sums, and within an epoch
/// about once a second, not at every step (a collective each step would double the
/// communication of a small model's): at optimizer step `next`, which rank 0 sets from
/// how long its steps took since the last asking (`last`).
struct SignalChecks {
    next: u64,
    last: (u64, Instant),
}

/// Zeroed sums of an epoch's loss and correct predictions.
fn zero_sums(device: Device) -> Result<(Tensor, Tensor), TchError> {
    Ok((
        Tensor::f_zeros([], (Kind::Double, device))?,
        Tensor::f_zeros([], (Kind::Int64, device))?,
    ))
}

/// The state a training resumes from: the last of its snapshots, else the final state of
/// the shorter training it extends; an `Err` says why one found cannot be used (its
/// callbacks' part is restored into `callbacks`, its rates' into `rates`).
fn restorable(
    snapshot: Option<Result<Restored, String>>,
    saved: &Saved,
    spec: &TrainSpec,
    batches: u64,
    callbacks: &mut Callbacks,
    rates: &mut Rates,
) -> Option<Result<Restored, String>> {
    let extended = |(index, tensors)| crate::snapshot::load_stored(index, tensors);
    snapshot
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
            .and_then(|r| rates.restore(r.position.schedule_state()).map(|()| r))
        })
}

impl<'a, 'o> Trainer<'a, 'o> {
    /// A training laid out as `layout`, its callbacks started as `setup` says, resumed
    /// from what `saved` holds when it can be: the trainer, the position it starts at,
    /// and whether that is a resumption.
    pub(super) fn new(
        session: &'a Session<'a>,
        stage: &'a StageSpec,
        spec: &'a TrainSpec,
        mut layout: Layout,
        setup: &Setup<'a>,
        saved: &Saved,
        mut out: Out<'o>,
    ) -> Result<(Self, Position, bool), Diagnostic> {
        let (manifest, device) = (session.manifest, session.device);
        let name = stage.name();
        let fail = |what: &str, e: TchError| failure(manifest, name, what, e);
        let group = session.group.as_ref();
        let validator = Validator::new(session, stage, spec, setup.rank)?;
        let mut callbacks = Callbacks::for_stage(setup)?;
        if let Some(g) = group {
            // Every process starts from rank 0's weights (and batch-norm statistics).
            let mut named: Vec<(String, Tensor)> =
                layout.model.vs.variables().into_iter().collect();
            named.sort_by(|a, b| a.0.cmp(&b.0));
            let mut vars: Vec<Tensor> = named.into_iter().map(|(_, t)| t).collect();
            g.broadcast_all(&mut vars, 0)
                .map_err(|e| fail("sharing the initial weights", e))?;
        }
        let (loss_sum, hits_sum) = zero_sums(device).map_err(|e| fail("setting up", e))?;
        let mut at = Position {
            epoch: 1,
            step_in_epoch: 0,
            step: 0,
            seen: 0,
            counted: 0,
            last: None,
            callbacks: Default::default(),
            step_log: None,
            schedule: None,
            reordered: false,
        };
        let rates = &mut layout.schedule;
        let snapshot = match (group, saved.snapshots) {
            (Some(g), Some(s)) => common_snapshot(g, s, name, out.obs)
                .map_err(|e| fail("comparing the processes' snapshots", e))?,
            (_, s) => s.and_then(Snapshots::load),
        };
        // None of its own: those it left laid out otherwise, if any.
        let snapshot = match saved.snapshots {
            Some(_) => {
                let params = crate::optimizer::trainable(&layout.model.vs);
                let now = reshard::Now {
                    group,
                    strategy: session.strategy,
                    params: &params,
                    batch: layout.batch,
                    accumulate: layout.accumulate,
                    steps: layout.steps,
                    sampler: &layout.sampler,
                    samples: session.data.splits.train.len(),
                    drop: manifest.accelerator.distributed.drop_remainder,
                };
                reshard::or_elsewhere(snapshot, saved, &now, name, out.obs)
                    .map_err(|e| fail("comparing the processes' snapshots", e))?
            }
            None => snapshot,
        };
        let mut restored = restorable(snapshot, saved, spec, layout.batches, &mut callbacks, rates);
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
                    .apply(
                        &mut layout.model,
                        &mut layout.opt,
                        layout.scaler.as_mut(),
                        sums,
                        device,
                    )
                    .map_err(|e| fail("resuming from the snapshot", e))?;
                at = restored.position;
            }
            Some(Err(why)) => {
                // Callbacks and rates that took part of the snapshot's state start afresh.
                callbacks = Callbacks::for_stage(setup)?;
                layout.schedule.restart();
                out.obs.notice(&format!(
                    "warning: the snapshot of `{name}` is unusable ({why}); training from the start"
                ))
            }
            None => {}
        }
        let step_log = StepLog::new(
            manifest.logging.log_every_steps,
            at.step_log.take(),
            at.seen,
            setup.world,
        );
        let start = RunStart {
            batch: layout.batch,
            accumulate: layout.accumulate,
            steps: layout.steps,
            resumed: resumed.then_some(&at),
        };
        callbacks.run_started(&start, &mut out);
        let trainer = Trainer {
            session,
            stage,
            spec,
            validator,
            callbacks,
            out,
            step_log,
            order: session.data.splits.train.clone(),
            loss_sum,
            hits_sum,
            step: at.step,
            last: at.last.take(),
            stopped: None,
            // The first asking after one step, which says how long steps take.
            signal_checks: SignalChecks {
                next: at.step + 1,
                last: (at.step, Instant::now()),
            },
            reordered: at.reordered,
            layout,
        };
        Ok((trainer, at, resumed))
    }

    fn group(&self) -> Option<&'a ProcessGroup> {
        self.session.group.as_ref()
    }

    /// A failure of libtorch while doing `what` (built into words only then).
    fn fail(&self, what: impl std::fmt::Display, e: TchError) -> Diagnostic {
        failure(
            self.session.manifest,
            self.stage.name(),
            &what.to_string(),
            e,
        )
    }

    /// The epochs from `at` on, until the last or until a callback ends the training; the
    /// callbacks hear of an error that ends it, and of its end.
    pub(super) fn run(mut self, at: Position, resumed: bool) -> Result<Trained, Diagnostic> {
        let result = (|| -> Result<(), Diagnostic> {
            for epoch in at.epoch..=self.spec.epochs {
                self.stopped = self.epoch(epoch, &at)?;
                if self.stopped.is_some() {
                    break;
                }
            }
            Ok(())
        })();
        if let Err(error) = &result {
            self.callbacks.failed(error, &mut self.out);
        }
        result?;
        let end = RunEnd {
            step: self.step,
            stopped: (self.stopped.as_ref()).map(|(e, why, within)| (*e, why.as_str(), *within)),
        };
        self.callbacks.run_ended(&end, &mut self.out);
        Ok(Trained {
            last_epoch: self.last.expect("epochs ≥ 1"),
            steps: self.step,
            skipped_steps: self.layout.scaler.as_ref().map(|s| s.skipped),
            init: self.layout.init,
            stopped: self.stopped.map(|(epoch, why, _)| (epoch, why)),
            resumed_at: resumed.then_some(at.epoch),
            reordered: self.reordered,
            kept: self.callbacks.outputs(),
            model: self.layout.model,
        })
    }

    /// Epoch `number` (from the batch `at` stands at, when it is `at`'s), its batches
    /// assembled ahead by the data's workers; how the training stopped within or at its
    /// end, if it did.
    fn epoch(&mut self, number: u64, at: &Position) -> Result<Option<Stop>, Diagnostic> {
        let (session, spec) = (self.session, self.spec);
        let seed = session.manifest.seed;
        self.callbacks.epoch_started(number, &mut self.out);
        let started = Instant::now();
        if spec.shuffle {
            self.order.copy_from_slice(&session.data.splits.train);
            Rng::derived(seed, number).shuffle(&mut self.order);
        }
        let (rank, world) = self.group().map_or((0, 1), |g| (g.rank, g.world));
        let (batch, batches) = (self.layout.batch, self.layout.batches);
        let shard = (self.layout.sampler).epoch(
            &self.order,
            seed,
            number,
            spec.shuffle,
            batch as usize,
            rank,
            world,
        );
        let resumed = number == at.epoch;
        let first = if resumed { at.step_in_epoch } else { 0 };
        let (seen, counted) = if resumed {
            (at.seen, at.counted)
        } else {
            (0, 0)
        };
        if first == 0 {
            (self.loss_sum, self.hits_sum) =
                zero_sums(session.device).map_err(|e| self.fail("setting up", e))?;
            self.step_log.epoch_started();
        }
        let mut ep = Epoch {
            number,
            seen,
            counted,
            lr: session.manifest.optimizer.lr,
            comm: Duration::ZERO,
            grad_norm: None,
            steps_before: self.step,
            finish: None,
            ended_within: false,
            validated_at_stop: None,
            started,
        };
        std::thread::scope(|scope| -> Result<(), Diagnostic> {
            let range = first as usize..batches as usize;
            let loader = Loader::start(
                scope,
                &session.data,
                &shard,
                batch as usize,
                range,
                Some(number),
            );
            let mut loader = loader.map_err(|e| {
                self.fail(format_args!("epoch {number}: starting the data loader"), e)
            })?;
            for s in first..batches {
                if let Flow::Break = self.batch(&mut ep, &mut loader, s)? {
                    break;
                }
            }
            Ok(())
        })?;
        self.end_epoch(ep)
    }

    /// Batch `s` of the epoch: trained on (an optimizer step at the end of an
    /// accumulation window), then the callbacks' decisions, the step's record, a
    /// validation and a snapshot where they are due.
    fn batch(&mut self, ep: &mut Epoch, loader: &mut Loader, s: u64) -> Result<Flow, Diagnostic> {
        let (batch, batches) = (self.layout.batch, self.layout.batches);
        let begin = (s * batch) as i64;
        let len = (batch as i64).min(self.layout.samples as i64 - begin);
        let boundary = (s + 1).is_multiple_of(self.layout.accumulate) || s + 1 == batches;
        let at = BatchAt {
            epoch: ep.number,
            batch: s + 1,
        };
        let loss = (self.compute(ep, loader, s, len, boundary)).map_err(|e| self.fail(at, e))?;
        ep.seen += len;
        let step_end = StepEnd {
            epoch: ep.number,
            batch: s + 1,
            step: self.step + u64::from(boundary),
            boundary,
            lr: ep.lr,
            loss: &loss,
        };
        let control = self.callbacks.step_ended(&step_end, &mut self.out);
        let control = control.map_err(|e| self.fail(at, e))?;
        let control = match self.group() {
            Some(g) if boundary && (self.step + 1).is_multiple_of(CHECK_EVERY) => {
                agree(g, control, self.stage.name()).map_err(|e| self.fail(at, e))?
            }
            _ => control,
        };
        if let Some(why) = settle(control)? {
            ep.finish.get_or_insert(why);
        }
        if !boundary {
            return Ok(Flow::Continue);
        }
        self.step += 1;
        if self.step_log.due(self.step) {
            self.log_step(ep, at)?;
        }
        if ep.finish.is_some() {
            ep.ended_within = s + 1 < batches;
            return Ok(Flow::Break);
        }
        let every = self.spec.validate.every_steps;
        if every > 0 && self.step.is_multiple_of(every) && s + 1 < batches {
            if let Flow::Break = self.validate_within(ep, s, at)? {
                return Ok(Flow::Break);
            }
        }
        if s + 1 < batches && self.signalled().map_err(|e| self.fail(at, e))? {
            let position = self.position(ep.number, s + 1, ep.seen, ep.counted);
            return Err(self.stop_for_signal(At::Step(self.step), &position));
        }
        if s + 1 < batches && self.callbacks.snapshot_due(At::Step(self.step)) {
            return self.snapshot_within(ep, s, at);
        }
        Ok(Flow::Continue)
    }

    /// Whether a signal asked the run to stop (`crate::preemption`), in any process:
    /// the processes ask each other at the same steps ([`SignalChecks`]), so they stop at
    /// the same one.
    fn signalled(&mut self) -> Result<bool, TchError> {
        let mine = crate::preemption::received().is_some();
        let group = self.group().filter(|_| crate::preemption::installed());
        let Some(g) = group else { return Ok(mine) };
        if self.step < self.signal_checks.next {
            return Ok(false);
        }
        // Rank 0 proposes the steps to the next asking: about a second of them.
        let (at, when) = self.signal_checks.last;
        let per_step = when.elapsed().as_secs_f64() / (self.step.saturating_sub(at)).max(1) as f64;
        let proposed = match g.rank {
            0 => (1.0 / per_step.max(1e-6)).clamp(1.0, 1000.0).floor(),
            _ => 0.0,
        };
        let [asked, steps] = sum_values(g, [f64::from(u8::from(mine)), proposed])?;
        self.signal_checks = SignalChecks {
            next: self.step + steps.max(1.0) as u64,
            last: (self.step, Instant::now()),
        };
        Ok(asked > 0.0)
    }

    /// Stops the training for a signal at `at`: its snapshot written (every process its
    /// own, then they wait for each other, so that none is cut short by the others'
    /// ending), and the error that ends the run.
    fn stop_for_signal(&mut self, at: At, position: &Position) -> Diagnostic {
        let signal =
            crate::preemption::received().map_or("a signal".into(), crate::preemption::name);
        let name = self.stage.name().to_string();
        let written = self.snapshot(at, position, true);
        if let Some(g) = self.group() {
            if let Err(e) = sum_values(g, [0.0]) {
                return self.fail("waiting for the other processes' snapshots", e);
            }
        }
        let step = position.step;
        match written {
            Ok(true) => Diagnostic::error(
                pipeline_core::launch::STOPPED,
                format!("stage `{name}` stopped at step {step} on {signal}: its snapshot is written"),
            )
            .help("run the same command again: it resumes from the snapshot"),
            Ok(false) => Diagnostic::error(
                pipeline_core::launch::STOPPED,
                format!("stage `{name}` stopped at step {step} on {signal}, without a snapshot: the run has no cache to keep one in"),
            )
            .help("run with a cache (without `--no-cache`) to resume a stopped training"),
            Err(d) => d,
        }
    }

    /// The learning rate of the next optimizer step: the schedule's (reduce-on-plateau's
    /// decisions so far included).
    fn rate(&self) -> Result<f64, TchError> {
        self.layout.schedule.lr_at(self.step)
    }

    /// Forward, loss and backward on the next batch (`len` samples), and the optimizer
    /// step at a `boundary`; the loss, its sum and the correct predictions added to the
    /// epoch's on the device.
    fn compute(
        &mut self,
        ep: &mut Epoch,
        loader: &mut Loader,
        s: u64,
        len: i64,
        boundary: bool,
    ) -> Result<Tensor, TchError> {
        let session = self.session;
        let distributed = &session.manifest.accelerator.distributed;
        let sync_batch_norm = self.group().filter(|_| distributed.sync_batch_norm);
        let (xb, yb) = loader.next_batch()?;
        let model = &self.layout.model;
        let (out, loss) = session.numerics.autocast(|| {
            let out = model.forward_synced(&xb, true, sync_batch_norm)?;
            let loss = session.loss.compute(&out, &yb)?;
            Ok((out, loss))
        })?;
        // Each micro-batch weighs by its samples, so that the step's gradient is the mean
        // over the union of the accumulated micro-batches (a short last batch counts for
        // what it holds).
        let mut backward = match self.layout.accumulate {
            1 => loss.shallow_clone(),
            _ => loss.f_div_scalar(self.window_samples(s) as f64 / len as f64)?,
        };
        if let Some(scaler) = &self.layout.scaler {
            backward = scaler.scale(&backward)?;
        }
        backward.f_backward()?;
        if boundary {
            self.optimizer_step(ep)?;
        }
        let target = session.manifest.loss.kind.target();
        tch::no_grad(|| -> Result<(), TchError> {
            let _ = self.loss_sum.f_add_(&loss.f_mul_scalar(len)?)?;
            if let Some((hits, count)) = loss::correct(target, &out, &yb)? {
                let _ = self.hits_sum.f_add_(&hits)?;
                ep.counted += count;
            }
            Ok(())
        })?;
        Ok(loss)
    }

    /// The samples of the accumulation window that batch `s` belongs to.
    fn window_samples(&self, s: u64) -> u64 {
        let (batch, batches, accumulate) = (
            self.layout.batch,
            self.layout.batches,
            self.layout.accumulate,
        );
        let start = s / accumulate * accumulate;
        let end = (start + accumulate).min(batches);
        (end * batch).min(self.layout.samples) - start * batch
    }

    /// The optimizer step on the gradients accumulated since the last, at the schedule's
    /// rate.
    fn optimizer_step(&mut self, ep: &mut Epoch) -> Result<(), TchError> {
        let session = self.session;
        let manifest = session.manifest;
        let accelerator = &manifest.accelerator;
        ep.lr = self.rate()?;
        self.layout.opt.set_lr(ep.lr);
        let stepped = optimizer_step(
            &mut self.layout.opt,
            self.layout.scaler.as_mut(),
            &mut self.layout.shards,
            session.group.as_ref().map(|g| (g, session.strategy)),
            Some(&accelerator.clipping).filter(|c| c.enabled()),
            (accelerator.distributed.bucket_mb * 1e6) as usize,
            manifest.logging.grad_norm && self.step_log.due(self.step + 1),
        )?;
        ep.comm += stepped.comm;
        ep.grad_norm = stepped.grad_norm;
        Ok(())
    }

    /// The step's record (`logging { log-every-steps N }`), told to the callbacks.
    fn log_step(&mut self, ep: &Epoch, at: BatchAt) -> Result<(), Diagnostic> {
        let due = step_log::At {
            stage: self.stage.name(),
            epoch: ep.number,
            step: self.step,
            lr: ep.lr,
            loss_sum: &self.loss_sum,
            hits_sum: &self.hits_sum,
            seen: ep.seen,
            counted: ep.counted,
            grad_norm: ep.grad_norm.as_ref(),
            loss_scale: self.layout.scaler.as_ref().map(Scaler::current_tensor),
        };
        let record = (self.step_log.record(&due, self.group())).map_err(|e| self.fail(at, e))?;
        // A record decides nothing but a failure.
        settle(self.callbacks.step_logged(&record, &mut self.out))?;
        Ok(())
    }

    /// Measures the validation split after the training loss and accuracy `train`, with
    /// rank 0's values shared with every process (a failure to share is one while doing
    /// `what`), and tells the callbacks: the values, and what they decided (not yet
    /// agreed among the processes).
    fn validate(
        &mut self,
        epoch: u64,
        within_epoch: bool,
        (loss, accuracy): (f64, Option<f64>),
        what: impl std::fmt::Display,
    ) -> Result<(BTreeMap<String, f64>, Control), Diagnostic> {
        let mut values = (self.validator).measure(&self.layout.model, loss, accuracy)?;
        if let Some(g) = self.group() {
            share(g, &self.validator.keys, &mut values).map_err(|e| self.fail(what, e))?;
        }
        self.layout.schedule.validated(&values);
        let validation = Validation {
            epoch,
            step: self.step,
            within_epoch,
            values: &values,
            model: &self.layout.model,
        };
        let control = self.callbacks.validated(&validation, &mut self.out);
        Ok((values, control))
    }

    /// A validation within the epoch (`validate every-steps=N`); it ends the training
    /// where a callback decides so.
    fn validate_within(&mut self, ep: &mut Epoch, s: u64, at: BatchAt) -> Result<Flow, Diagnostic> {
        let totals = Totals::read(&self.loss_sum, &self.hits_sum, ep.seen, ep.counted)
            .map_err(|e| self.fail("reading the training loss", e))?;
        let (values, control) = self.validate(ep.number, true, totals.mean(), at)?;
        let control = decide(self.group(), control, self.stage.name());
        let control = control.map_err(|e| self.fail(at, e))?;
        Ok(match settle(control)? {
            None => Flow::Continue,
            Some(why) => {
                ep.finish = Some(why);
                ep.validated_at_stop = Some(values);
                ep.ended_within = s + 1 < self.layout.batches;
                Flow::Break
            }
        })
    }

    /// A snapshot after batch `s`, unless a callback ends the training first.
    fn snapshot_within(&mut self, ep: &mut Epoch, s: u64, at: BatchAt) -> Result<Flow, Diagnostic> {
        // Every process saves at the same steps: they agree here too.
        let control = self.callbacks.before_snapshot();
        let control = decide(self.group(), control, self.stage.name());
        if let Some(why) = settle(control.map_err(|e| self.fail(at, e))?)? {
            ep.finish = Some(why);
            ep.ended_within = true;
            return Ok(Flow::Break);
        }
        let position = self.position(ep.number, s + 1, ep.seen, ep.counted);
        self.snapshot(At::Step(self.step), &position, false)?;
        Ok(Flow::Continue)
    }

    /// Where the training stands, to resume from: in `epoch`, after `step_in_epoch` of its
    /// batches, which saw `seen` samples (`counted` for accuracy).
    fn position(&self, epoch: u64, step_in_epoch: u64, seen: i64, counted: i64) -> Position {
        Position {
            epoch,
            step_in_epoch,
            step: self.step,
            seen,
            counted,
            last: self.last.clone(),
            callbacks: self.callbacks.state(),
            step_log: self.step_log.state(),
            schedule: self.layout.schedule.state(),
            reordered: self.reordered,
        }
    }

    /// Saves the training's state at `position`, with the callbacks' own, where a
    /// schedule asked for it at `at` or where a signal did (`requested`): whether one was
    /// written (a requested one is not without a cache to keep it in).
    fn snapshot(
        &mut self,
        at: At,
        position: &Position,
        requested: bool,
    ) -> Result<bool, Diagnostic> {
        let snapshot = Snapshot {
            position,
            model: &self.layout.model,
            opt: &self.layout.opt,
            scaler: self.layout.scaler.as_ref(),
            sums: Sums {
                loss: &self.loss_sum,
                hits: &self.hits_sum,
            },
            device: self.session.device,
        };
        match requested {
            true => self.callbacks.save_requested(at, &snapshot),
            false => self.callbacks.save(at, &snapshot).map(|()| true),
        }
    }

    /// The epoch's end: its totals over the processes, a validation where it is due, its
    /// record, the callbacks' decision (the first to end the training decides: at the
    /// validation, at the epoch's end, or at the step it ended within the epoch), and a
    /// snapshot where one is due.
    fn end_epoch(&mut self, mut ep: Epoch) -> Result<Option<Stop>, Diagnostic> {
        let spec = self.spec;
        // Whether a signal asked the run to stop, in any process: asked at every epoch's
        // end (with the sums), and within epochs about once a second (`signalled`).
        let mut signalled = crate::preemption::received().is_some();
        if let Some(g) = self.group() {
            let device = self.session.device;
            let (loss, hits) = (&self.loss_sum, &self.hits_sum);
            let summed = sum_over_processes(g, device, loss, hits, ep.seen, ep.counted, signalled);
            (self.loss_sum, self.hits_sum, ep.seen, ep.counted, signalled) =
                summed.map_err(|e| self.fail("summing the epoch's metrics", e))?;
        }
        let totals = Totals::read(&self.loss_sum, &self.hits_sum, ep.seen, ep.counted)
            .map_err(|e| self.fail("reading the epoch's loss", e))?;
        self.step_log.epoch_ended(totals);
        // Validated as `validate` says, and always where the training ends.
        let every = &spec.validate;
        let due = ep.finish.is_some()
            || ep.number == spec.epochs
            || (every.every_epochs > 0 && ep.number.is_multiple_of(every.every_epochs))
            || (every.every_steps > 0
                && self.step > ep.steps_before
                && self.step.is_multiple_of(every.every_steps));
        let mut control = Control::Continue;
        let values = match (ep.validated_at_stop.take(), due) {
            // Measured at this very step, where a callback ended the training.
            (Some(values), _) => Some(values),
            (None, true) => {
                let (values, decided) =
                    self.validate(ep.number, false, totals.mean(), "sharing the validation")?;
                control = decided;
                Some(values)
            }
            (None, false) => None,
        };
        let record = self.epoch_record(&ep, totals.mean(), values.as_ref());
        let record = self.callbacks.record(record);
        for next in [
            self.callbacks.epoch_ended(&record, &mut self.out),
            ep.finish.take().map_or(Control::Continue, Control::Finish),
        ] {
            if matches!(control, Control::Continue) {
                control = next;
            }
        }
        let control = decide(self.group(), control, self.stage.name());
        let finish = settle(control.map_err(|e| self.fail("ending the epoch", e))?)?;
        self.last = Some(record);
        // A stopped training needs no snapshot: resumed from the one before, it stops at
        // the same step again. Ended at its last epoch, it keeps no final state either: a
        // longer training would end there too.
        let ended = finish.is_some();
        if let Some(why) = finish {
            if ep.number < spec.epochs || ep.ended_within {
                return Ok(Some((ep.number, why, ep.ended_within)));
            }
        }
        let last = ep.number == spec.epochs;
        if !ended && !last && signalled {
            let position = self.position(ep.number + 1, 0, 0, 0);
            return Err(self.stop_for_signal(At::EpochEnd(ep.number), &position));
        }
        if !ended && self.callbacks.snapshot_due(At::EpochEnd(ep.number)) {
            let position = self.position(ep.number + 1, 0, 0, 0);
            self.snapshot(At::EpochEnd(ep.number), &position, false)?;
        }
        Ok(None)
    }

    /// The epoch's record, its training loss and accuracy `train`, its validation's
    /// `values` if it had one.
    fn epoch_record(
        &self,
        ep: &Epoch,
        (loss, accuracy): (f64, Option<f64>),
        values: Option<&BTreeMap<String, f64>>,
    ) -> EpochRecord {
        let seconds = ep.started.elapsed().as_secs_f64();
        let value = |key: &str| values.and_then(|v| v.get(key).copied());
        EpochRecord {
            stage: self.stage.name().to_string(),
            epoch: ep.number,
            epochs: self.spec.epochs,
            loss,
            accuracy,
            val_loss: value("val_loss"),
            val_accuracy: value("val_accuracy"),
            val_metrics: values
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.strip_prefix("val_")?.to_string(), *v)))
                .filter(|(k, _)| k != "loss" && k != "accuracy")
                .collect(),
            // `lr_monitor` records the learning rate.
            lr: f64::NAN,
            seconds,
            samples_per_second: ep.seen as f64 / seconds.max(1e-9),
            comm_seconds: self.group().map(|_| ep.comm.as_secs_f64()),
            steps: self.step - ep.steps_before,
        }
    }
}
