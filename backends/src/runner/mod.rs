//! Executing a plan: stages found fresh in the cache report their stored results; the
//! others run, after one set-up (threads, data, a dry forward pass that checks the model
//! against the data), and their outputs go into the cache.
//!
//! A stage that fails is reported with its error and its dependents are skipped; stages
//! that do not depend on it still run, and everything written before stays on disk.
//! While a stage runs, its fingerprint's lock is held, so two runs sharing a cache never
//! compute the same stage twice: the second finds the first one's entry.

mod checkpoint;
mod eval;
mod predict;
mod train;

use crate::device;
use crate::error::torch_error;
use crate::model::Model;
use crate::observer::Observer;
use crate::process_group::ProcessGroup;
use crate::session::Session;
use crate::snapshot::{Saved, Snapshots, Taken};
use cache::{Entry, Lookup, MetricsLog, RunDir, Store};
use manifests::{Diagnostic, Manifest, StageConfig, StageKind, StageSpec, WeightsFrom};
use pipeline_core::extend::{self, FINAL_STATE, FINAL_TENSORS};
use pipeline_core::freshness::{changed_during_run, Cache, Freshness, StageState};
use pipeline_core::report::{
    best_output, cached_result, stored_metrics, KeptWeights, RunReport, StageResult, StageStatus,
};
use pipeline_core::reshard::Lineages;
use pipeline_core::stages::MODEL_OUTPUT;
use pipeline_core::stale::Reason;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::{Device, Tensor};

/// A trained model that later stages of the run can use, with its training metrics (for
/// kept weights: their epoch, step and score).
struct Trained {
    model: Model,
    metrics: BTreeMap<String, f64>,
}

/// Which weights of which `train` stage (by index).
type Weights = (usize, WeightsFrom);

/// What the stages that run share.
struct Context<'a> {
    session: Session<'a>,
    run_dir: RunDir,
    log: MetricsLog,
    /// Where the `train` stages' TensorBoard event files go, a directory per stage.
    tensorboard: PathBuf,
    trained: HashMap<Weights, Trained>,
    /// Weights in files (the cache's, or kept ones), loaded when a later stage needs them.
    weight_files: HashMap<Weights, (PathBuf, BTreeMap<String, f64>)>,
    /// `pipeline run --reshard`.
    reshard: bool,
    /// The stages whose result is not what their key describes (a training `--reshard`
    /// continued, and the stages that use one): never stored.
    unkeyed: std::collections::HashSet<String>,
}

/// How a run is asked to go, beyond its manifest: `pipeline run`'s options that the
/// stages see.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'p> {
    /// `--tensorboard-dir`: where the trainings' event files go, rather than the run
    /// directory.
    pub tensorboard_dir: Option<&'p Path>,
    /// `--reshard`: a training continues from the snapshots of the same training with
    /// another global batch (the order of samples changing from the resume on).
    pub reshard: bool,
}

/// What a stage that ran produced: metrics, and its files by their names in the store,
/// written in its private scratch directory (copied out to the user's paths only once
/// stored: [`pipeline_core::outputs::place`]).
struct Produced {
    metrics: BTreeMap<String, f64>,
    store: Vec<(String, PathBuf)>,
    /// A `train` stage's `init`: what it loaded.
    init: Option<pipeline_core::finetune::InitMatch>,
    /// A `train` stage that stopped early: after which epoch, and why.
    stopped: Option<(u64, String)>,
    /// A `train` stage that started from a saved state: at which epoch.
    resumed_at: Option<u64>,
    /// A `train` stage that went on from another global batch's snapshot (`--reshard`):
    /// its result is not what its key describes.
    reordered: bool,
    /// The weights a `train` stage's `keep-best` kept, the best first.
    kept: Vec<KeptWeights>,
    /// An `eval` stage of k-fold cross-validation: each metric's standard deviation over
    /// the folds.
    std: BTreeMap<String, f64>,
}

impl Produced {
    fn metrics(metrics: BTreeMap<String, f64>, store: Vec<(String, PathBuf)>) -> Produced {
        Produced {
            metrics,
            store,
            init: None,
            stopped: None,
            resumed_at: None,
            reordered: false,
            kept: Vec::new(),
            std: BTreeMap::new(),
        }
    }
}

fn write_failed(path: &Path, e: std::io::Error) -> Diagnostic {
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

/// The `train` stages that `stage` takes its model from: one, or with `data.split
/// folds=K` one per fold (`check` allows no other case).
fn model_sources(manifest: &Manifest, stage: &StageSpec) -> Vec<usize> {
    stage
        .needs
        .iter()
        .filter_map(|n| {
            manifest
                .stages
                .iter()
                .position(|s| s.name.value == n.value && s.kind() == StageKind::Train)
        })
        .collect()
}

/// The fold `train` stage `index` holds out (k-fold cross-validation), if any.
fn fold_of(manifest: &Manifest, index: usize) -> Option<u64> {
    match &manifest.stages[index].config {
        StageConfig::Train(spec) => spec.fold.as_ref().map(|f| f.index),
        _ => None,
    }
}

impl<'a> Context<'a> {
    /// Runs a stale stage and stores what it produced in the cache.
    fn execute(
        &mut self,
        state: &StageState,
        cache: Option<&Cache>,
        snapshot_store: Option<&Store>,
        obs: &mut dyn Observer,
    ) -> StageResult {
        let manifest = self.session.manifest;
        let scratch = scratch_dir(cache, &self.run_dir, &state.fingerprint.hash);
        let group = self.session.group.as_ref().map(|g| (g.rank, g.world));
        let snapshots =
            snapshot_store.and_then(|store| snapshots_of(store, manifest, state, group));
        let final_state =
            (cache.is_some() && keeps_final_state(manifest, state, group)).then(|| Snapshots {
                dir: scratch.join("final-state"),
                ..Default::default()
            });
        let extends = state.extends.as_ref().and_then(|e| {
            let entry = &e.entry;
            Some((entry.output(FINAL_STATE)?, entry.output(FINAL_TENSORS)?))
        });
        // Without its own snapshots, the same training on another number of processes may
        // have left some.
        let elsewhere = (snapshots.as_ref())
            .filter(|s| s.steps()[0].is_none())
            .and_then(Snapshots::elsewhere);
        let saved = Saved {
            snapshots: snapshots.as_ref(),
            extends,
            final_state: final_state.as_ref(),
            elsewhere: elsewhere.as_ref(),
            reshard: self.reshard,
        };
        let ran = std::fs::create_dir_all(&scratch)
            .map_err(|e| write_failed(&scratch, e))
            .and_then(|()| self.run_stage(state, &scratch, saved, obs));
        let mut result = StageResult::new(manifest, state.index);
        let ran = ran.and_then(|mut produced| {
            // What was computed from other bytes than the key's is never stored.
            if let Some((file, how)) = state.changed_input() {
                return Err(changed_during_run(result.name.as_str(), file, &how));
            }
            let kept = std::mem::take(&mut produced.kept);
            let mut entry = None;
            let stage = &manifest.stages[state.index];
            let unkeyed = produced.reordered
                || (stage.needs.iter()).any(|n| self.unkeyed.contains(&n.value));
            if let (true, Some(_)) = (unkeyed, cache) {
                self.unkeyed.insert(result.name.clone());
                obs.notice(&format!(
                    "stage `{}` is not cached: it {}, so its result is not what its key describes",
                    result.name,
                    match produced.reordered {
                        true => "went on from the snapshot of another global batch (--reshard)",
                        false => "uses a training that --reshard continued",
                    }
                ));
            }
            if let (false, Some(c)) = (unkeyed, cache) {
                let mut metrics = json!(produced.metrics);
                if !kept.is_empty() {
                    metrics["best"] = json!(kept);
                }
                if !produced.std.is_empty() {
                    metrics[pipeline_core::report::STD] = json!(produced.std);
                }
                let key = json!(state.fingerprint.key);
                match c
                    .store
                    .put(&state.fingerprint.hash, &key, &metrics, &produced.store)
                {
                    Ok(stored) => {
                        share(&c.store, &stored, &result.name, obs);
                        // A longer training of the same settings may continue this one.
                        if stored.output(FINAL_STATE).is_some() {
                            let lineage = extend::lineage(&state.fingerprint.key);
                            if let Err(e) = c.store.join_lineage(&lineage, &stored.fingerprint) {
                                obs.notice(&format!(
                                    "warning: a longer training of stage `{}` will not continue this one: {e}",
                                    result.name
                                ));
                            }
                        }
                        entry = Some(stored)
                    }
                    Err(e) => obs.notice(&format!(
                        "warning: stage `{}` ran but could not be cached: {e}",
                        result.name
                    )),
                }
            }
            let kept = self.keep_weights(state.index, kept, entry.as_ref())?;
            // Rank 0 alone writes files.
            let outputs = match self.session.rank() {
                0 => self.place(state, &produced)?,
                _ => Vec::new(),
            };
            Ok((produced, kept, outputs))
        });
        match ran {
            Ok((produced, kept, outputs)) => {
                if let Some(s) = &snapshots {
                    s.clear();
                }
                result.status = StageStatus::Ran;
                result.metrics = produced.metrics;
                result.outputs = outputs;
                result.init = produced.init;
                result.stopped = produced.stopped;
                result.resumed_at = produced.resumed_at;
                result.metrics_std = produced.std;
                result.best = kept;
            }
            Err(e) => result = failed(manifest, state.index, e),
        }
        let _ = std::fs::remove_dir_all(&scratch);
        result
    }

    /// Makes the weights a `train` stage kept available to later stages: the cache's
    /// copies, or, without a cache, copies in the run directory (`STAGE-best-N`). The
    /// report of each, with where it is.
    fn keep_weights(
        &mut self,
        index: usize,
        kept: Vec<KeptWeights>,
        entry: Option<&cache::Entry>,
    ) -> Result<Vec<KeptWeights>, Diagnostic> {
        let name = self.session.manifest.stages[index].name().to_string();
        let mut placed = Vec::new();
        for mut k in kept {
            k.path = match entry.and_then(|e| e.output(&best_output(k.rank))) {
                Some(stored) => stored.to_path_buf(),
                None => {
                    let copy = self
                        .run_dir
                        .path
                        .join(format!("{name}-best-{}.safetensors", k.rank));
                    cache::write_atomic_with(&copy, |tmp| std::fs::copy(&k.path, tmp).map(drop))
                        .map_err(|e| write_failed(&copy, e))?;
                    copy
                }
            };
            self.weight_files.insert(
                (index, WeightsFrom::Best(k.rank as u64)),
                (k.path.clone(), k.metrics()),
            );
            placed.push(k);
        }
        Ok(placed)
    }

    /// The weights `from` of `train` stage `source`: trained in this run, or loaded from
    /// a file (the cache's, or kept ones).
    fn model_of(&mut self, source: usize, from: WeightsFrom) -> Result<&Trained, Diagnostic> {
        let key = (source, from);
        if !self.trained.contains_key(&key) {
            let manifest = self.session.manifest;
            // Left in place: a later stage's error counts what there is.
            let (path, metrics) = self.weight_files.get(&key).cloned().ok_or_else(|| {
                let kept = self
                    .weight_files
                    .keys()
                    .filter(|(s, f)| *s == source && *f != WeightsFrom::Last)
                    .count();
                Diagnostic::error(
                    "pipeline::stage::no_best_weights",
                    format!(
                        "stage `{}` kept {kept} of its best weights: there is no `{from}`",
                        manifest.stages[source].name()
                    ),
                )
                .help("it validated fewer times than `keep-best k` says; take `from \"best\"`")
            })?;
            let session = &self.session;
            let mut model = Model::build(
                &session.manifest.model,
                &session.data.inputs(),
                session.device,
                session.numerics.weights,
            )?;
            model.vs.load(&path).map_err(|e| {
                torch_error(
                    "pipeline::cache::bad_weights",
                    &format!("cannot load the cached weights {}", path.display()),
                    &e,
                )
                .help("run `pipeline cache verify --remove`, then run again")
            })?;
            self.trained.insert(key, Trained { model, metrics });
        }
        Ok(&self.trained[&key])
    }

    /// Puts the files stage `state` produced where the manifest says (copies of those it
    /// wrote in its scratch directory, as stored); where they are.
    fn place(&self, state: &StageState, produced: &Produced) -> Result<Vec<PathBuf>, Diagnostic> {
        let stored = |name: &str| {
            let file = produced.store.iter().find(|(n, _)| n == name);
            file.map(|(_, path)| path.clone()).ok_or_else(|| {
                Diagnostic::error(
                    "pipeline::run::internal",
                    format!(
                        "stage `{}` wrote no {name}",
                        self.session.manifest.stages[state.index].name()
                    ),
                )
                .help("this is a bug in pipeline: please report it")
            })
        };
        pipeline_core::outputs::place(
            self.session.manifest,
            state.index,
            &stored,
            Some(&self.run_dir.path),
            &state.fingerprint.hash,
        )
    }

    /// Where stage `index`'s file will be: the `declared` path (resolved, once
    /// `outputs::may_replace` allows it), else `<name>.<extension>` in the run directory.
    /// Checked before the stage computes it, so that a refused path costs no work.
    fn output_path(
        &self,
        index: usize,
        declared: Option<&manifests::Spanned<PathBuf>>,
        extension: &str,
    ) -> Result<PathBuf, Diagnostic> {
        let manifest = self.session.manifest;
        match declared {
            Some(p) => {
                let path = manifest.resolve(&p.value);
                pipeline_core::outputs::may_replace(manifest, index, &path)?;
                Ok(path)
            }
            None => Ok(self
                .run_dir
                .path
                .join(format!("{}.{extension}", manifest.stages[index].name()))),
        }
    }

    fn run_stage(
        &mut self,
        state: &StageState,
        scratch: &Path,
        saved: Saved,
        obs: &mut dyn Observer,
    ) -> Result<Produced, Diagnostic> {
        let index = state.index;
        let manifest = self.session.manifest;
        let stage = &manifest.stages[index];
        let sources = model_sources(manifest, stage);
        let source = sources.first().copied();
        match &stage.config {
            StageConfig::Train(spec) => self.train(state, spec, source, scratch, saved, obs),
            StageConfig::Eval(spec) => self.eval(index, spec, &sources, scratch, obs),
            StageConfig::Predict(spec) => self.predict(state, spec, source, scratch, obs),
            StageConfig::Checkpoint(spec) => self.checkpoint(state, spec, source, scratch),
        }
    }

    /// The data split as fold `fold` is (k-fold cross-validation; nothing to do without
    /// one), said when it is reloaded.
    fn use_fold(&mut self, fold: Option<u64>, obs: &mut dyn Observer) -> Result<(), Diagnostic> {
        let Some(k) = fold else { return Ok(()) };
        if !self.session.use_fold(k)? {
            return Ok(());
        }
        let data = &self.session.data;
        obs.message(&format!(
            "fold {k} of {}: {} samples train, {} held out",
            self.session.manifest.data.split.folds.unwrap_or(k),
            data.splits.train.len(),
            data.splits.val.len()
        ));
        unseen_categories(data, &format!("fold {k}"), obs);
        Ok(())
    }
}

/// Warns of the samples of `data` (`where_`: which) whose category the training split
/// does not hold: encoded as none (a row of zeros, or the id 0).
fn unseen_categories(data: &crate::data::Dataset, where_: &str, obs: &mut dyn Observer) {
    for (column, rows) in &data.unseen {
        let d = Diagnostic::warning(
            "pipeline::data::unseen_category",
            format!(
                "{rows} sample{} of {where_} had a value of `{column}` not seen in training",
                if *rows == 1 { "" } else { "s" }
            ),
        )
        .help("such a value is encoded as none of the training's (a row of zeros one-hot, the id 0 by index)");
        obs.warning(&d);
    }
}

/// Runs the stages of `states` (in order, dependencies first, as `freshness::assess`
/// gives them) on `device`, taking fresh ones from `cache` and storing what runs there
/// (`None`: no cache). A run directory next to the manifest is created when anything
/// runs. `Err` means the run could not start (bad data or model) and nothing was written;
/// stage failures are in the report.
///
/// In a distributed run only rank 0 writes the cache (and the run directory); every
/// process keeps its own training snapshots beside its cache.
pub fn run(
    manifest: &Manifest,
    states: &[StageState],
    cache: Option<&mut Cache>,
    device: Device,
    group: Option<ProcessGroup>,
    options: Options,
    obs: &mut dyn Observer,
) -> Result<RunReport, Diagnostic> {
    let (rank, world) = group.as_ref().map_or((0, 1), |g| (g.rank, g.world));
    let agreed;
    let states = match &group {
        Some(g) => {
            agreed = agree_on_freshness(g, states)?;
            &agreed[..]
        }
        None => states,
    };
    let snapshot_store = cache.as_ref().map(|c| c.store.clone());
    let mut cache = cache.filter(|_| rank == 0);
    let mut ctx = match states.iter().any(|s| !s.is_fresh()) {
        true => Some(open(manifest, device, group, options, obs)?),
        false => None,
    };
    let mut results: Vec<StageResult> = Vec::new();
    for state in states {
        let index = state.index;
        let stage = &manifest.stages[index];
        // A signal asked the run to stop (`crate::preemption`): no stage starts after it.
        if signalled(ctx.as_ref()) {
            let mut result = StageResult::new(manifest, index);
            result.error = Some(Diagnostic::error(
                pipeline_core::launch::STOPPED,
                format!(
                    "stage `{}` did not start: a signal stopped the run",
                    stage.name()
                ),
            ));
            obs.stage_finished(&result);
            results.push(result);
            continue;
        }
        let blocked = stage.needs.iter().any(|n| {
            results
                .iter()
                .any(|r| r.name == n.value && !r.status.succeeded())
        });
        let mut result = StageResult::new(manifest, index);
        if !blocked {
            let started = Instant::now();
            let _lock = match (&cache, &state.freshness) {
                (Some(c), Freshness::Stale(_)) => c.store.lock(&state.fingerprint.hash).ok(),
                _ => None,
            };
            result = match stored_entry(cache.as_deref(), state, world) {
                Some(entry) => {
                    if let (Some(ctx), Some(weights)) = (ctx.as_mut(), entry.output(MODEL_OUTPUT)) {
                        ctx.weight_files.insert(
                            (index, WeightsFrom::Last),
                            (weights.to_path_buf(), stored_metrics(&entry)),
                        );
                    }
                    if let Some(c) = cache.as_deref() {
                        c.store.touch(&entry.fingerprint);
                        share(&c.store, &entry, stage.name(), obs);
                    }
                    let result = cached_result(manifest, index, &entry)
                        .unwrap_or_else(|e| failed(manifest, index, e));
                    if let Some(ctx) = ctx.as_mut() {
                        for k in &result.best {
                            ctx.weight_files.insert(
                                (index, WeightsFrom::Best(k.rank as u64)),
                                (k.path.clone(), k.metrics()),
                            );
                        }
                    }
                    result
                }
                None => {
                    if let Freshness::Stale(reasons) = &state.freshness {
                        for why in reasons.iter().filter(|r| matches!(r, Reason::Unusable(_))) {
                            obs.notice(&format!(
                                "warning: stage `{}`: {why}; computing it again",
                                stage.name()
                            ));
                        }
                    }
                    obs.stage_started(stage.name(), stage.kind());
                    let ctx = ctx.as_mut().expect("opened when a stage is stale");
                    ctx.execute(state, cache.as_deref(), snapshot_store.as_ref(), obs)
                }
            };
            if let (true, Some(c)) = (result.status.succeeded(), cache.as_deref_mut()) {
                let key = json!(state.fingerprint.key);
                let _ = c.last.record(stage.name(), &state.fingerprint.hash, &key);
            }
            result.seconds = started.elapsed().as_secs_f64();
        }
        obs.stage_finished(&result);
        results.push(result);
    }
    let run_dir = ctx.map(|c| match c.session.rank() {
        0 => Some(c.run_dir.path),
        rank => {
            let _ = std::fs::remove_dir_all(private_base(rank));
            None
        }
    });
    Ok(RunReport {
        pipeline: manifest.name.clone(),
        run_dir: run_dir.flatten(),
        device: device::describe(device),
        stages: results,
    })
}

/// Whether a signal asked the run to stop, in any process (`crate::preemption`): the
/// processes ask between the same stages, so that they stop before the same one.
fn signalled(ctx: Option<&Context>) -> bool {
    let mine = crate::preemption::received().is_some();
    let group = ctx.and_then(|c| c.session.group.as_ref());
    match group {
        Some(g) if crate::preemption::installed() => {
            let flag = [f64::from(u8::from(mine))];
            crate::train::processes::sum_values(g, flag).map_or(mine, |[n]| n > 0.0)
        }
        _ => mine,
    }
}

/// The stages as every process of `group` sees them: each reads its own machine's cache,
/// and a stage counts as cached only where it is cached for all of them (otherwise some
/// would train it and wait for the others in vain).
fn agree_on_freshness(
    group: &ProcessGroup,
    states: &[StageState],
) -> Result<Vec<StageState>, Diagnostic> {
    let fresh: Vec<f64> = states
        .iter()
        .map(|s| f64::from(u8::from(s.is_fresh())))
        .collect();
    let counted = (|| {
        let mut t = [Tensor::f_from_slice(&fresh)?.f_to_device(group.device)?];
        group.all_reduce_sum(&mut t)?;
        Vec::<f64>::try_from(&t[0].f_to_device(Device::Cpu)?)
    })()
    .map_err(|e| {
        torch_error(
            "pipeline::launch::collective_failed",
            "the processes could not compare their caches",
            &e,
        )
    })?;
    Ok(states
        .iter()
        .zip(counted)
        .map(|(state, count)| {
            let mut state = state.clone();
            if state.is_fresh() && count < group.world as f64 {
                state.freshness = Freshness::Stale(vec![Reason::NotEverywhere {
                    missing: group.world - count as usize,
                    processes: group.world,
                }]);
            }
            state
        })
        .collect())
}

/// The stage's entry in the store: found fresh when the run was planned, or stored since
/// by another run while this one waited for the stage's lock (unless forced, or in a
/// distributed run, whose processes must all decide alike).
fn stored_entry(cache: Option<&Cache>, state: &StageState, world: usize) -> Option<Entry> {
    match (cache, &state.freshness) {
        (_, Freshness::Fresh(entry)) => Some(entry.clone()),
        (Some(c), Freshness::Stale(_)) if !state.forced && world == 1 => {
            match c.store.get(&state.fingerprint.hash) {
                Lookup::Hit(entry) => Some(entry),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Sends stage `name`'s entry to the shared cache, when there is one; a warning when it
/// cannot be (the stage stays cached on this machine).
fn share(store: &Store, entry: &Entry, name: &str, obs: &mut dyn Observer) {
    if let Err(e) = store.publish(entry) {
        obs.notice(&format!(
            "warning: stage `{name}` is cached here but could not be shared: {e}"
        ));
    }
}

fn failed(manifest: &Manifest, index: usize, error: Diagnostic) -> StageResult {
    let mut result = StageResult::new(manifest, index);
    result.status = StageStatus::Failed;
    result.error = Some(error);
    result
}

/// Where a `train` stage keeps its resumable snapshots: beside the store, under its
/// fingerprint, so that the same stage run again finds them; in a distributed run, one
/// directory per process (`rank-R-of-W`), as each holds its own optimizer shard, random
/// state and share of the epoch's sums. Every process uses its own machine's cache.
fn snapshots_of(
    store: &Store,
    manifest: &Manifest,
    state: &StageState,
    distributed: Option<(usize, usize)>,
) -> Option<Snapshots> {
    let StageConfig::Train(spec) = &manifest.stages[state.index].config else {
        return None;
    };
    let stage = store.snapshot_dir(&state.fingerprint.hash);
    // Without a schedule, where a signal may ask for one (`crate::preemption`).
    let scheduled = spec.snapshot_every_epochs > 0 || spec.snapshot_every_steps > 0;
    (scheduled || crate::preemption::installed()).then(|| Snapshots {
        dir: match distributed {
            Some((rank, world)) => stage.join(format!("rank-{rank}-of-{world}")),
            None => stage,
        },
        every_epochs: spec.snapshot_every_epochs,
        every_steps: spec.snapshot_every_steps,
        taken: Lineages::of(&state.fingerprint.key).map(|lineages| Taken {
            lineages,
            strategy: manifest
                .accelerator
                .distributed
                .strategy
                .as_str()
                .to_string(),
        }),
    })
}

/// Whether `train` stage `state` keeps its final state in the cache, for a longer training
/// to continue (`pipeline_core::extend`).
fn keeps_final_state(
    manifest: &Manifest,
    state: &StageState,
    distributed: Option<(usize, usize)>,
) -> bool {
    let processes = distributed.map_or(1, |(_, world)| world as u64);
    // Only a train stage has no hindrance.
    extend::hindrance(manifest, state.index, processes).is_none()
}

/// Where a stage writes files bound for the cache: the cache's `tmp/` (the same file
/// system as the store), or the run directory without a cache. Removed after the stage.
fn scratch_dir(cache: Option<&Cache>, run_dir: &RunDir, fingerprint: &str) -> PathBuf {
    match cache {
        Some(c) => c
            .store
            .root()
            .join("tmp")
            .join(format!("{fingerprint}.{}.run", std::process::id())),
        None => run_dir.path.join(".scratch"),
    }
}

/// Where a process other than rank 0 keeps its run directory (removed after the run):
/// only rank 0 writes next to the manifest.
fn private_base(rank: usize) -> PathBuf {
    std::env::temp_dir().join(format!("pipeline-rank{rank}-{}", std::process::id()))
}

/// Loads the data, checks the model against it and creates the run directory.
fn open<'a>(
    manifest: &'a Manifest,
    device: Device,
    group: Option<ProcessGroup>,
    options: Options,
    obs: &mut dyn Observer,
) -> Result<Context<'a>, Diagnostic> {
    let world = group.as_ref().map_or(1, |g| g.world);
    let session = Session::open(manifest, device, group)?;
    let data = &session.data;
    // The compatibility rules that need the device and the data, decided now.
    let facts = pipeline_core::compat::Facts {
        cuda: Some(device.is_cuda()),
        // What each process trains on (uneven accumulation is per process).
        train_samples: Some(pipeline_core::sampler::shard_len(
            data.splits.train.len(),
            world,
            manifest.accelerator.distributed.drop_remainder,
        ) as u64),
        world: Some(world),
        at_run: true,
        told: false,
    };
    for d in pipeline_core::compat::check(manifest, &facts) {
        if d.is_error() {
            return Err(d);
        }
        obs.warning(&d);
    }
    let (total, trainable) = session.parameters;
    let (train, val, test) = (
        data.splits.train.len(),
        data.splits.val.len(),
        data.splits.test.len(),
    );
    let samples = match manifest.data.split.folds {
        Some(k) => {
            unseen_categories(data, "fold 1", obs);
            format!(
                "{} samples ({k} folds of {}, {test} test)",
                train + val + test,
                fold_sizes(train + val, k)
            )
        }
        None => {
            unseen_categories(data, "the validation and test splits", obs);
            format!(
                "{} samples ({train} train, {val} val, {test} test)",
                train + val + test
            )
        }
    };
    obs.message(&format!(
        "{samples} · model {total} parameters ({trainable} trainable) · device {}",
        device::describe(device)
    ));
    let private = private_base(session.rank());
    let base = match (session.rank(), manifest.base_dir.as_os_str().is_empty()) {
        (0, true) => Path::new("."),
        (0, false) => manifest.base_dir.as_path(),
        _ => private.as_path(),
    };
    let run_dir =
        RunDir::create(base).map_err(|e| write_failed(&base.join(".pipeline/runs"), e))?;
    let log = run_dir
        .metrics_log()
        .map_err(|e| write_failed(&run_dir.path.join("metrics.jsonl"), e))?;
    // Which rows of the file each split holds, so that anyone can rebuild it.
    let split = run_dir.path.join("split.json");
    let classification = manifest.loss.kind.is_classification();
    let rows = session.data.split_rows(&manifest.data, classification);
    let text = serde_json::to_string(&rows).expect("json");
    cache::write_atomic(&split, text.as_bytes()).map_err(|e| write_failed(&split, e))?;
    // Runs collected in one tree: by pipeline, then by run.
    let tensorboard = match options.tensorboard_dir {
        Some(dir) => dir.join(&manifest.name).join(run_dir.id()),
        None => run_dir.path.join("tensorboard"),
    };
    Ok(Context {
        session,
        run_dir,
        log,
        tensorboard,
        trained: HashMap::new(),
        weight_files: HashMap::new(),
        reshard: options.reshard,
        unkeyed: Default::default(),
    })
}

/// The sizes of `k` folds of `n` samples: `360` or `359–360`.
fn fold_sizes(n: usize, k: u64) -> String {
    let k = k.max(1) as usize;
    match n % k {
        0 => (n / k).to_string(),
        _ => format!("{}–{}", n / k, n / k + 1),
    }
}
