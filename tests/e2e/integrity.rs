//! Regression tests for results that were once served wrong without a word, and for
//! inputs that once crashed a run: each is now a clear error or a correct result.

use crate::common::{digits_project, pipeline, text};
use serde_json::Value;
use std::path::Path;

fn project(manifest: &str, files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.kdl"), manifest).unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

/// The stderr of a run that must fail before or while training.
fn failing_run(dir: &Path) -> String {
    let out = pipeline(dir, &["run", "p.kdl", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stderr)
}

fn rows(n: usize, label: impl Fn(usize) -> String) -> Vec<u8> {
    (0..n)
        .map(|i| format!("{},{},{}\n", i % 7, i % 5, label(i)))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn an_eval_split_that_turns_out_empty_is_an_error() {
    // 20 samples: val=0.01 rounds to none.
    let dir = project(
        "data { source \"d.csv\"; split train=0.79 val=0.01 test=0.2; }\nmodel { linear 2; }\nloss \"cross-entropy\"\noptimizer \"sgd\" lr=0.1\ntrain epochs=1\neval \"val\" needs=\"train\" split=\"val\"\n",
        &[("d.csv", &rows(20, |i| (i % 2).to_string()))],
    );
    let log = failing_run(dir.path());
    assert!(
        log.contains("× stage `val`: the `val` split has no samples (20 in all)"),
        "{log}"
    );
}

#[test]
fn labels_too_large_for_a_class_index_name_the_file_and_line() {
    let dir = project(
        "data { source \"d.csv\"; split train=1.0 val=0.0 test=0.0; }\nmodel { linear 2; }\nloss \"cross-entropy\"\noptimizer \"sgd\"\ntrain epochs=1\n",
        &[(
            "d.csv",
            &rows(12, |i| match i {
                7 => "9223372036854775808".into(),
                _ => (i % 2).to_string(),
            }),
        )],
    );
    let log = failing_run(dir.path());
    assert!(
        log.contains("d.csv:8: label 9223372036854776000 is not a class index"),
        "{log}"
    );
}

/// An NPY array of `shape` (float32, zeros).
fn npy(shape: &[usize]) -> Vec<u8> {
    let mut bytes = crate::common::npy_header("<f4", shape);
    bytes.resize(bytes.len() + 4 * shape.iter().product::<usize>(), 0);
    bytes
}

#[test]
fn samples_without_features_are_an_error() {
    let dir = project(
        "data { source \"x.npy\"; labels \"y.npy\"; }\nmodel { linear 2; }\nloss \"mse\"\noptimizer \"sgd\"\ntrain epochs=1\n",
        &[("x.npy", &npy(&[60, 0])), ("y.npy", &npy(&[60]))],
    );
    let log = failing_run(dir.path());
    assert!(
        log.contains("x.npy: features must be an array of shape (samples, …) with at least one sample and one")
            && log.contains("found [60, 0]"),
        "{log}"
    );
}

#[test]
fn a_model_too_large_for_memory_is_refused_before_allocating() {
    let dir = project(
        "data { source \"d.csv\"; }\nmodel { linear 1000000; linear 1000000; linear 2; }\nloss \"cross-entropy\"\noptimizer \"sgd\"\ntrain epochs=1\n",
        &[("d.csv", &rows(20, |i| (i % 2).to_string()))],
    );
    let log = failing_run(dir.path());
    assert!(
        log.contains(
            "× the model's parameters need 3.6 TB (1000006000002 values); this machine has"
        ),
        "{log}"
    );
}

/// The single stage directory of the snapshots in `dir`'s cache, once a snapshot exists.
fn snapshot_index(dir: &Path) -> Option<std::path::PathBuf> {
    let stage = std::fs::read_dir(dir.join(".pipeline/cache/snapshots"))
        .ok()?
        .flatten()
        .next()?
        .path();
    Some(stage.join("snapshot.json")).filter(|p| p.is_file())
}

#[test]
fn an_edited_snapshot_position_is_not_trusted() {
    let dir = digits_project();
    let text_of = std::fs::read_to_string(dir.path().join("digits.kdl")).unwrap();
    std::fs::write(
        dir.path().join("digits.kdl"),
        text_of.replace(
            "    batch-size 64\n",
            "    batch-size 64\n    snapshot-every-steps 5\n",
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "digits.kdl", "--set", "train.epochs=6"])
        .current_dir(dir.path())
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let index = loop {
        assert!(std::time::Instant::now() < deadline, "no snapshot appeared");
        assert!(child.try_wait().unwrap().is_none(), "the run ended first");
        if let Some(index) = snapshot_index(dir.path()) {
            break index;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    // What the issue found: `"epoch": 99` made a rerun train nothing and store the
    // early weights as the result.
    let mut snapshot: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    snapshot["position"]["epoch"] = 99.into();
    std::fs::write(&index, snapshot.to_string()).unwrap();
    let out = pipeline(
        dir.path(),
        &["run", "digits.kdl", "--set", "train.epochs=6", "--json"],
    );
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("warning: the snapshot of `train` is unusable (snapshot.json does not match its checksum); training from the start"),
        "{log}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["stages"][0]["metrics"]["epochs"], 6.0, "{report:#}");
}
