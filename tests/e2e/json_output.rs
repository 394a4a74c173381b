//! Every exit path of `run --json` and `cache ls --json` prints exactly one JSON document
//! on stdout (`check --json` and `status --json`: `tests/e2e/check_robustness.rs`).

use crate::common::{pipeline, root, text};
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
