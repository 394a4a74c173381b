//! `pipeline sweep`: a 2 × 2 grid over the learning rate and the eval stage's batch size
//! trains exactly twice (one point at a time, and two at once), and a second invocation
//! runs nothing and prints the same table; a sweep killed mid-way and run again ends with
//! the table of one never stopped; two sweeps at once compute each stage once between
//! them and leave the cache consistent; random draws are the same from a seed; bad grids,
//! points and monitors are refused before anything runs.

mod common;

use common::{pipeline, text};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;

const GRID: [&str; 6] = [
    "--grid",
    "optimizer.lr=0.003,0.01",
    "--grid",
    "test.batch-size=100,300",
    "--set",
    "train.epochs=2",
];

fn sweep(dir: &Path, extra: &[&str]) -> (Value, String) {
    let mut args = vec!["sweep", "digits.kdl", "--json"];
    args.extend(GRID);
    args.extend(extra);
    let out = pipeline(dir, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        text(&out.stderr),
    )
}

/// How many points ran (not found cached) a stage of kind `kind`.
fn ran(result: &Value, kind: &str) -> usize {
    result["points"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["stages"].as_array().unwrap())
        .filter(|s| s["kind"] == kind && s["status"] == "ran")
        .count()
}

/// The ranking: each point's number, overrides and monitored value, best first.
fn ranking(result: &Value) -> Vec<(u64, Value, f64)> {
    result["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["point"].as_u64().unwrap(),
                p["overrides"].clone(),
                p["monitor"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_grid_shares_its_trainings_and_a_second_sweep_runs_nothing() {
    for jobs in ["1", "2"] {
        let dir = common::digits_project();
        let d = dir.path();
        let (first, log) = sweep(d, &["--jobs", jobs]);
        assert_eq!(first["monitor"], "test.accuracy");
        assert_eq!(first["mode"], "max");
        assert_eq!(ran(&first, "train"), 2, "jobs {jobs}: {first:#}\n{log}");
        assert_eq!(ran(&first, "eval"), 4, "{first:#}");
        let ranked = ranking(&first);
        assert_eq!(ranked.len(), 4);
        assert!(
            ranked.windows(2).all(|w| w[0].2 >= w[1].2),
            "best first: {ranked:?}"
        );
        // The batch size of an evaluation does not change its accuracy.
        for (_, overrides, accuracy) in &ranked {
            let twin = ranked
                .iter()
                .find(|r| {
                    r.1["optimizer.lr"] == overrides["optimizer.lr"]
                        && r.1["test.batch-size"] != overrides["test.batch-size"]
                })
                .unwrap();
            assert_eq!(twin.2, *accuracy);
        }
        let (again, _) = sweep(d, &["--jobs", jobs]);
        assert_eq!(ran(&again, "train") + ran(&again, "eval"), 0, "{again:#}");
        assert_eq!(ranking(&again), ranked);
    }
    // The table, the same twice.
    let dir = common::digits_project();
    let d = dir.path();
    let mut args = vec!["sweep", "digits.kdl"];
    args.extend(GRID);
    let table = |args: &[&str]| {
        let out = pipeline(d, args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let once = table(&args);
    let lines: Vec<&str> = once.lines().collect();
    assert!(
        lines[0].starts_with("rank  point  optimizer.lr  test.batch-size  test.accuracy  stages"),
        "{once}"
    );
    assert_eq!(lines.len(), 5, "{once}");
    let twice = table(&args);
    let without_status = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| {
                l.split("  ")
                    .filter(|c| !c.is_empty())
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect()
    };
    assert_eq!(without_status(&twice), without_status(&once));
    assert!(
        twice.lines().skip(1).all(|l| !l.contains(" ran")),
        "{twice}"
    );
}

#[test]
fn a_killed_sweep_run_again_ends_with_the_same_table() {
    let whole = common::digits_project();
    let (uninterrupted, _) = sweep(whole.path(), &[]);
    let dir = common::digits_project();
    let d = dir.path();
    let mut args = vec!["sweep", "digits.kdl", "--json"];
    args.extend(GRID);
    // In a process group of its own, killed whole as Ctrl-C would kill it.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .process_group(0)
        .args(&args)
        .current_dir(d)
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the first training is in the cache.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let entries =
        |d: &Path| std::fs::read_dir(d.join(".pipeline/cache/entries")).map_or(0, |e| e.count());
    while entries(d) < 1 {
        assert!(std::time::Instant::now() < deadline, "nothing was cached");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let group = format!("-{}", child.id());
    let killed = std::process::Command::new("kill")
        .args(["-9", "--", &group])
        .status()
        .unwrap();
    assert!(killed.success());
    child.wait().unwrap();
    let (resumed, _) = sweep(d, &[]);
    assert_eq!(ranking(&resumed), ranking(&uninterrupted));
    // Only what was missing: the second training (the first was cached before the kill).
    assert_eq!(ran(&resumed, "train"), 1, "{resumed:#}");
}

#[test]
fn bad_grids_points_and_monitors_are_refused_before_anything_runs() {
    let dir = common::digits_project();
    let d = dir.path();
    let refused = |args: &[&str], code: i32| {
        let mut all = vec!["sweep", "digits.kdl"];
        all.extend(args);
        common::refused(d, &all, code)
    };
    // A key that does not exist: said once, for every point.
    let e = refused(&["--grid", "optimizer.learning-rate=0.1,0.2"], 1);
    assert_eq!(
        e.matches("--set optimizer.learning-rate=…: `optimizer` has no key")
            .count(),
        1,
        "{e}"
    );
    assert!(
        e.contains("in points 1 (optimizer.learning-rate=0.1), 2 (optimizer.learning-rate=0.2)"),
        "{e}"
    );
    assert!(
        e.ends_with("error: 2 of 2 points are invalid; nothing was run\n"),
        "{e}"
    );
    // A value of the wrong type: the point it came from.
    let e = refused(&["--grid", "optimizer.lr=0.1,fast"], 1);
    assert!(e.contains("in point 2 (optimizer.lr=fast)"), "{e}");
    assert!(
        e.ends_with("error: 1 of 2 points are invalid; nothing was run\n"),
        "{e}"
    );
    // A metric nothing computes.
    assert_eq!(
        refused(&["--grid", "optimizer.lr=0.1,0.2", "--monitor", "test.r2"], 1),
        "error: --monitor `test.r2`: stage `test` does not compute `r2`; it computes loss, samples, accuracy\n"
    );
    // An empty grid, a key swept twice, no jobs.
    assert!(
        refused(&["--grid", "optimizer.lr="], 2).contains("the grid of `optimizer.lr` is empty")
    );
    assert_eq!(
        refused(
            &["--grid", "optimizer.lr=0.1", "--grid", "optimizer.lr=0.2"],
            1
        ),
        "error: `optimizer.lr` is swept twice\n"
    );
    assert!(refused(&["--grid", "optimizer.lr=0.1", "--jobs", "0"], 2).contains("--jobs"));
    assert!(!d.join(".pipeline").exists(), "nothing ran");
}

#[test]
fn random_draws_are_the_same_from_a_seed() {
    let dir = common::digits_project();
    let d = dir.path();
    let args = [
        "sweep",
        "digits.kdl",
        "--json",
        "--random",
        "optimizer.lr=log(1e-3,3e-2)",
        "--trials",
        "3",
        "--seed",
        "5",
        "--set",
        "train.epochs=2",
    ];
    let run = || {
        let out = pipeline(d, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let first = run();
    assert_eq!(ran(&first, "train"), 3, "{first:#}");
    for (_, overrides, _) in ranking(&first) {
        let lr: f64 = overrides["optimizer.lr"].as_str().unwrap().parse().unwrap();
        assert!((1e-3..=3e-2).contains(&lr), "{lr}");
    }
    // The same points again: all cached.
    let again = run();
    assert_eq!(ran(&again, "train"), 0, "{again:#}");
    assert_eq!(ranking(&again), ranking(&first));
}

#[test]
fn two_sweeps_at_once_share_the_cache_and_leave_it_consistent() {
    let dir = common::digits_project();
    let d = dir.path();
    let mut args = vec!["sweep", "digits.kdl", "--json"];
    args.extend(GRID);
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(&args)
            .current_dir(d)
            .env_remove("PIPELINE_CACHE_DIR")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    let results: Vec<Value> = [a, b]
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    // Each stage computed once between them (a lock per stage), the same ranking.
    assert_eq!(
        ran(&results[0], "train") + ran(&results[1], "train"),
        2,
        "{results:#?}"
    );
    assert_eq!(ranking(&results[0]), ranking(&results[1]));
    let verify = pipeline(d, &["cache", "verify"]);
    assert!(verify.status.success(), "{}", text(&verify.stderr));
    assert!(
        text(&verify.stdout).ends_with("entries checked, 0 corrupt\n")
            || text(&verify.stderr).ends_with("entries checked, 0 corrupt\n"),
        "{}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
    let (third, _) = sweep(d, &[]);
    assert_eq!(ran(&third, "train") + ran(&third, "eval"), 0);
}
