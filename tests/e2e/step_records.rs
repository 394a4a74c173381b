//! Step records (`logging { log-every-steps N }`): every N optimizer steps a line of
//! `metrics.jsonl` with the mean loss of the samples since the last one. Every sample is in
//! exactly one record (an epoch's tail is carried into the next epoch's first), so records
//! that end with the epochs add up to the epochs' records; the gradients' norm is there
//! when clipping computes it or `grad-norm` asks; under `ddp` the values are over both
//! processes; `0` writes none. On CUDA under `16-mixed`, the loss scale.

use crate::common;

use crate::common::{pipeline, records, text};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The digits (1,258 training samples: 20 batches of 64 per epoch), a small MLP.
fn manifest(logging: &str, extra: &str) -> String {
    format!(
        r#"pipeline "steps"
seed 42
data {{
    source "data/digits.csv.gz"
    label "last"
    scale "standard"
    split train=0.7 val=0.1 test=0.2
}}
model {{
    linear 64
    relu
    linear 10
}}
loss "cross-entropy"
optimizer "adam" lr=3e-3
train {{
    epochs 3
    batch-size 64
}}
logging {{
{logging}
}}
{extra}
"#
    )
}

/// Runs `text_` and gives its run directory.
fn run(dir: &Path, text_: &str, args: &[&str]) -> PathBuf {
    std::fs::write(dir.join("s.kdl"), text_).unwrap();
    let mut all = vec!["run", "s.kdl", "--json", "--no-cache"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    dir.join(report["run_dir"].as_str().unwrap())
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Checks that the step records, every `every` steps (a divisor of an epoch's steps),
/// add up to each epoch's record: samples, loss and accuracy.
fn assert_records_add_up_to_epochs(run_dir: &Path, every: u64, samples: u64) {
    let steps = records(run_dir, "step");
    let epochs = records(run_dir, "epoch");
    assert_eq!(epochs.len(), 3);
    let per_epoch = epochs[0]["steps"].as_u64().unwrap();
    let at: Vec<u64> = steps.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    let expected: Vec<u64> = (1..=3 * per_epoch / every).map(|k| k * every).collect();
    assert_eq!(at, expected);
    for e in &epochs {
        let epoch = e["epoch"].as_u64().unwrap();
        let mine: Vec<&Value> = steps.iter().filter(|r| r["epoch"] == epoch).collect();
        assert_eq!(mine.len() as u64, per_epoch / every, "{e}");
        let n: u64 = mine.iter().map(|r| r["samples"].as_u64().unwrap()).sum();
        assert_eq!(n, samples, "the epoch's samples, each once");
        let loss: f64 = mine.iter().map(|r| f(r, "loss") * f(r, "samples")).sum();
        let hits: f64 = mine
            .iter()
            .map(|r| f(r, "accuracy") * f(r, "samples"))
            .sum();
        assert!(
            (loss / n as f64 - f(e, "loss")).abs() < 1e-9,
            "epoch {epoch}: {loss} over {n} vs {e}"
        );
        assert!(
            (hits / n as f64 - f(e, "accuracy")).abs() < 1e-9,
            "{hits} {e}"
        );
        // The learning rate of the last step, as the epoch's record says.
        assert_eq!(mine.last().unwrap()["lr"], e["lr"]);
        assert!(f(mine[0], "samples_per_second") > 0.0);
    }
}

#[test]
fn step_records_add_up_to_the_epochs_records() {
    let dir = common::digits_project();
    let d = dir.path();
    let run_dir = run(d, &manifest("    log-every-steps 10", ""), &[]);
    assert_records_add_up_to_epochs(&run_dir, 10, 1258);
    // Without clipping nor `grad-norm`, no gradients' norm.
    assert!(records(&run_dir, "step")
        .iter()
        .all(|r| r.get("grad_norm").is_none() && r.get("loss_scale").is_none()));
}

#[test]
fn an_epochs_tail_is_carried_into_the_next_record() {
    let dir = common::digits_project();
    let d = dir.path();
    // Every 7 steps of 20 per epoch: records at 7, 14, …, 56, the third and the sixth
    // spanning two epochs. With clipping, the norm it computes is in every record.
    let run_dir = run(
        d,
        &manifest("    log-every-steps 7", "accelerator max-norm=0.5"),
        &[],
    );
    let steps = records(&run_dir, "step");
    let at: Vec<u64> = steps.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(at, [7, 14, 21, 28, 35, 42, 49, 56]);
    let n: Vec<u64> = steps
        .iter()
        .map(|r| r["samples"].as_u64().unwrap())
        .collect();
    // 7 batches of 64, but 1,258 = 19 × 64 + 42: the record at step 21 holds the six
    // batches after step 14 (five and the short one) and the next epoch's first; the one
    // at step 42, the five after step 35 (four and the short one) and the next two.
    assert_eq!(n, [448, 448, 362 + 64, 448, 448, 298 + 128, 448, 448]);
    let epochs: Vec<u64> = steps.iter().map(|r| r["epoch"].as_u64().unwrap()).collect();
    assert_eq!(epochs, [1, 1, 2, 2, 2, 3, 3, 3]);
    for r in &steps {
        let norm = f(r, "grad_norm");
        assert!(norm.is_finite() && norm > 0.0, "{r}");
    }
}

#[test]
fn grad_norm_asks_for_the_norm_and_zero_writes_no_step_record() {
    let dir = common::digits_project();
    let d = dir.path();
    let run_dir = run(
        d,
        &manifest("    log-every-steps 20\n    grad-norm #true", ""),
        &[],
    );
    let steps = records(&run_dir, "step");
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|r| f(r, "grad_norm") > 0.0), "{steps:?}");
    let run_dir = run(d, &manifest("    log-every-steps 0", ""), &[]);
    assert!(records(&run_dir, "step").is_empty());
    assert_eq!(records(&run_dir, "epoch").len(), 3);
}

#[test]
fn under_ddp_the_records_are_over_both_processes() {
    let dir = common::digits_project();
    let d = dir.path();
    // Two processes of 64 per batch: 10 steps per epoch, each over both shards.
    let run_dir = run(
        d,
        &manifest("    log-every-steps 5", "accelerator strategy=\"ddp\""),
        &["--nproc-per-node", "2"],
    );
    let epochs = records(&run_dir, "epoch");
    assert_eq!(epochs[0]["steps"], 10, "{epochs:?}");
    // Each process's 629 samples of an epoch are in the records.
    assert_records_add_up_to_epochs(&run_dir, 5, 1258);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/test-gpu.sh runs it"]
fn under_16_mixed_the_records_hold_the_loss_scale() {
    let dir = common::digits_project();
    let d = dir.path();
    let run_dir = run(
        d,
        &manifest(
            "    log-every-steps 5",
            "accelerator {\n    device \"cuda\"\n    precision \"16-mixed\"\n}",
        ),
        &[],
    );
    let steps = records(&run_dir, "step");
    assert_eq!(steps.len(), 12);
    // GradScaler's initial scale, unless a step overflowed.
    assert!(
        steps.iter().all(|r| f(r, "loss_scale") <= 65536.0),
        "{steps:?}"
    );
    assert!(f(&steps[0], "loss_scale") >= 1.0);
}
