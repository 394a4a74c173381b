//! End-to-end tests of resuming a training on another number of processes (issue 36): a
//! snapshot taken by N processes continues with M when the global batch (batch size ×
//! accumulation × processes) and the padded epoch are the same, its optimizer state
//! regathered and dealt again under `zero1`, and the weights end within 1e-5 of the run
//! never stopped. Otherwise the run says why and trains from the start, unless
//! `--reshard` asks it to continue.

use crate::common::{pipeline, tensors, text, worst_difference};
use crate::preemption::{project, stopped};
use std::path::Path;

/// The wine project with an even training split (142 samples: no process pads it), the
/// strategy `strategy` and batches of `batch`, 40 epochs (the runs' float sums part a
/// little more at every step), without dropout (whose masks are drawn per
/// process).
fn even(strategy: &str, batch: u64) -> tempfile::TempDir {
    let dir = project(strategy, batch);
    let manifest = dir.path().join("wine.kdl");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let text = text
        .replace("train=0.7 test=0.3", "train=0.8 test=0.2")
        .replace("epochs=300", "epochs=40")
        .replace("    dropout 0.1\n", "");
    std::fs::write(manifest, text).unwrap();
    dir
}

/// `pipeline run wine.kdl ARGS` in `dir`, which must succeed: the report and stderr.
fn run(dir: &Path, args: &[&str]) -> (serde_json::Value, String) {
    let out = pipeline(dir, &[&["run", "wine.kdl", "--json"], args].concat());
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    (serde_json::from_slice(&out.stdout).unwrap(), log)
}

/// Stopped with `before` (SIGTERM once past epoch 5), resumed with `after`: the resumed
/// run's stderr; its weights within 1e-5 of a run of `before` never stopped.
fn continues(strategy: &str, batch: u64, before: &[&str], after: &[&str]) -> String {
    let dir = even(strategy, batch);
    let d = dir.path();
    let (code, log) = stopped(d, before, &[], libc::SIGTERM);
    assert_eq!(code, 143, "{log}");
    let (report, log) = run(d, after);
    let epoch = report["stages"][0]["resumed_at_epoch"].as_u64();
    assert!(epoch.is_some_and(|e| e >= 5), "{log}");
    let never = even(strategy, batch);
    run(never.path(), before);
    let weights = |dir: &Path| tensors(&dir.join("model.safetensors"));
    let worst = worst_difference(&weights(d), &weights(never.path()));
    assert!(worst < 1e-5, "{worst}");
    log
}

/// One process of batches of 32: the global batch of two of 16.
const ONE_PROCESS_OF_32: &[&str] = &[
    "--set",
    "accelerator.strategy=none",
    "--set",
    "train.batch-size=32",
];

#[test]
fn a_snapshot_of_two_processes_continues_on_one_with_the_same_global_batch() {
    let log = continues("ddp", 16, &["--nproc-per-node", "2"], ONE_PROCESS_OF_32);
    assert!(
        log.contains(
            "stage `train`: resuming from the snapshot this training left with 2 processes (epoch "
        ),
        "{log}"
    );
    assert!(
        log.contains("), now on 1 process: the same global batch of 32\n"),
        "{log}"
    );
}

#[test]
fn zero1s_optimizer_shards_are_gathered_and_dealt_again() {
    // Two shards gathered into one process's whole state…
    continues("zero1", 16, &["--nproc-per-node", "2"], ONE_PROCESS_OF_32);
    // …and one process's state dealt into two shards.
    let log = continues(
        "none",
        32,
        &[],
        &[
            "--nproc-per-node",
            "2",
            "--set",
            "accelerator.strategy=zero1",
            "--set",
            "train.batch-size=16",
        ],
    );
    assert!(log.contains("now on 2 processes"), "{log}");
}

#[test]
fn another_global_batch_or_padding_trains_from_the_start_unless_reshard_says() {
    // 125 training samples: two processes pad them to 126.
    let dir = project("ddp", 16);
    let d = dir.path();
    let (code, log) = stopped(d, &["--nproc-per-node", "2"], &[], libc::SIGTERM);
    assert_eq!(code, 143, "{log}");
    // Run with `batch` on one process: trained from the start, saying `why`.
    let from_the_start = |batch: &str, why: &str| {
        let batch = format!("train.batch-size={batch}");
        let one = [
            "--set",
            "accelerator.strategy=none",
            "--set",
            &batch,
            "--stage",
            "train",
        ];
        let (report, log) = run(d, &one);
        assert!(report["stages"][0]["resumed_at_epoch"].is_null(), "{log}");
        assert!(log.contains(why), "{log}");
        report
    };
    from_the_start("32", "does not continue it exactly: its 125 training samples were padded to a multiple of 2 processes, and are to one of 1; training from the start (`pipeline run --reshard` continues from it, the order of samples changing from there)");
    // Another global batch: the same, unless --reshard.
    let scratch = from_the_start(
        "16",
        "its global batch was 32, this run's is 16; training from the start",
    );
    let half = [
        "--set",
        "accelerator.strategy=none",
        "--set",
        "train.batch-size=16",
    ];
    let (report, log) = run(d, &[&half[..], &["--force", "train", "--reshard"]].concat());
    let epoch = report["stages"][0]["resumed_at_epoch"].as_u64();
    assert!(epoch.is_some_and(|e| e >= 5), "{log}");
    assert!(
        log.contains("as --reshard asks: its global batch was 32, this run's is 16, so the order of samples changes from here"),
        "{log}"
    );
    // Its result is not what its key describes: neither it nor what uses it is cached.
    assert!(
        log.contains("stage `train` is not cached: it went on from the snapshot of another global batch (--reshard), so its result is not what its key describes"),
        "{log}"
    );
    assert!(
        log.contains("stage `test` is not cached: it uses a training that --reshard continued"),
        "{log}"
    );
    // The cache still holds the training from the start, not the continued one.
    let (again, _) = run(d, &half);
    let loss = |r: &serde_json::Value| r["stages"][0]["metrics"]["loss"].clone();
    assert_eq!(again["stages"][0]["status"], "cached", "{again}");
    assert_eq!(loss(&again), loss(&scratch));
    assert_ne!(loss(&again), loss(&report));
}
