//! End-to-end tests of the stage cache: what reruns, what does not, and why.

use crate::common;

use crate::common::{
    kill_after_snapshot, pipeline, run_json, small_project, snapshot_step, statuses, text, SMALL,
};
use serde_json::Value;
use std::path::Path;

/// `pipeline run small.kdl ARGS --json`, which must succeed.
fn run(dir: &Path, args: &[&str]) -> Value {
    run_json(dir, "small.kdl", args)
}

fn expect(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// `train`, `test` and `export`, all with `status`.
fn every(status: &str) -> Vec<(String, String)> {
    expect(&[("train", status), ("test", status), ("export", status)])
}

fn status(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["status", "small.kdl"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn a_second_run_takes_every_stage_from_the_cache() {
    let dir = small_project(SMALL);
    let first = run(dir.path(), &[]);
    assert_eq!(statuses(&first), every("ran"));
    let second = run(dir.path(), &[]);
    assert_eq!(statuses(&second), every("cached"));
    assert_eq!(
        second["run_dir"],
        Value::Null,
        "nothing ran, nothing written"
    );
    for i in 0..3 {
        assert_eq!(
            first["stages"][i]["metrics"], second["stages"][i]["metrics"],
            "the metrics stored when the stage ran"
        );
    }
    assert_eq!(second["stages"][2]["outputs"][0], "out/model.safetensors");

    // A cached checkpoint is put back where the manifest says, byte for byte.
    let weights = dir.path().join("out/model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::remove_file(&weights).unwrap();
    let third = run(dir.path(), &[]);
    assert_eq!(statuses(&third)[2].1, "cached");
    assert_eq!(std::fs::read(&weights).unwrap(), bytes);

    assert_eq!(
        status(dir.path(), &[]),
        "small · 3 of 3 stages fresh · cache ./.pipeline/cache\n\
         stage   kind        status  why\n\
         train   train       fresh\n\
         test    eval        fresh\n\
         export  checkpoint  fresh\n"
    );
}

#[test]
fn a_change_reruns_exactly_that_stage_and_its_descendants_and_status_says_why() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    assert_eq!(
        status(dir.path(), &["--set", "optimizer.lr=0.02"]),
        "small · 0 of 3 stages fresh · cache ./.pipeline/cache\n\
         stage   kind        status  why\n\
         train   train       stale   optimizer.lr changed 0.01 → 0.02\n\
         test    eval        stale   upstream stage train is stale\n\
         export  checkpoint  stale   upstream stage train is stale\n"
    );
    let out = pipeline(
        dir.path(),
        &[
            "status",
            "small.kdl",
            "--set",
            "optimizer.lr=0.02",
            "--json",
        ],
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["stages"][0]["status"], "stale");
    assert_eq!(
        json["stages"][0]["reasons"],
        serde_json::json!(["optimizer.lr changed 0.01 → 0.02"])
    );
    assert_eq!(json["stages"][0]["fingerprint"].as_str().unwrap().len(), 64);
    let lr = run(dir.path(), &["--set", "optimizer.lr=0.02"]);
    assert_eq!(statuses(&lr), every("ran"));

    // Only the evaluation changes: the trained model is reused, no training step runs.
    let out = pipeline(
        dir.path(),
        &["run", "small.kdl", "--set", "test.batch-size=32"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stderr);
    assert!(log.contains("✓ train (train): cached"), "{log}");
    assert!(log.contains("✓ test (eval): done"), "{log}");
    assert!(!log.contains("epoch"), "no training: {log}");

    // Comments, property order and defaults written out change nothing.
    let rewritten = SMALL
        .replace(
            "optimizer \"adam\" lr=0.01 weight-decay=0.0",
            "// tuned by hand\noptimizer {\n    weight-decay 0.0\n    lr 0.01 // was 0.02\n    kind \"adam\"\n    beta1 0.9\n}",
        )
        .replace("train epochs=3 batch-size=64", "train batch-size=64 epochs=3 shuffle=#true");
    std::fs::write(dir.path().join("small.kdl"), rewritten).unwrap();
    assert_eq!(statuses(&run(dir.path(), &[])), every("cached"));

    // A new evaluation reuses the trained model.
    let mut added = std::fs::read_to_string(dir.path().join("small.kdl")).unwrap();
    added += "eval \"on-train\" needs=\"train\" split=\"train\"\n";
    std::fs::write(dir.path().join("small.kdl"), added).unwrap();
    let report = run(dir.path(), &[]);
    assert_eq!(
        statuses(&report),
        expect(&[
            ("train", "cached"),
            ("test", "cached"),
            ("export", "cached"),
            ("on-train", "ran")
        ])
    );
    let run_dir = dir.path().join(report["run_dir"].as_str().unwrap());
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    assert_eq!(
        metrics.lines().count(),
        1,
        "one eval line, no epoch: {metrics}"
    );
    assert_eq!(common::records(&run_dir, "eval").len(), 1, "{metrics}");
}

#[test]
fn force_and_no_cache() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    assert_eq!(
        statuses(&run(dir.path(), &["--force", "test"])),
        expect(&[("train", "cached"), ("test", "ran"), ("export", "cached")])
    );
    assert_eq!(statuses(&run(dir.path(), &["--force"])), every("ran"));
    let other = small_project(SMALL);
    assert_eq!(statuses(&run(other.path(), &["--no-cache"])), every("ran"));
    assert!(!other.path().join(".pipeline/cache").exists());
    // A shared cache directory, from the flag or the environment.
    let shared = tempfile::tempdir().unwrap();
    let shared_dir = shared.path().to_str().unwrap();
    run(other.path(), &["--cache-dir", shared_dir]);
    assert_eq!(
        statuses(&run(dir.path(), &["--cache-dir", shared_dir])),
        every("cached"),
        "another project with the same manifest and data reuses the entries"
    );
}

/// The fingerprint of the `train` entry, from `cache ls --json`.
fn train_entry(dir: &Path) -> String {
    let out = pipeline(dir, &["cache", "ls", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ls: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = ls["entries"].as_array().unwrap();
    let train: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "train").collect();
    assert_eq!(train.len(), 1, "{ls:#}");
    assert_eq!(train[0]["stages"], serde_json::json!(["small.kdl: train"]));
    train[0]["fingerprint"].as_str().unwrap().to_string()
}

#[test]
fn a_corrupt_entry_is_reported_never_used_and_rebuilt() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    let fp = train_entry(dir.path());
    let weights = dir
        .path()
        .join(".pipeline/cache/entries")
        .join(&fp)
        .join("outputs/model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&weights, bytes).unwrap();

    let out = pipeline(dir.path(), &["cache", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("corrupt: {fp} (train): output model.safetensors does not match its checksum; the next run that needs it rebuilds it\n")
    );
    assert_eq!(text(&out.stdout), "3 entries checked, 1 corrupt\n");
    assert!(status(dir.path(), &[]).contains(
        "train   train       stale   the cache entry is unusable: output model.safetensors does not match its checksum\n"
    ));

    let report = run(dir.path(), &[]);
    assert_eq!(
        statuses(&report),
        expect(&[("train", "ran"), ("test", "cached"), ("export", "cached")]),
        "the same key: only the broken entry is rebuilt"
    );
    let out = pipeline(dir.path(), &["cache", "verify"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "3 entries checked, 0 corrupt\n");
}

#[test]
fn concurrent_runs_share_the_cache_without_running_a_stage_twice() {
    let dir = small_project(&SMALL.replace("epochs=3", "epochs=15"));
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["run", "small.kdl", "--json"])
            .current_dir(dir.path())
            .env_remove("PIPELINE_CACHE_DIR")
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    let reports: Vec<Value> = [a, b]
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    for stage in 0..3 {
        let ran: Vec<&str> = reports
            .iter()
            .map(|r| r["stages"][stage]["status"].as_str().unwrap())
            .collect();
        assert!(
            ran.contains(&"ran") && ran.contains(&"cached"),
            "stage {stage}: one run computes it, the other takes it: {ran:?}"
        );
    }
    assert_eq!(
        reports[0]["stages"][1]["metrics"],
        reports[1]["stages"][1]["metrics"]
    );
    let out = pipeline(dir.path(), &["cache", "verify"]);
    assert_eq!(text(&out.stdout), "3 entries checked, 0 corrupt\n");
    let tmp = std::fs::read_dir(dir.path().join(".pipeline/cache/tmp")).unwrap();
    assert_eq!(tmp.count(), 0, "nothing left half-written");
}

#[test]
fn gc_keeps_what_a_manifest_uses_or_what_fits() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    run(dir.path(), &["--set", "optimizer.lr=0.02"]);
    let out = pipeline(dir.path(), &["cache", "gc", "small.kdl", "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("would remove 3 entries"),
        "{}",
        text(&out.stdout)
    );
    let out = pipeline(dir.path(), &["cache", "gc", "small.kdl"]);
    assert!(
        text(&out.stdout).starts_with("removed 3 entries"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        statuses(&run(dir.path(), &[])),
        every("cached"),
        "what the manifest uses now is kept"
    );
    let out = pipeline(dir.path(), &["cache", "gc", "--max-size", "0"]);
    assert!(
        text(&out.stdout).starts_with("removed 3 entries"),
        "{}",
        text(&out.stdout)
    );
    let out = pipeline(dir.path(), &["cache", "gc"]);
    assert_eq!(out.status.code(), Some(1), "gc must be told what to remove");
}

/// The digits CNN (dropout, batch-norm, AdamW, a cosine schedule) with a snapshot every
/// 5 steps, in a fresh project.
fn digits_with_snapshots() -> tempfile::TempDir {
    let dir = common::digits_project();
    let text = std::fs::read_to_string(dir.path().join("digits.kdl")).unwrap();
    let text = text.replace(
        "    batch-size 64\n",
        "    batch-size 64\n    snapshot-every-steps 5\n",
    );
    assert!(text.contains("snapshot-every-steps 5"));
    std::fs::write(dir.path().join("digits.kdl"), text).unwrap();
    dir
}

fn exported_weights(dir: &Path, report: &Value) -> Vec<u8> {
    let path = report["stages"][2]["outputs"][0].as_str().unwrap();
    std::fs::read(dir.join(path)).unwrap()
}

#[test]
fn a_killed_run_resumes_and_ends_with_the_same_weights_bit_for_bit() {
    let killed = digits_with_snapshots();
    let at = kill_after_snapshot(killed.path(), "digits.kdl", 60);
    assert!(at < 30 * 23, "killed before the end (step {at})");

    let out = pipeline(killed.path(), &["run", "digits.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stderr);
    assert!(
        log.contains("resuming `train` from its snapshot: epoch"),
        "{log}"
    );
    let resumed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resumed["stages"][0]["metrics"]["steps"], 30.0 * 23.0);
    assert!(
        snapshot_step(killed.path()).is_none(),
        "snapshots are removed once the stage is stored"
    );

    let whole = digits_with_snapshots();
    let uninterrupted = run_in(whole.path(), "digits.kdl");
    assert_eq!(
        exported_weights(killed.path(), &resumed),
        exported_weights(whole.path(), &uninterrupted),
        "resumed at step {at}: the weights must be identical"
    );
    assert_eq!(
        resumed["stages"][0]["metrics"], uninterrupted["stages"][0]["metrics"],
        "and so must the last epoch's metrics"
    );
}

fn run_in(dir: &Path, manifest: &str) -> Value {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_cache_whose_entries_cannot_be_listed_is_named_and_left_as_it_is() {
    let dir = small_project(SMALL);
    let out = pipeline(dir.path(), &["run", "small.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The entries' directory replaced by a file (a sync tool's conflict, a bad copy).
    let entries = dir.path().join(".pipeline/cache/entries");
    std::fs::remove_dir_all(&entries).unwrap();
    std::fs::write(&entries, "not a directory").unwrap();
    for command in [&["ls"][..], &["gc", "small.kdl"]] {
        let out = pipeline(dir.path(), &[&["cache"][..], command].concat());
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr),
            "pipeline::cache::unreadable\n\n  × cannot read the cache ./.pipeline/cache: Not a directory (os error 20)\n\n",
            "cache {command:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&entries).unwrap(),
        "not a directory"
    );
}

#[test]
fn an_earlier_cache_that_cannot_be_tagged_is_named_and_left_as_it_is() {
    let dir = small_project(SMALL);
    let out = pipeline(dir.path(), &["run", "small.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // An earlier pipeline's cache (no tag), on a disk that takes no more bytes: tidying
    // it starts by tagging it, which fails; nothing of it is lost.
    let root = dir.path().join(".pipeline/cache");
    std::fs::remove_file(root.join("CACHEDIR.TAG")).unwrap();
    let entries = std::fs::read_dir(root.join("entries")).unwrap().count();
    let out =
        crate::common::pipeline_with_files_up_to(dir.path(), &["cache", "gc", "small.kdl"], 8);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "pipeline::cache::unwritable\n\n  × cannot mark ./.pipeline/cache as a pipeline cache: File too large (os error 27)\n\n",
    );
    assert!(!root.join("CACHEDIR.TAG").exists());
    assert_eq!(
        std::fs::read_dir(root.join("entries")).unwrap().count(),
        entries
    );
    // With room, the same command adopts it.
    let out = pipeline(dir.path(), &["cache", "gc", "small.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(root.join("CACHEDIR.TAG").is_file());
}
