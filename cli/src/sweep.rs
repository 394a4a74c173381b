//! `pipeline sweep FILE --grid KEY=V1,V2,… [--grid …] [--random KEY=log(a,b) --trials N
//! --seed S] [--jobs J] [--monitor STAGE.METRIC] [--mode min|max] [--json]`: the manifest
//! run at every point of the grid (and every random draw), each point a
//! `pipeline run` with its `--set`s. Every point is checked before anything runs. The
//! cache does the sharing: a stage whose fingerprint no swept key reaches is computed by
//! the first point and found cached by the others, and a sweep run again (after an
//! interruption) computes only what is missing. With `--jobs J`, J points run at once
//! with the cores divided between them, and a point waits while another computes a stage
//! it shares. The result: a table of the points by the monitored metric, best first.
//!
//! With `--halving min-epochs=N eta=E` the points run in rungs: all of them for N
//! epochs, the best 1/E of those for N×E, and so on up to the manifest's epochs; each
//! rung continues the trainings of the one before from the cache (`extend`), and the
//! table says where each point stopped.

use crate::cli::{SweepArgs, SweepMode};
use crate::load::Loaded;
use crate::{prepare, render, summary};
use manifests::{Mode, Override, SweptKey};
use pipeline_core::sweep::{points, startable, Axis, Halving, Monitor, Random};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::mpsc;

/// One point of the sweep: its overrides and, once run, its report.
struct Point {
    overrides: Vec<Override>,
    report: Option<Value>,
    /// Why it has no report (the run's last words).
    failure: Option<String>,
    /// Under `--halving`: the epochs of each rung it ran, and its monitored value there.
    rungs: Vec<(u64, Option<f64>)>,
}

impl Point {
    fn label(&self) -> String {
        self.overrides
            .iter()
            .map(Override::to_string)
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

/// The sweep to run: the command line's flags over the manifest's `sweep` block.
struct Plan {
    grid: Vec<Axis>,
    random: Vec<Random>,
    trials: u64,
    seed: u64,
    jobs: usize,
    monitor: Option<String>,
    maximize: Option<bool>,
    halving: Option<Halving>,
}

impl Plan {
    /// `args` over the `sweep` block of the manifest (read with `args.set`): a key given
    /// on the command line replaces the block's grid or draw of it, any other flag the
    /// block's setting. `None` after saying why not (the manifest's own errors included).
    fn of(args: &SweepArgs) -> Option<Plan> {
        let loaded = Loaded::read_with_sweep(&args.file, &args.set);
        let block = loaded.report()?.sweep.as_ref();
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
        let halving = match &args.halving {
            Some(settings) => match Halving::parse(settings) {
                Ok(h) => Some(h),
                Err(why) => {
                    eprintln!("error: {why}");
                    return None;
                }
            },
            None => block.and_then(|b| b.halving.as_ref()).map(Halving::of),
        };
        Some(Plan {
            grid,
            random,
            trials: args.trials.or(block.map(|b| b.trials)).unwrap_or(0),
            seed: args.seed.or(block.map(|b| b.seed)).unwrap_or(0),
            jobs: args
                .jobs
                .map_or(block.map_or(1, |b| b.jobs as usize), |j| j as usize),
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
        })
    }
}

pub fn run(args: &SweepArgs) -> bool {
    let Some(plan) = Plan::of(args) else {
        return false;
    };
    let grid = match points(&plan.grid, &plan.random, plan.trials, plan.seed) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("error: {why}");
            return false;
        }
    };
    let halving = plan.halving.clone();
    let Some(Checked {
        points: mut sweep,
        monitor,
        budget,
    }) = check(args, &plan, grid)
    else {
        return false;
    };
    let total = sweep.len();
    eprintln!(
        "sweep of {}: {total} points, {} at once, ranked by {} ({})",
        args.file.display(),
        plan.jobs,
        monitor.name(),
        if monitor.maximize { "max" } else { "min" }
    );
    let all: Vec<usize> = (0..total).collect();
    match (&halving, budget) {
        (Some(halving), Some(budget)) => {
            halve(args, plan.jobs, &mut sweep, halving, budget, &monitor)
        }
        (None, _) => execute(args, plan.jobs, &mut sweep, &all, None, &monitor),
        (Some(_), None) => unreachable!("`check` finds the budget of a halving"),
    }
    // The points that ran well first; under halving, those that went furthest first.
    let rank = |p: &Point| (!p.ok(), std::cmp::Reverse(p.rungs.len()));
    let mut order = all;
    order.sort_by(|&a, &b| {
        let (a, b) = (&sweep[a], &sweep[b]);
        (rank(a).cmp(&rank(b))).then(monitor.order(a.value(&monitor), b.value(&monitor)))
    });
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
        println!(
            "{}",
            json!({"ok": ok, "monitor": monitor.name(), "mode": if monitor.maximize { "max" } else { "min" }, "points": points})
        );
    } else {
        print!("{}", table(&sweep, &order, &plan, &monitor));
    }
    sweep.iter().all(Point::ok)
}

/// An error of some points of the sweep.
struct Invalid {
    /// As rendered for the first point it was found in.
    text: String,
    /// The same, without that point's swept values.
    general: String,
    /// The points it was found in.
    points: Vec<usize>,
}

/// A sweep whose points are all valid.
struct Checked {
    points: Vec<Point>,
    monitor: Monitor,
    /// Under `--halving`: the train stage whose epochs are the budget, and those epochs.
    budget: Option<(String, u64)>,
}

/// Every point checked (diagnostics shown once, with the points they come from), the
/// monitor found, and under `--halving` the budget; `None` after saying why not.
fn check(args: &SweepArgs, plan: &Plan, grid: Vec<Vec<Override>>) -> Option<Checked> {
    let halving = plan.halving.as_ref();
    let mut errors: Vec<Invalid> = Vec::new();
    let mut sweep = Vec::new();
    let mut monitor = None;
    let mut budget = None;
    for (i, swept) in grid.into_iter().enumerate() {
        let mut overrides = args.set.clone();
        overrides.extend(swept.iter().cloned());
        let loaded = Loaded::read_to_run(&args.file, &overrides, &args.cache);
        match loaded.checked.valid() {
            None => {
                for d in loaded
                    .checked
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == manifests::Severity::Error)
                {
                    let text = render::human(d, loaded.source.as_ref());
                    // The same error at every value of a key (a key that does not exist)
                    // is one error: told apart without the point's own values.
                    let general = swept.iter().fold(text.clone(), |t, o| {
                        t.replace(&o.to_string(), &format!("{}=…", o.path.join(".")))
                    });
                    match errors.iter_mut().find(|e| e.general == general) {
                        Some(e) => e.points.push(i),
                        None => errors.push(Invalid {
                            text,
                            general,
                            points: vec![i],
                        }),
                    }
                }
            }
            Some(manifest) => {
                if monitor.is_none() {
                    match Monitor::of(manifest, plan.monitor.as_deref(), plan.maximize) {
                        Ok(m) => monitor = Some(m),
                        Err(why) => {
                            eprintln!("error: {why}");
                            return None;
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
                            let index = manifest.stages.iter().position(|s| s.name() == b.0);
                            let hindrance = index
                                .and_then(|i| pipeline_core::extend::hindrance(manifest, i, 1));
                            if let Some(why) = hindrance {
                                eprintln!(
                                    "warning: each rung trains stage `{}` from the start: {why}",
                                    b.0
                                );
                            }
                            budget = Some(b);
                        }
                        Err(why) => {
                            eprintln!("error: {why}");
                            return None;
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
        });
    }
    if !errors.is_empty() {
        for Invalid {
            text,
            general,
            points,
        } in &errors
        {
            eprint!("{}", if points.len() == 1 { text } else { general });
            let labels: Vec<String> = points
                .iter()
                .map(|&i| format!("{} ({})", i + 1, sweep[i].label()))
                .collect();
            eprintln!(
                "  in point{} {}\n",
                if points.len() == 1 { "" } else { "s" },
                labels.join(", ")
            );
        }
        let bad: BTreeSet<usize> = errors
            .iter()
            .flat_map(|e| e.points.iter().copied())
            .collect();
        eprintln!(
            "error: {} of {} points are invalid; nothing was run",
            bad.len(),
            sweep.len()
        );
        return None;
    }
    Some(Checked {
        points: sweep,
        monitor: monitor.expect("a valid point sets the monitor"),
        budget,
    })
}

/// Successive halving: the rungs, each the surviving points with the rung's epochs, the
/// best 1/eta of each rung going on to the next.
fn halve(
    args: &SweepArgs,
    jobs: usize,
    sweep: &mut [Point],
    halving: &Halving,
    (stage, epochs): (String, u64),
    monitor: &Monitor,
) {
    let rungs = halving.rungs(epochs);
    let mut alive: Vec<usize> = (0..sweep.len()).collect();
    for (k, &rung) in rungs.iter().enumerate() {
        eprintln!(
            "rung {} of {}: {} point{} × {rung} epochs of stage `{stage}`",
            k + 1,
            rungs.len(),
            alive.len(),
            if alive.len() == 1 { "" } else { "s" }
        );
        let epochs = Override {
            path: vec![stage.clone(), "epochs".into()],
            value: rung.to_string(),
        };
        execute(args, jobs, sweep, &alive, Some(&epochs), monitor);
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
fn stale_stages(args: &SweepArgs, overrides: &[Override]) -> BTreeSet<String> {
    let loaded = Loaded::read_to_run(&args.file, overrides, &args.cache);
    let Some(manifest) = loaded.checked.valid() else {
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

/// Runs the points `which` (with `extra` after their overrides), `jobs` at once.
fn execute(
    args: &SweepArgs,
    jobs: usize,
    sweep: &mut [Point],
    which: &[usize],
    extra: Option<&Override>,
    monitor: &Monitor,
) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (jobs > 1).then(|| (cores / jobs).max(1));
    let exe = std::env::current_exe().expect("the running binary has a path");
    let overrides = |p: usize| -> Vec<Override> {
        let point = sweep[p].overrides.iter().chain(extra);
        args.set.iter().chain(point).cloned().collect()
    };
    let mut stale: Vec<BTreeSet<String>> = vec![BTreeSet::new(); sweep.len()];
    for &p in which {
        stale[p] = stale_stages(args, &overrides(p));
    }
    let all: Vec<Vec<Override>> = (0..sweep.len()).map(overrides).collect();
    let mut pending: Vec<usize> = which.to_vec();
    let mut running: Vec<usize> = Vec::new();
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<Value, String>)>();
    let mut finished = 0;
    while finished < which.len() {
        let mut start = startable(&pending, &stale, &running, jobs - running.len());
        if start.is_empty() && running.is_empty() {
            start.push(pending[0]);
        }
        for p in start {
            pending.retain(|&q| q != p);
            running.push(p);
            let mut command = Command::new(&exe);
            command.arg("run").arg(&args.file).arg("--json");
            if let Some(dir) = &args.cache.dir {
                command.arg("--cache-dir").arg(dir);
            }
            for o in &all[p] {
                command.arg("--set").arg(o.to_string());
            }
            if let Some(t) = threads {
                command.arg("--set").arg(format!("accelerator.threads={t}"));
            }
            let tx = done_tx.clone();
            std::thread::spawn(move || {
                let out = command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .output();
                let result = match out {
                    Err(e) => Err(format!("cannot start `pipeline run`: {e}")),
                    Ok(out) => serde_json::from_slice::<Value>(&out.stdout).map_err(|_| {
                        let err = String::from_utf8_lossy(&out.stderr);
                        let tail: Vec<&str> = err.lines().rev().take(8).collect();
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    }),
                };
                let _ = tx.send((p, result));
            });
        }
        let Ok((p, result)) = done_rx.recv() else {
            break;
        };
        running.retain(|&q| q != p);
        finished += 1;
        match result {
            Ok(report) => sweep[p].report = Some(report),
            Err(why) => sweep[p].failure = Some(why),
        }
        let point = &sweep[p];
        let value = point
            .value(monitor)
            .map_or("-".into(), |v| format!("{v:.4}"));
        eprintln!(
            "[{finished}/{}] point {} ({}): {} · {} {value}",
            which.len(),
            p + 1,
            point.label(),
            point.statuses(),
            monitor.name()
        );
        if let Some(why) = &point.failure {
            eprintln!("  {}", why.replace('\n', "\n  "));
        } else if !point.ok() {
            if let Some(error) = point.report.as_ref().and_then(first_error) {
                eprintln!("  {error}");
            }
        }
    }
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
    header.extend(plan.grid.iter().map(|a| a.key.clone()));
    header.extend(plan.random.iter().map(|r| r.key.clone()));
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
        row.extend(p.overrides.iter().map(|o| o.value.clone()));
        row.push(p.value(monitor).map_or("-".into(), |v| format!("{v:.4}")));
        if halved {
            row.push(p.rungs.last().map_or("-".into(), |r| r.0.to_string()));
        }
        row.push(p.statuses());
        rows.push(row);
    }
    summary::columns(&rows)
}
