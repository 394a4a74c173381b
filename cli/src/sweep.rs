//! `pipeline sweep FILE --grid KEY=V1,V2,… [--grid …] [--random KEY=log(a,b) --trials N
//! --seed S] [--jobs J] [--executor NAME] [--monitor STAGE.METRIC] [--mode min|max]
//! [--json]`: the manifest
//! run at every point of the grid (and every random draw), each point a
//! `pipeline run` with its `--set`s. Every point is checked before anything runs. The
//! cache does the sharing: a stage whose fingerprint no swept key reaches is computed by
//! the first point and found cached by the others, and a sweep run again (after an
//! interruption) computes only what is missing. With `--jobs J`, J points run at once
//! with the cores divided between them, and a point waits while another computes a stage
//! it shares. Where the points run is the executor's (`--executor local|slurm`,
//! `executor/`). The result: a table of the points by the monitored metric, best first, and
//! the files at the manifest's output paths made the best point's (every point wrote
//! them; its run answered again from the cache puts its own back).
//!
//! At most [`pipeline_core::sweep::MAX_POINTS`] points, refused before they are made.
//! With `--json`, every exit prints one document: the result, or `{"ok": false,
//! "diagnostics": [...]}` ([`Refused`]).
//!
//! With `--halving min-epochs=N eta=E` the points run in rungs: all of them for N
//! epochs, the best 1/E of those for N×E, and so on up to the manifest's epochs; each
//! rung continues the trainings of the one before from the cache (`extend`), and the
//! table says where each point stopped.

use crate::cli::{SweepArgs, SweepMode};
use crate::executor::{self, Ended, Executor, PointRun};
use crate::load::Loaded;
use crate::render::Source;
use crate::{prepare, render, summary};
use manifests::{Diagnostic, Manifest, Mode, Override, SweptKey};
use pipeline_core::sweep::{
    escaped, point_overrides, points, startable, Axis, Halving, Monitor, PointText, Random,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::sync::mpsc;

/// One point of the sweep: its overrides and, once run, its report.
struct Point {
    overrides: Vec<Override>,
    report: Option<Value>,
    /// Why it has no report (the run's last words).
    failure: Option<String>,
    /// Under `--halving`: the epochs of each rung it ran, and its monitored value there.
    rungs: Vec<(u64, Option<f64>)>,
    /// The `--set`s of its last run (the sweep's, its own, a rung's epochs).
    ran_with: Vec<Override>,
    /// The SLURM job of its last run, under `--executor slurm`.
    job: Option<String>,
}

impl Point {
    fn label(&self) -> String {
        self.overrides
            .iter()
            .map(|o| escaped(&o.to_string()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The monitored metric, once run.
    fn value(&self, monitor: &Monitor) -> Option<f64> {
        self.report.as_ref()?["stages"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == monitor.stage.as_str())?["metrics"][&monitor.metric]
            .as_f64()
    }

    fn ok(&self) -> bool {
        self.report.as_ref().is_some_and(|r| r["ok"] == true)
    }

    /// `train ran, test cached`.
    fn statuses(&self) -> String {
        let Some(stages) = self.report.as_ref().and_then(|r| r["stages"].as_array()) else {
            return "failed".into();
        };
        stages
            .iter()
            .map(|s| {
                let from = s["resumed_at_epoch"]
                    .as_u64()
                    .map_or(String::new(), |e| format!(" from epoch {e}"));
                format!(
                    "{} {}{from}",
                    s["name"].as_str().unwrap_or("?"),
                    s["status"].as_str().unwrap_or("?")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The manifest each point is checked, planned and run with, read once.
struct Text {
    /// As written, for diagnostics.
    source: Source,
    /// Without its `sweep` block, as each point is read: linear in the points, however
    /// large the block.
    cut: PointText,
}

impl Text {
    /// The manifest of the point with `overrides` (the sweep's own settings left out:
    /// the block is not there), checked, its inputs named by URL fetched, as
    /// [`Loaded::read_to_run`] reads it.
    fn point(&self, args: &SweepArgs, overrides: &[Override]) -> pipeline_core::Checked {
        let overrides = point_overrides(overrides);
        let mut checked = pipeline_core::load(&self.cut.text, &args.file, &overrides);
        self.cut.relocate(&mut checked.diagnostics);
        if checked.valid().is_some() {
            if let Some(manifest) = checked.manifest.as_mut() {
                if let Err(d) = crate::fetch::fetch_inputs(manifest, &args.cache) {
                    checked.diagnostics.push(d);
                }
            }
        }
        checked
    }
}

/// The sweep to run: the command line's flags over the manifest's `sweep` block.
struct Plan {
    text: Text,
    grid: Vec<Axis>,
    random: Vec<Random>,
    trials: u64,
    seed: u64,
    /// `--jobs`, else the `sweep` block's `jobs` (`block_jobs`) unless the executor says.
    jobs: Option<usize>,
    block_jobs: usize,
    monitor: Option<String>,
    maximize: Option<bool>,
    halving: Option<Halving>,
}

impl Plan {
    /// `args` over the `sweep` block of the manifest (read with `args.set`): a key given
    /// on the command line replaces the block's grid or draw of it, any other flag the
    /// block's setting. Refused: the manifest's own errors, a bad `--halving`, a swept key
    /// also given with `--set` (its points would silently replace it).
    fn of(args: &SweepArgs) -> Result<Plan, Refused> {
        let loaded = Loaded::read_with_sweep(&args.file, &args.set);
        let Some(manifest) = loaded.report() else {
            // Said on stderr by `report`.
            return Err(Refused {
                text: String::new(),
                diagnostics: loaded.checked.diagnostics,
                source: loaded.source,
            });
        };
        let block = manifest.sweep.as_ref();
        let source = Source {
            name: (loaded.source.as_ref()).map_or_else(String::new, |s| s.name.clone()),
            text: (loaded.source.as_ref()).map_or_else(String::new, |s| s.text.clone()),
        };
        let given: BTreeSet<&str> = (args.grid.iter().map(|a| a.key.as_str()))
            .chain(args.random.iter().map(|r| r.key.as_str()))
            .collect();
        let mut grid: Vec<Axis> = Vec::new();
        let mut random: Vec<Random> = Vec::new();
        if let Some(block) = block {
            let kept = |k: &&SweptKey| !given.contains(k.key.value.as_str());
            grid.extend(block.grid.iter().filter(kept).map(Axis::of));
            for swept in block.random.iter().filter(kept) {
                // `check` refused a draw that does not parse.
                random.extend(Random::of(swept).ok());
            }
        }
        grid.extend(args.grid.iter().cloned());
        random.extend(args.random.iter().cloned());
        let swept = (grid.iter().map(|a| &a.key)).chain(random.iter().map(|r| &r.key));
        for key in swept {
            if let Some(set) = args.set.iter().find(|o| o.path.join(".") == *key) {
                let (key, set) = (escaped(key), escaped(&set.to_string()));
                return Err(Refused::because(
                    Diagnostic::error(
                        "pipeline::sweep::swept_and_set",
                        format!("`{key}` is swept and also given with --set {set}: each point's value would replace it"),
                    )
                    .help(format!("sweep `{key}` or set it, not both: drop --set {set}, or its grid")),
                ));
            }
        }
        let halving = match &args.halving {
            Some(settings) => Some(Halving::parse(settings).map_err(|why| {
                Refused::because(Diagnostic::error("pipeline::sweep::bad_halving", why))
            })?),
            None => block.and_then(|b| b.halving.as_ref()).map(Halving::of),
        };
        Ok(Plan {
            grid,
            random,
            trials: args.trials.or(block.map(|b| b.trials)).unwrap_or(0),
            seed: args.seed.or(block.map(|b| b.seed)).unwrap_or(0),
            jobs: args.jobs.map(|j| j as usize),
            block_jobs: block.map_or(1, |b| b.jobs as usize),
            monitor: (args.monitor.clone()).or_else(|| {
                block
                    .and_then(|b| b.monitor.as_ref())
                    .map(|m| m.value.clone())
            }),
            maximize: match args.mode {
                Some(mode) => Some(mode == SweepMode::Max),
                None => block.and_then(|b| b.mode).map(|m| m == Mode::Max),
            },
            halving,
            text: Text {
                cut: PointText::of(&source.text, block),
                source,
            },
        })
    }
}

/// Why a sweep runs nothing: said on stderr, and with `--json` as the one document on
/// stdout, `{"ok": false, "diagnostics": [...]}`.
struct Refused {
    /// What stderr says (empty when it has said it already: a manifest's diagnostics).
    text: String,
    diagnostics: Vec<Diagnostic>,
    /// The manifest the diagnostics point into.
    source: Option<Source>,
}

impl Refused {
    /// One error of the command line: `error: …` (and its help) on stderr.
    fn because(d: Diagnostic) -> Refused {
        let mut text = format!("error: {}\n", d.message);
        if let Some(help) = &d.help {
            text += &format!("  help: {help}\n");
        }
        Refused {
            text,
            diagnostics: vec![d],
            source: None,
        }
    }

    fn show(&self, json: bool) {
        eprint!("{}", self.text);
        if json {
            let failure = render::json_failure(&self.diagnostics, self.source.as_ref());
            println!("{failure}");
        }
    }
}

/// Every exit prints one JSON document under `--json`: the result, or why nothing ran.
pub fn run(args: &SweepArgs) -> bool {
    match sweep(args) {
        Ok(ok) => ok,
        Err(refused) => {
            refused.show(args.json);
            false
        }
    }
}

/// The sweep: checked, run, ranked and shown; whether every point ran well.
fn sweep(args: &SweepArgs) -> Result<bool, Refused> {
    let plan = Plan::of(args)?;
    let grid =
        points(&plan.grid, &plan.random, plan.trials, plan.seed).map_err(Refused::because)?;
    let halving = plan.halving.clone();
    let Checked {
        points: mut sweep,
        monitor,
        budget,
    } = check(args, &plan, grid)?;
    let total = sweep.len();
    let executor = executor::of(args)
        .map_err(|why| Refused::because(Diagnostic::error("pipeline::sweep::executor", why)))?;
    let jobs = (plan.jobs)
        .or(executor.default_jobs(total))
        .unwrap_or(plan.block_jobs);
    let runner = Runner { executor, jobs };
    say(&format!(
        "sweep of {}: {total} points, {jobs} at once{}, ranked by {} ({})",
        args.file.display(),
        match runner.executor.name() {
            "local" => String::new(),
            name => format!(" ({name})"),
        },
        monitor.name(),
        if monitor.maximize { "max" } else { "min" }
    ));
    let all: Vec<usize> = (0..total).collect();
    match (&halving, budget) {
        (Some(halving), Some(budget)) => {
            let at = (halving, budget);
            halve(args, &plan, &runner, &mut sweep, at, &monitor)
        }
        (None, _) => execute(args, &plan, &runner, &mut sweep, &all, None, &monitor),
        (Some(_), None) => unreachable!("`check` finds the budget of a halving"),
    }
    // The points that ran well first; under halving, those that went furthest first.
    let rank = |p: &Point| (!p.ok(), std::cmp::Reverse(p.rungs.len()));
    let mut order = all;
    order.sort_by(|&a, &b| {
        let (a, b) = (&sweep[a], &sweep[b]);
        (rank(a).cmp(&rank(b))).then(monitor.order(a.value(&monitor), b.value(&monitor)))
    });
    let outputs = keep_best(args, &plan, &sweep, order[0]);
    if args.json {
        let points: Vec<Value> = order
            .iter()
            .map(|&i| {
                let p = &sweep[i];
                let overrides: BTreeMap<String, &str> = p
                    .overrides
                    .iter()
                    .map(|o| (o.path.join("."), o.value.as_str()))
                    .collect();
                let mut point = json!({
                    "point": i + 1,
                    "overrides": overrides,
                    "ok": p.ok(),
                    "monitor": p.value(&monitor),
                    "stages": p.report.as_ref().map(|r| r["stages"].clone()),
                    "error": p.failure,
                });
                if let Some(job) = &p.job {
                    point["job"] = json!(job);
                }
                if halving.is_some() {
                    point["epochs"] = json!(p.rungs.last().map(|r| r.0));
                    point["rungs"] = p
                        .rungs
                        .iter()
                        .map(|(epochs, value)| json!({"epochs": epochs, "monitor": value}))
                        .collect();
                }
                point
            })
            .collect();
        let ok = sweep.iter().all(Point::ok);
        let outputs = outputs
            .as_ref()
            .map(|o| json!({"paths": o.paths, "point": o.point.map(|p| p + 1), "error": o.error}));
        println!(
            "{}",
            json!({"ok": ok, "monitor": monitor.name(), "mode": if monitor.maximize { "max" } else { "min" }, "points": points, "outputs": outputs})
        );
    } else {
        print!("{}", table(&sweep, &order, &plan, &monitor));
        if let Some(outputs) = &outputs {
            println!("{}", escaped(&outputs.said(&sweep)));
        }
    }
    Ok(sweep.iter().all(Point::ok))
}

/// The files at a manifest's own output paths (a checkpoint's `path`, predictions'
/// `output`) after a sweep: every point wrote them, and the best point's are put back.
struct Outputs {
    /// As shown.
    paths: Vec<String>,
    /// The point whose files they are, the best; `None` when that could not be made so.
    point: Option<usize>,
    /// Why not.
    error: Option<String>,
}

impl Outputs {
    /// The line under the table.
    fn said(&self, sweep: &[Point]) -> String {
        let paths = self.paths.join(", ");
        match (self.point, &self.error) {
            (Some(p), _) => format!(
                "{paths}: the best point's, point {} ({})",
                p + 1,
                sweep[p].label()
            ),
            (None, why) => format!(
                "{paths}: not the best point's ({}): whichever point wrote them last",
                why.as_deref().unwrap_or("unknown")
            ),
        }
    }
}

/// The paths the manifest's stages write their outputs to, as shown.
fn output_paths(manifest: &Manifest) -> Vec<String> {
    let mut paths = Vec::new();
    for stage in &manifest.stages {
        let delivery = pipeline_core::stages::member(&stage.config).delivery();
        if let Some((_, path)) = delivery.named_path() {
            let shown = match pipeline_core::outputs::is_url(&path.value) {
                true => path.value.clone(),
                false => manifest.resolve(&path.value),
            };
            paths.push(escaped(&shown.display().to_string()));
        }
    }
    paths
}

/// Makes the files at the manifest's output paths the `best` point's, answering its run
/// again from the cache (which puts a cached checkpoint or predictions back at their
/// path when the file there differs); `None` when the manifest writes to no path.
fn keep_best(args: &SweepArgs, plan: &Plan, sweep: &[Point], best: usize) -> Option<Outputs> {
    let point = &sweep[best];
    let paths = output_paths(plan.text.point(args, &point.ran_with).valid()?);
    if paths.is_empty() {
        return None;
    }
    let refused = |why: String| Outputs {
        paths: paths.clone(),
        point: None,
        error: Some(why),
    };
    if !point.ok() {
        return Some(refused("no point ran well".into()));
    }
    // Answered from the cache, here whatever the executor.
    let run = point_run(args, &point.ran_with, None, best);
    let out = match executor::local().run(&run) {
        Ok(out) => out,
        Err(why) => return Some(refused(why)),
    };
    let report = serde_json::from_slice::<Value>(&out.stdout).ok();
    match report {
        Some(r) if r["ok"] == true => Some(Outputs {
            paths,
            point: Some(best),
            error: None,
        }),
        Some(r) => Some(refused(
            first_error(&r).unwrap_or_else(|| "its run failed".into()),
        )),
        None => Some(refused(escaped(
            out.stderr.lines().last().unwrap_or("its run failed"),
        ))),
    }
}

/// `pipeline run FILE --json` with a point's `--set`s (`point`: its index), as the sweep
/// runs it.
fn point_run(
    args: &SweepArgs,
    overrides: &[Override],
    threads: Option<usize>,
    point: usize,
) -> PointRun {
    let mut run: Vec<OsString> = vec!["run".into(), args.file.clone().into(), "--json".into()];
    if let Some(dir) = &args.cache.dir {
        run.extend(["--cache-dir".into(), dir.into()]);
    }
    for o in overrides {
        run.extend(["--set".into(), o.to_string().into()]);
    }
    if let Some(t) = threads {
        run.extend(["--set".into(), format!("accelerator.threads={t}").into()]);
    }
    PointRun {
        program: std::env::current_exe().expect("the running binary has a path"),
        args: run,
        dir: std::env::current_dir().unwrap_or_else(|_| ".".into()),
        point: point + 1,
    }
}

/// An error of some points of the sweep.
struct Invalid {
    /// As rendered for the first point it was found in.
    text: String,
    /// The same, without that point's swept values.
    general: String,
    /// The points it was found in.
    points: Vec<usize>,
    /// As found in the first point.
    diagnostic: Diagnostic,
    /// Its message without that point's swept values.
    general_message: String,
}

/// A sweep whose points are all valid.
struct Checked {
    points: Vec<Point>,
    monitor: Monitor,
    /// Under `--halving`: the train stage whose epochs are the budget, and those epochs.
    budget: Option<(String, u64)>,
}

/// Every point checked (diagnostics shown once, with the points they come from), the
/// monitor found, and under `--halving` the budget.
fn check(args: &SweepArgs, plan: &Plan, grid: Vec<Vec<Override>>) -> Result<Checked, Refused> {
    let halving = plan.halving.as_ref();
    let mut errors: Vec<Invalid> = Vec::new();
    // The manifest the errors point into (the same file for every point).
    let mut source: Option<Source> = None;
    let mut sweep = Vec::new();
    let mut monitor = None;
    let mut budget = None;
    for (i, swept) in grid.into_iter().enumerate() {
        let mut overrides = args.set.clone();
        overrides.extend(swept.iter().cloned());
        let checked = plan.text.point(args, &overrides);
        match checked.valid() {
            None => {
                for d in checked
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == manifests::Severity::Error)
                {
                    let text = render::human(d, Some(&plan.text.source));
                    // The same error at every value of a key (a key that does not exist)
                    // is one error: told apart without the point's own values.
                    let without = |text: &str| {
                        swept.iter().fold(text.to_string(), |t, o| {
                            t.replace(&o.to_string(), &format!("{}=…", o.path.join(".")))
                        })
                    };
                    let general = without(&text);
                    match errors.iter_mut().find(|e| e.general == general) {
                        Some(e) => e.points.push(i),
                        None => errors.push(Invalid {
                            text,
                            general,
                            points: vec![i],
                            diagnostic: d.clone(),
                            general_message: without(&d.message),
                        }),
                    }
                    if source.is_none() {
                        source = Some(Source {
                            name: plan.text.source.name.clone(),
                            text: plan.text.source.text.clone(),
                        });
                    }
                }
            }
            Some(manifest) => {
                if monitor.is_none() {
                    match Monitor::of(manifest, plan.monitor.as_deref(), plan.maximize) {
                        Ok(m) => monitor = Some(m),
                        Err(why) => {
                            return Err(Refused::because(Diagnostic::error(
                                "pipeline::sweep::bad_monitor",
                                escaped(&why),
                            )))
                        }
                    }
                }
                if let (Some(h), None) = (halving, &budget) {
                    let found = h.budget(manifest).and_then(|(stage, epochs)| {
                        match swept.iter().find(|o| o.path == [stage, "epochs"]) {
                            Some(o) => Err(format!(
                                "--halving sets `{}` itself: it cannot be swept too",
                                o.path.join(".")
                            )),
                            None => Ok((stage.to_string(), epochs)),
                        }
                    });
                    match found {
                        Ok(b) => {
                            let index = manifest.stages.iter().position(|s| s.training() == b.0);
                            let hindrance = index
                                .and_then(|i| pipeline_core::extend::hindrance(manifest, i, 1));
                            if let Some(why) = hindrance {
                                say(&format!(
                                    "warning: each rung trains stage `{}` from the start: {why}",
                                    b.0
                                ));
                            }
                            budget = Some(b);
                        }
                        Err(why) => {
                            return Err(Refused::because(Diagnostic::error(
                                "pipeline::sweep::bad_halving",
                                escaped(&why),
                            )))
                        }
                    }
                }
            }
        }
        sweep.push(Point {
            overrides: swept,
            report: None,
            failure: None,
            rungs: Vec::new(),
            ran_with: Vec::new(),
            job: None,
        });
    }
    if !errors.is_empty() {
        let mut text = String::new();
        let mut diagnostics = Vec::new();
        for e in errors.iter() {
            let many = e.points.len() > 1;
            text += if many { &e.general } else { &e.text };
            let labels: Vec<String> = (e.points.iter())
                .map(|&i| format!("{} ({})", i + 1, sweep[i].label()))
                .collect();
            let points = format!(
                "in point{} {}",
                if many { "s" } else { "" },
                labels.join(", ")
            );
            text += &format!("  {points}\n\n");
            let mut d = e.diagnostic.clone();
            let message = if many { &e.general_message } else { &d.message };
            d.message = format!("{message} ({points})");
            diagnostics.push(d);
        }
        let bad: BTreeSet<usize> = errors
            .iter()
            .flat_map(|e| e.points.iter().copied())
            .collect();
        let why = format!(
            "{} of {} points are invalid; nothing was run",
            bad.len(),
            sweep.len()
        );
        text += &format!("error: {why}\n");
        diagnostics.push(Diagnostic::error("pipeline::sweep::invalid_points", why));
        return Err(Refused {
            text,
            diagnostics,
            source,
        });
    }
    Ok(Checked {
        points: sweep,
        monitor: monitor.expect("a valid point sets the monitor"),
        budget,
    })
}

/// Successive halving: the rungs, each the surviving points with the rung's epochs, the
/// best 1/eta of each rung going on to the next.
fn halve(
    args: &SweepArgs,
    plan: &Plan,
    runner: &Runner,
    sweep: &mut [Point],
    (halving, (stage, epochs)): (&Halving, (String, u64)),
    monitor: &Monitor,
) {
    let rungs = halving.rungs(epochs);
    let mut alive: Vec<usize> = (0..sweep.len()).collect();
    for (k, &rung) in rungs.iter().enumerate() {
        say(&format!(
            "rung {} of {}: {} point{} × {rung} epochs of stage `{stage}`",
            k + 1,
            rungs.len(),
            alive.len(),
            if alive.len() == 1 { "" } else { "s" }
        ));
        let epochs = Override {
            path: vec![stage.clone(), "epochs".into()],
            value: rung.to_string(),
        };
        execute(args, plan, runner, sweep, &alive, Some(&epochs), monitor);
        for &p in &alive {
            let value = sweep[p].value(monitor).filter(|_| sweep[p].ok());
            sweep[p].rungs.push((rung, value));
        }
        if k + 1 < rungs.len() {
            // Failed points rank last (no value).
            let value = |p: usize| sweep[p].rungs.last().and_then(|r| r.1);
            alive.sort_by(|&a, &b| monitor.order(value(a), value(b)));
            alive.retain(|&p| value(p).is_some());
            alive.truncate(halving.survivors(alive.len()));
            alive.sort();
        }
    }
}

/// The fingerprints of the stages a point would compute (stale now): two points that
/// share one are not run at once.
fn stale_stages(args: &SweepArgs, text: &Text, overrides: &[Override]) -> BTreeSet<String> {
    let checked = text.point(args, overrides);
    let Some(manifest) = checked.valid() else {
        return BTreeSet::new();
    };
    match prepare::prepare_to_look(&args.file, manifest, &args.cache) {
        Ok(p) => p
            .states
            .iter()
            .filter(|s| !s.is_fresh())
            .map(|s| s.fingerprint.hash.clone())
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// Where and how many at once the points run.
struct Runner {
    executor: Box<dyn Executor>,
    jobs: usize,
}

/// Runs the points `which` (with `extra` after their overrides), `jobs` at once, on the
/// executor; a point whose stages are all cached runs here (nothing to submit).
fn execute(
    args: &SweepArgs,
    plan: &Plan,
    runner: &Runner,
    sweep: &mut [Point],
    which: &[usize],
    extra: Option<&Override>,
    monitor: &Monitor,
) {
    let jobs = runner.jobs;
    let threads = runner.executor.threads(jobs);
    let remote = runner.executor.name() != executor::local().name();
    let overrides = |p: usize| -> Vec<Override> {
        let point = sweep[p].overrides.iter().chain(extra);
        args.set.iter().chain(point).cloned().collect()
    };
    let all: Vec<Vec<Override>> = (0..sweep.len()).map(overrides).collect();
    // Each point planned when the scheduler first looks at it (one at a time: never).
    let mut stale: Vec<Option<BTreeSet<String>>> = vec![None; sweep.len()];
    let mut pending: Vec<usize> = which.to_vec();
    let mut running: Vec<usize> = Vec::new();
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<Ended, String>)>();
    let mut finished = 0;
    std::thread::scope(|scope| {
        while finished < which.len() {
            let mut start = match jobs {
                1 => Vec::new(),
                _ => startable(&pending, &mut stale, &running, jobs - running.len(), |p| {
                    stale_stages(args, &plan.text, &all[p])
                }),
            };
            if start.is_empty() && running.is_empty() {
                start.push(pending[0]);
            }
            for p in start {
                pending.retain(|&q| q != p);
                running.push(p);
                let run = point_run(args, &all[p], threads, p);
                let cached = remote
                    && stale[p]
                        .get_or_insert_with(|| stale_stages(args, &plan.text, &all[p]))
                        .is_empty();
                sweep[p].ran_with = all[p].clone();
                let tx = done_tx.clone();
                let executor = &runner.executor;
                scope.spawn(move || {
                    let ended = match cached {
                        true => executor::local().run(&run),
                        false => executor.run(&run),
                    };
                    let _ = tx.send((p, ended));
                });
            }
            let Ok((p, result)) = done_rx.recv() else {
                break;
            };
            running.retain(|&q| q != p);
            finished += 1;
            let point = &mut sweep[p];
            match result {
                Ok(ended) => {
                    point.job = ended.job;
                    match serde_json::from_slice::<Value>(&ended.stdout) {
                        Ok(report) => point.report = Some(report),
                        Err(_) => point.failure = Some(ended.stderr),
                    }
                }
                Err(why) => point.failure = Some(why),
            }
            let value = point
                .value(monitor)
                .map_or("-".into(), crate::summary::value);
            say(&format!(
                "[{finished}/{}] point {} ({}): {} · {} {value}",
                which.len(),
                p + 1,
                point.label(),
                point.statuses(),
                monitor.name()
            ));
            if let Some(why) = &point.failure {
                say(&format!("  {}", why.replace('\n', "\n  ")));
            } else if !point.ok() {
                if let Some(error) = point.report.as_ref().and_then(first_error) {
                    say(&format!("  {error}"));
                }
            }
        }
    });
}

/// The first stage error of a failed run's report, else the first diagnostic of a run
/// that could not start.
fn first_error(report: &Value) -> Option<String> {
    let stages = report["stages"].as_array().into_iter().flatten();
    let diagnostics = report["diagnostics"].as_array().into_iter().flatten();
    (stages.map(|s| &s["error"]["message"]))
        .chain(diagnostics.map(|d| &d["message"]))
        .find_map(|m| m.as_str().map(str::to_string))
}

/// The points by the monitored metric, best first: the swept values, the monitor, the
/// stages' statuses.
fn table(sweep: &[Point], order: &[usize], plan: &Plan, monitor: &Monitor) -> String {
    let mut header = vec!["rank".to_string(), "point".to_string()];
    header.extend(plan.grid.iter().map(|a| escaped(&a.key)));
    header.extend(plan.random.iter().map(|r| escaped(&r.key)));
    header.push(monitor.name());
    let halved = plan.halving.is_some();
    if halved {
        header.push("epochs".into());
    }
    header.push("stages".into());
    let mut rows = vec![header];
    for (rank, &i) in order.iter().enumerate() {
        let p = &sweep[i];
        let mut row = vec![(rank + 1).to_string(), (i + 1).to_string()];
        row.extend(p.overrides.iter().map(|o| escaped(&o.value)));
        row.push(p.value(monitor).map_or("-".into(), crate::summary::value));
        if halved {
            row.push(p.rungs.last().map_or("-".into(), |r| r.0.to_string()));
        }
        row.push(p.statuses());
        rows.push(row);
    }
    summary::columns(&rows)
}

/// A progress line on stderr, with the control characters of the user's names and values
/// escaped.
fn say(line: &str) {
    eprintln!("{}", manifests::escape_controls(line));
}
