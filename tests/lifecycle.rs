//! The training lifecycle (callbacks): early stopping stops, says where and why, and
//! resumes bit for bit after kill -9 with its patience counter and best value; a loss
//! that stops being finite stops the run at its batch; monitors the run does not compute
//! are `check` errors.

mod common;

use common::{assert_fixture, kill_after_snapshot, pipeline, tensors, text};
use serde_json::Value;
use std::path::Path;

/// The digits with a validation split, a small MLP, `train` as `train` says.
fn manifest(train: &str) -> String {
    format!(
        r#"pipeline "lifecycle"
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
{train}
}}
eval "test" needs="train"
checkpoint "export" needs="train" path="out/model.safetensors"
"#
    )
}

fn run(dir: &Path, name: &str, text_: &str, args: &[&str]) -> Value {
    std::fs::write(dir.join(name), text_).unwrap();
    let mut all = vec!["run", name, "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The epoch records of the run directory the report names.
fn epochs(dir: &Path, report: &Value) -> Vec<Value> {
    let run_dir = dir.join(report["run_dir"].as_str().unwrap());
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["stage"] == "train" && r.get("epoch").is_some())
        .collect()
}

const EARLY: &str =
    "    epochs 200\n    batch-size 64\n    early-stop monitor=\"val.loss\" patience=3";

#[test]
fn early_stopping_stops_and_says_at_which_epoch_and_why() {
    let dir = common::digits_project();
    let d = dir.path();
    let report = run(d, "es.kdl", &manifest(EARLY), &[]);
    let train = &report["stages"][0];
    let stopped = train["stopped"]["epoch"].as_u64().unwrap();
    assert!((4..200).contains(&stopped), "{report}");
    assert_eq!(train["metrics"]["stopped_epoch"], stopped as f64);
    assert_eq!(train["metrics"]["epochs"], stopped as f64);
    // The epochs written are the epochs trained, and the best of them is the one named:
    // the last `patience` epochs did not beat it.
    let records = epochs(d, &report);
    assert_eq!(records.len() as u64, stopped);
    let losses: Vec<f64> = records
        .iter()
        .map(|r| r["val_loss"].as_f64().unwrap())
        .collect();
    let best = (0..losses.len())
        .min_by(|&a, &b| losses[a].total_cmp(&losses[b]))
        .unwrap();
    assert_eq!(best as u64 + 1 + 3, stopped, "{losses:?}");
    let reason = train["stopped"]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!(
            "`val.loss` did not improve for 3 epochs (best {:.6} at epoch {})",
            losses[best],
            best + 1
        )
    );
    // Cached, the stage still says where it stopped.
    let again = run(d, "es.kdl", &manifest(EARLY), &[]);
    assert_eq!(again["stages"][0]["status"], "cached");
    assert_eq!(
        again["stages"][0]["metrics"]["stopped_epoch"],
        stopped as f64
    );
    // `min-delta` and `mode` change the decision: an accuracy that must rise by 1 never
    // does, so training stops after the first epochs of patience.
    let strict = EARLY.replace(
        "monitor=\"val.loss\" patience=3",
        "monitor=\"val.accuracy\" mode=\"max\" patience=2 min-delta=1.0",
    );
    let report = run(d, "strict.kdl", &manifest(&strict), &[]);
    assert_eq!(report["stages"][0]["stopped"]["epoch"], 3, "{report}");
}

#[test]
fn a_killed_run_with_early_stopping_resumes_bit_for_bit() {
    let dir = common::digits_project();
    let d = dir.path();
    // Small batches and snapshots every 20 steps, so that the run can be killed while
    // early stopping is waiting.
    let text_ = manifest(
        "    epochs 200\n    batch-size 8\n    snapshot-every-steps 20\n    early-stop monitor=\"val.loss\" patience=3",
    );
    let whole = run(d, "r.kdl", &text_, &["--no-cache"]);
    let stopped = whole["stages"][0]["stopped"]["epoch"].as_u64().unwrap();
    assert!(stopped >= 5, "{whole}");
    let w_whole = tensors(&d.join("out/model.safetensors"));
    // Killed in the middle of the epoch before the last: one epoch without improvement
    // behind it.
    let per_epoch = whole["stages"][0]["metrics"]["steps"].as_f64().unwrap() as u64 / stopped;
    let at = (stopped - 2) * per_epoch + per_epoch / 2;
    let step = kill_after_snapshot(d, "r.kdl", at);
    assert!(step >= at);
    let resumed = pipeline(d, &["run", "r.kdl", "--json"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(text(&resumed.stderr).contains("resuming `train` from its snapshot"));
    let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(
        resumed["stages"][0]["stopped"],
        whole["stages"][0]["stopped"]
    );
    assert_eq!(
        tensors(&d.join("out/model.safetensors")),
        w_whole,
        "the resumed run ended elsewhere"
    );
}

#[test]
fn a_loss_that_is_not_finite_stops_the_run_at_its_batch() {
    let dir = common::digits_project();
    let d = dir.path();
    let text_ = manifest("    epochs 5\n    batch-size 64")
        .replace("optimizer \"adam\" lr=3e-3", "optimizer \"sgd\" lr=1e12");
    std::fs::write(d.join("nan.kdl"), text_).unwrap();
    let out = pipeline(d, &["run", "nan.kdl"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    // (The rendered message wraps its line.)
    let message = err.replace("\n  │ ", " ");
    assert!(
        message.contains("stage `train`: the training loss became NaN at epoch 1, batch 3; the last finite loss before it was 4.4557e22"),
        "{err}"
    );
    assert!(!err.contains("epoch 2"), "{err}");
}

#[test]
fn monitors_the_run_does_not_compute_are_check_errors() {
    let dir = common::digits_project();
    let d = dir.path();
    let no_val = manifest(EARLY).replace(
        "split train=0.7 val=0.1 test=0.2",
        "split train=0.8 test=0.2",
    );
    std::fs::write(d.join("no-val.kdl"), no_val).unwrap();
    let out = pipeline(d, &["check", "no-val.kdl"]);
    assert!(!out.status.success());
    assert_fixture("lifecycle-monitor-no-val.check.stderr", &text(&out.stderr));
    let regression = manifest(&EARLY.replace("val.loss", "accuracy"))
        .replace("loss \"cross-entropy\"", "loss \"mse\"")
        .replace("label \"last\"", "label \"last\"\n    missing \"error\"");
    std::fs::write(d.join("mse.kdl"), regression).unwrap();
    let out = pipeline(d, &["check", "mse.kdl"]);
    assert!(!out.status.success());
    assert_fixture(
        "lifecycle-monitor-regression.check.stderr",
        &text(&out.stderr),
    );
    let unknown = manifest(&EARLY.replace("val.loss", "val.f1"));
    std::fs::write(d.join("unknown.kdl"), unknown).unwrap();
    let out = pipeline(d, &["check", "unknown.kdl"]);
    assert!(!out.status.success());
    assert_fixture("lifecycle-monitor-unknown.check.stderr", &text(&out.stderr));
}

#[test]
fn two_processes_stop_together_on_rank_0s_validation() {
    let dir = common::digits_project();
    let d = dir.path();
    let ddp = [
        "--nproc-per-node",
        "2",
        "--set",
        "accelerator.strategy=ddp",
        "--no-cache",
    ];
    let report = run(d, "ddp.kdl", &manifest(EARLY), &ddp);
    let stopped = report["stages"][0]["stopped"]["epoch"].as_u64().unwrap();
    assert!((4..200).contains(&stopped), "{report}");
    assert_eq!(epochs(d, &report).len() as u64, stopped);
}
