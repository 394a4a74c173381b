//! Every exit path of `run --json`, `cache ls --json`, `sweep --json` and `runs … --json`
//! prints exactly one JSON document on stdout (`check --json` and `status --json`:
//! `tests/e2e/check_robustness.rs`).

use crate::common::{self, pipeline, root, text};
use serde_json::Value;

/// The one JSON document on stdout.
fn document(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {:?}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

#[test]
fn run_json_fails_with_one_document() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("tests/fixtures/data/tiny.csv"),
        dir.path().join("tiny.csv"),
    )
    .unwrap();
    let good = "data { source \"tiny.csv\"; }\nmodel { linear 3; }\nloss \"cross-entropy\"\noptimizer \"sgd\"\ntrain epochs=1\n";
    std::fs::write(dir.path().join("good.kdl"), good).unwrap();
    std::fs::write(dir.path().join("bad.kdl"), good.replace("sgd", "sgdd")).unwrap();
    std::fs::write(
        dir.path().join("nodata.kdl"),
        good.replace("tiny.csv", "missing.csv"),
    )
    .unwrap();
    for (args, code) in [
        (
            vec!["run", "bad.kdl", "--json"],
            "pipeline::manifest::unknown_value",
        ),
        (
            vec!["run", "absent.kdl", "--json"],
            "pipeline::manifest::unreadable",
        ),
        (
            vec!["run", "nodata.kdl", "--json"],
            "pipeline::data::missing_file",
        ),
        (
            // Two processes without a strategy: every rank refuses; rank 0's document
            // comes through the launcher.
            vec!["run", "good.kdl", "--json", "--nproc-per-node", "2"],
            "pipeline::accelerator::processes_without_strategy",
        ),
    ] {
        let out = pipeline(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let doc = document(&out);
        assert_eq!(doc["ok"], false, "{args:?}");
        assert_eq!(doc["diagnostics"][0]["code"], code, "{args:?}: {doc:#}");
    }
    let out = pipeline(dir.path(), &["run", "good.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(document(&out)["ok"], true);
}

#[test]
fn cache_ls_json_refusing_a_foreign_directory_is_one_document() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    let out = pipeline(dir.path(), &["cache", "ls", "--json", "--cache-dir", "."]);
    assert_eq!(out.status.code(), Some(1));
    let doc = document(&out);
    assert_eq!(doc["ok"], false);
    assert_eq!(
        doc["diagnostics"][0]["code"],
        "pipeline::cache::not_a_cache"
    );
}

#[test]
fn check_refuses_a_pipe_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("d.csv");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(
        dir.path().join("p.kdl"),
        "data { source \"d.csv\"; }\nmodel { linear 3; }\nloss \"cross-entropy\"\noptimizer \"sgd\"\ntrain epochs=1\n",
    )
    .unwrap();
    let out = pipeline(dir.path(), &["check", "p.kdl", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        document(&out)["diagnostics"][0]["code"],
        "pipeline::data::not_a_file"
    );
}

#[test]
fn sweep_json_fails_with_one_document() {
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    std::fs::write(d.join("bad.kdl"), common::SMALL.replace("adam", "adamm")).unwrap();
    let grid = ["--grid", "optimizer.lr=0.1,0.2"];
    let with = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.push("--json".into());
        all
    };
    let sweep = |more: &[&str]| -> Vec<String> {
        let mut all = vec!["sweep", "small.kdl"];
        all.extend(more);
        with(&all)
    };
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            with(&["sweep", "bad.kdl", "--grid", "optimizer.lr=0.1,0.2"]),
            1,
            "pipeline::manifest::unknown_value",
        ),
        (
            with(&["sweep", "absent.kdl"]),
            1,
            "pipeline::manifest::unreadable",
        ),
        (sweep(&[]), 1, "pipeline::sweep::empty"),
        (
            sweep(&["--grid", "optimizer.lr=0.1", "--grid", "optimizer.lr=0.2"]),
            1,
            "pipeline::sweep::swept_twice",
        ),
        (
            sweep(&[
                "--random",
                "optimizer.lr=log(1e-4,1e-2)",
                "--trials",
                "1000000000000",
            ]),
            1,
            "pipeline::sweep::too_many_points",
        ),
        (
            sweep(&["--random", "optimizer.lr=log(1e-4,1e-2)"]),
            1,
            "pipeline::sweep::no_trials",
        ),
        (
            sweep(&["--grid", "sweep.jobs=1,2"]),
            1,
            "pipeline::sweep::swept_setting",
        ),
        (
            sweep(&[grid[0], grid[1], "--set", "optimizer.lr=0.3"]),
            1,
            "pipeline::sweep::swept_and_set",
        ),
        (
            sweep(&[grid[0], grid[1], "--halving", "eta=2"]),
            1,
            "pipeline::sweep::bad_halving",
        ),
        (
            sweep(&[grid[0], grid[1], "--halving", "min-epochs=3"]),
            1,
            "pipeline::sweep::bad_halving",
        ),
        (
            sweep(&[grid[0], grid[1], "--monitor", "test.r2"]),
            1,
            "pipeline::sweep::bad_monitor",
        ),
        (
            sweep(&["--grid", "optimizer.lr=0.1,fast"]),
            1,
            "pipeline::manifest::wrong_type",
        ),
        (
            sweep(&[
                grid[0],
                grid[1],
                "--halving",
                "min-epochs=1",
                "--halving",
                "eta=2",
            ]),
            2,
            "pipeline::cli::usage",
        ),
    ];
    for (args, status, code) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = pipeline(d, &args);
        assert_eq!(
            out.status.code(),
            Some(*status),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let doc = document(&out);
        assert_eq!(doc["ok"], false, "{args:?}");
        assert_eq!(doc["diagnostics"][0]["code"], *code, "{args:?}: {doc:#}");
    }
    // Points that are invalid: each error with the points it came from, then the count.
    let out = pipeline(d, &args_of(&sweep(&["--grid", "optimizer.lr=0.1,fast"])));
    let doc = document(&out);
    let diagnostics = doc["diagnostics"].as_array().unwrap();
    assert_eq!(diagnostics.len(), 2, "{doc:#}");
    assert!(
        diagnostics[0]["message"]
            .as_str()
            .unwrap()
            .ends_with("(in point 2 (optimizer.lr=fast))"),
        "{doc:#}"
    );
    assert_eq!(diagnostics[0]["file"], "small.kdl");
    assert_eq!(
        diagnostics[1]["message"],
        "1 of 2 points are invalid; nothing was run"
    );
    assert_eq!(diagnostics[1]["code"], "pipeline::sweep::invalid_points");
    assert!(!d.join(".pipeline").exists(), "nothing ran");
}

#[test]
fn runs_json_fails_with_one_document() {
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    for (args, code) in [
        (
            &["runs", "show", "nope", "--file", "small.kdl", "--json"][..],
            "pipeline::runs::unknown_run",
        ),
        (
            &[
                "runs",
                "diff",
                "last~1",
                "last",
                "--file",
                "small.kdl",
                "--json",
            ],
            "pipeline::runs::unknown_run",
        ),
        (
            &["runs", "missing.kdl", "--json"],
            "pipeline::manifest::unreadable",
        ),
        (
            &["runs", "show", "last", "--file", "missing.kdl", "--json"],
            "pipeline::manifest::unreadable",
        ),
    ] {
        let out = pipeline(d, args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let doc = document(&out);
        assert_eq!(doc["ok"], false, "{args:?}");
        assert_eq!(doc["diagnostics"][0]["code"], code, "{args:?}: {doc:#}");
    }
    let out = pipeline(d, &["runs", "small.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(document(&out), serde_json::json!({"ok": true, "runs": []}));
}

fn args_of(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
