//! `pipeline sweep`: a 2 × 2 grid over the learning rate and the eval stage's batch size
//! trains exactly twice (one point at a time, and two at once), and a second invocation
//! runs nothing and prints the same table; a sweep killed mid-way and run again ends with
//! the table of one never stopped; two sweeps at once compute each stage once between
//! them and leave the cache consistent; random draws are the same from a seed; bad grids,
//! points and monitors are refused before anything runs.

use crate::common;

use crate::common::{pipeline, text};
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
    // Halving: without its first rung, with nothing to halve, sweeping its own key.
    let halving = |settings: &[&str], more: &[&str]| {
        let mut args = vec!["--grid", "optimizer.lr=0.1,0.2"];
        args.extend(more);
        args.push("--halving");
        args.extend(settings);
        refused(&args, 1)
    };
    assert_eq!(
        halving(&["eta=2"], &[]),
        "error: --halving needs min-epochs=N (the first rung's epochs)\n"
    );
    assert_eq!(
        halving(&["min-epochs=30"], &[]),
        "error: --halving min-epochs=30 is not below stage `train`'s 30 epochs: there is nothing to halve\n"
    );
    assert_eq!(
        halving(&["min-epochs=2", "stage=pretrain"], &[]),
        "error: --halving stage=pretrain: no train stage is named so (train stages: train)\n"
    );
    assert_eq!(
        halving(&["min-epochs=2"], &["--grid", "train.epochs=10,20"]),
        "error: --halving sets `train.epochs` itself: it cannot be swept too\n"
    );
    assert!(!d.join(".pipeline").exists(), "nothing ran");
}

/// Four learning rates, halved from 1 epoch to 2 and 4.
const HALVING: [&str; 9] = [
    "--grid",
    "optimizer.lr=0.001,0.003,0.01,0.03",
    "--halving",
    "min-epochs=1",
    "eta=2",
    "--set",
    "train.epochs=4",
    // A cosine of its own length: a longer training continues a shorter one.
    "--set",
    "schedule.length-epochs=10",
];

#[test]
fn successive_halving_continues_the_best_points_without_repeating_a_step() {
    let dir = common::digits_project();
    let d = dir.path();
    let mut args = vec!["sweep", "digits.kdl", "--json"];
    args.extend(HALVING);
    let run = || {
        let out = pipeline(d, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        (result, text(&out.stderr))
    };
    let (result, log) = run();
    assert!(
        log.contains("rung 1 of 3: 4 points × 1 epochs of stage `train`")
            && log.contains("rung 2 of 3: 2 points × 2 epochs of stage `train`")
            && log.contains("rung 3 of 3: 1 point × 4 epochs of stage `train`"),
        "{log}"
    );
    assert!(!log.contains("warning"), "{log}");
    let points = result["points"].as_array().unwrap();
    let reached: Vec<u64> = points
        .iter()
        .map(|p| p["epochs"].as_u64().unwrap())
        .collect();
    assert_eq!(reached, [4, 2, 1, 1]);
    // Each rung's survivors are the best half of the rung before.
    let at = |p: &Value, rung: usize| p["rungs"][rung]["monitor"].as_f64().unwrap();
    let first: Vec<f64> = points.iter().map(|p| at(p, 0)).collect();
    assert!(
        first[0].min(first[1]) >= first[2].max(first[3]),
        "{first:?}"
    );
    assert!(at(&points[0], 1) >= at(&points[1], 1));
    // Every rung continued the one before: 4 + 2 × 1 + 1 × 2 epochs trained in all.
    let train = |p: &Value| p["stages"][0].clone();
    assert_eq!(train(&points[0])["resumed_at_epoch"], 3);
    assert_eq!(train(&points[1])["resumed_at_epoch"], 2);
    assert!(train(&points[2]).get("resumed_at_epoch").is_none());
    // The winner ends where a 4-epoch training of its learning rate from scratch ends.
    let lr = points[0]["overrides"]["optimizer.lr"].as_str().unwrap();
    let lr = format!("optimizer.lr={lr}");
    let fresh = pipeline(
        d,
        &[
            "run",
            "digits.kdl",
            "--json",
            "--no-cache",
            "--set",
            &lr,
            "--set",
            "train.epochs=4",
            "--set",
            "schedule.length-epochs=10",
        ],
    );
    let fresh: Value = serde_json::from_slice(&fresh.stdout).unwrap();
    assert_eq!(
        points[0]["monitor"],
        fresh["stages"][1]["metrics"]["accuracy"]
    );
    assert_eq!(train(&points[0])["metrics"], fresh["stages"][0]["metrics"]);
    // Again: every rung is cached, and the table is the same.
    let (again, _) = run();
    assert_eq!(ranking(&again), ranking(&result));
    assert_eq!(ran(&again, "train") + ran(&again, "eval"), 0);
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

/// The digits example with a `sweep` block: the 2 × 2 grid of [`GRID`].
fn with_block(dir: &Path) {
    let example = std::fs::read_to_string(dir.join("digits.kdl")).unwrap();
    let block = "\nsweep {\n    grid {\n        optimizer.lr 0.003 0.01\n        test.batch-size 100 300\n    }\n    monitor \"test.accuracy\"\n    jobs 2\n}\n";
    std::fs::write(dir.join("block.kdl"), example + block).unwrap();
}

#[test]
fn a_sweep_block_runs_as_its_flags_would_and_flags_replace_its_keys() {
    let dir = common::digits_project();
    let d = dir.path();
    with_block(d);
    let sweep_of = |file: &str, extra: &[&str]| {
        let mut args = vec!["sweep", file, "--json", "--set", "train.epochs=2"];
        args.extend(extra);
        let out = pipeline(d, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        (result, text(&out.stderr))
    };
    let (block, log) = sweep_of("block.kdl", &[]);
    assert!(
        log.contains("4 points, 2 at once, ranked by test.accuracy (max)"),
        "{log}"
    );
    assert_eq!(ran(&block, "train"), 2);
    // The same points as the flags give, two at once as the block says (each on half
    // the cores, a thread count in the key): all cached, the same table.
    let (flags, _) = sweep(d, &["--jobs", "2"]);
    assert_eq!(ranking(&flags), ranking(&block));
    assert_eq!(ran(&flags, "train") + ran(&flags, "eval"), 0);
    // A flag's key replaces the block's grid of it; other flags replace its settings.
    let (one, log) = sweep_of("block.kdl", &["--grid", "optimizer.lr=0.01", "--jobs", "1"]);
    assert!(log.contains("2 points, 1 at once"), "{log}");
    let lrs: Vec<&Value> = one["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["overrides"]["optimizer.lr"])
        .collect();
    assert_eq!(lrs, ["0.01", "0.01"]);
    // `pipeline run` leaves the block alone, and it is in no stage's key.
    let out = pipeline(
        d,
        &[
            "status",
            "block.kdl",
            "--json",
            "--set",
            "train.epochs=2",
            "--set",
            "optimizer.lr=0.01",
        ],
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["stages"][0]["status"], "fresh", "{status}");
}

#[test]
fn a_bad_sweep_block_is_refused_by_check_at_its_keys_and_values() {
    let dir = common::small_project("");
    let d = dir.path();
    std::fs::write(
        d.join("bad.kdl"),
        r#"pipeline "bad"
data {
    source "data/digits.csv.gz"
    split train=0.8 test=0.2
}
model {
    linear 10
}
loss "cross-entropy"
optimizer "adam" lr=1e-3
train epochs=3
eval "test" needs="train"
sweep {
    grid {
        optimizer.learning-rate 1e-3 3e-3
        optimizer.lr 1e-3 fast
        train.batch-size 0 64
        train.epochs 2 4
    }
    random trials=4 {
        optimizer.weight-decay "log(0,1)"
        optimizer.beta1 "uniform(0.5,1.5)"
    }
    monitor "test.r2"
    halving min-epochs=2
}
"#,
    )
    .unwrap();
    let out = pipeline(d, &["check", "bad.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    common::assert_fixture("sweep-block.check.stderr", &text(&out.stderr));
    // `sweep` says the same, and runs nothing.
    let out = pipeline(d, &["sweep", "bad.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("sweep.grid.optimizer.learning-rate"));
    assert!(!d.join(".pipeline").exists(), "nothing ran");
    // An empty block.
    let text_ = std::fs::read_to_string(d.join("bad.kdl")).unwrap();
    let empty = text_.split("sweep {").next().unwrap().to_string() + "sweep {\n    jobs 2\n}\n";
    std::fs::write(d.join("empty.kdl"), empty).unwrap();
    let e = common::refused(d, &["check", "empty.kdl"], 1);
    assert!(e.contains("the `sweep` block sweeps nothing"), "{e}");
    // A key swept in both blocks.
    let twice = text_.replace(
        "random trials=4 {",
        "random trials=4 {\n        optimizer.lr \"log(1e-4,1e-2)\"",
    );
    std::fs::write(d.join("twice.kdl"), twice).unwrap();
    let e = common::refused(d, &["check", "twice.kdl"], 1);
    assert!(e.contains("sweep: `optimizer.lr` is swept twice"), "{e}");
    // `--set` cannot give values to a block the manifest does not have.
    let plain = text_.split("sweep {").next().unwrap();
    std::fs::write(d.join("plain.kdl"), plain).unwrap();
    let e = common::refused(d, &["check", "plain.kdl", "--set", "sweep.jobs=2"], 1);
    assert!(
        e.contains("the manifest has no `sweep` block to set"),
        "{e}"
    );
}

/// The bytes of `path` in `dir`.
fn bytes(dir: &Path, path: &str) -> Vec<u8> {
    std::fs::read(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_files_at_the_manifests_paths_are_the_best_points() {
    // The better learning rate first: the point that runs last is the worse one.
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    let args = [
        "sweep",
        "small.kdl",
        "--grid",
        "optimizer.lr=0.01,0.000001",
        "--set",
        "train.epochs=1",
    ];
    let out = pipeline(d, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert_eq!(
        table.lines().last().unwrap(),
        "out/model.safetensors: the best point's, point 1 (optimizer.lr=0.01)",
        "{table}"
    );
    let left = bytes(d, "out/model.safetensors");
    // The best point's own run, answered from the cache, puts its checkpoint back: the
    // same bytes were already there.
    let best = pipeline(
        d,
        &[
            "run",
            "small.kdl",
            "--set",
            "optimizer.lr=0.01",
            "--set",
            "train.epochs=1",
        ],
    );
    assert!(best.status.success(), "{}", text(&best.stderr));
    assert_eq!(bytes(d, "out/model.safetensors"), left);
    // Again, all cached (each point's cached run puts its own file back), as JSON.
    let mut json = args.to_vec();
    json.push("--json");
    let out = pipeline(d, &json);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ran(&result, "train"), 0, "{result:#}");
    assert_eq!(
        result["outputs"],
        serde_json::json!({"paths": ["out/model.safetensors"], "point": 1, "error": null})
    );
    assert_eq!(bytes(d, "out/model.safetensors"), left);
}

#[test]
fn too_many_points_are_refused_before_anything_is_made() {
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    let refused = |args: &[&str]| {
        let mut all = vec!["sweep", "small.kdl"];
        all.extend(args);
        common::refused(d, &all, 1)
    };
    // A trillion draws: refused at once (it allocated 24 TB).
    assert_eq!(
        refused(&["--random", "optimizer.lr=log(1e-4,1e-2)", "--trials", "1000000000000"]),
        "error: 1,000,000,000,000 points (1,000,000,000,000 trials): a sweep runs at most 10,000\n  help: sweep fewer values, or draw fewer --trials\n"
    );
    // Grids whose values multiply past the bound.
    let values = |n: usize| (1..=n).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let (epochs, batch) = (
        format!("train.epochs={}", values(200)),
        format!("train.batch-size={}", values(100)),
    );
    assert_eq!(
        refused(&["--grid", &epochs, "--grid", &batch]),
        "error: 20,000 points (`train.epochs` 200 values × `train.batch-size` 100 values): a sweep runs at most 10,000\n  help: sweep fewer values, or draw fewer --trials\n"
    );
    assert!(!d.join(".pipeline").exists(), "nothing ran");
}

#[test]
fn a_block_of_too_many_points_or_sweeping_its_own_settings_is_refused_by_check() {
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    let values = (1..=100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let block = format!(
        "sweep {{\n    grid {{\n        sweep.jobs 1 2\n        optimizer.weight-decay 0 0.1\n\n        train.batch-size {values}\n    }}\n    random trials=1000 {{\n        optimizer.lr \"log(1e-4,1e-2)\"\n    }}\n}}\n"
    );
    std::fs::write(d.join("big.kdl"), format!("{}{block}", common::SMALL)).unwrap();
    let started = std::time::Instant::now();
    let out = pipeline(d, &["check", "big.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    common::assert_fixture("sweep-block-bounds.check.stderr", &text(&out.stderr));
    // `sweep` says the same, and runs nothing.
    let out = pipeline(d, &["sweep", "big.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("sweep: 400,000 points"),
        "{}",
        text(&out.stderr)
    );
    assert!(!d.join(".pipeline").exists(), "nothing ran");
    // (Checked without trying the million points: well under the minutes it took.)
    assert!(started.elapsed().as_secs() < 60);
}

#[test]
fn a_swept_key_set_too_a_halving_given_twice_and_a_swept_setting_are_refused() {
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    let refused = |args: &[&str], code: i32| {
        let mut all = vec!["sweep", "small.kdl"];
        all.extend(args);
        common::refused(d, &all, code)
    };
    assert_eq!(
        refused(&["--grid", "optimizer.lr=0.1,0.2", "--set", "optimizer.lr=0.3"], 1),
        "error: `optimizer.lr` is swept and also given with --set optimizer.lr=0.3: each point's value would replace it\n  help: sweep `optimizer.lr` or set it, not both: drop --set optimizer.lr=0.3, or its grid\n"
    );
    assert_eq!(
        refused(&["--random", "optimizer.lr=log(1e-4,1e-2)", "--trials", "2", "--set", "optimizer.lr=0.3"], 1),
        "error: `optimizer.lr` is swept and also given with --set optimizer.lr=0.3: each point's value would replace it\n  help: sweep `optimizer.lr` or set it, not both: drop --set optimizer.lr=0.3, or its grid\n"
    );
    // The block's key, too.
    let block = "sweep {\n    grid {\n        optimizer.lr 0.1 0.2\n    }\n}\n";
    std::fs::write(d.join("block.kdl"), format!("{}{block}", common::SMALL)).unwrap();
    let e = common::refused(d, &["sweep", "block.kdl", "--set", "optimizer.lr=0.3"], 1);
    assert!(
        e.starts_with("error: `optimizer.lr` is swept and also given with --set optimizer.lr=0.3"),
        "{e}"
    );
    // `--halving` twice, or one setting twice.
    let e = refused(
        &[
            "--grid",
            "optimizer.lr=0.1,0.2",
            "--halving",
            "min-epochs=1",
            "--halving",
            "min-epochs=2",
        ],
        2,
    );
    assert!(
        e.contains("'--halving <min-epochs=N [eta=3]>...' cannot be used multiple times"),
        "{e}"
    );
    assert_eq!(
        refused(&["--grid", "optimizer.lr=0.1,0.2", "--halving", "min-epochs=1", "min-epochs=2"], 1),
        "error: --halving min-epochs is given twice (min-epochs=1, then min-epochs=2): give each setting once\n"
    );
    // A setting of the sweep is not a point's.
    assert_eq!(
        refused(&["--grid", "sweep.jobs=1,2"], 1),
        "error: `sweep.jobs` is a setting of the sweep, not of its points: it cannot be swept\n  help: give it once: `pipeline sweep --jobs 2` (or `--set sweep.jobs=2`)\n"
    );
    assert!(!d.join(".pipeline").exists(), "nothing ran");
}

#[test]
fn an_executor_it_does_not_know_or_slurm_args_without_slurm_are_refused() {
    let dir = crate::common::digits_project();
    let sweep = |more: &[&str]| -> Vec<String> {
        let grid = ["sweep", "digits.kdl", "--grid", "optimizer.lr=0.1,0.2"];
        grid.iter().chain(more).map(|a| a.to_string()).collect()
    };
    let refused = |more: &[&str]| {
        let args = sweep(more);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::common::refused(dir.path(), &args, 1)
    };
    assert_eq!(
        refused(&["--executor", "k8s"]),
        "error: there is no executor `k8s`: --executor takes local or slurm\n"
    );
    assert_eq!(
        refused(&["--slurm-args", "--time=5"]),
        "error: --slurm-args is for --executor slurm, and this sweep runs on `local`\n"
    );
    let args = sweep(&["--executor", "k8s", "--json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = crate::common::pipeline(dir.path(), &args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(
        report["diagnostics"][0]["code"],
        "pipeline::sweep::executor"
    );
}
