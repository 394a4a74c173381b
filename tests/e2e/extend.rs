//! Extending a finished training: when only `train.epochs` grows and the schedule does
//! not span the training, `run` continues from the cached shorter training's final state,
//! trains only the new epochs, and ends with the weights of a training of the longer
//! length from scratch, bit for bit (dropout, warm-up, a step schedule, momentum, step
//! records, early stopping's and reduce-on-plateau's state all carried over). `status`
//! says "extends the cached N-epoch training", or why it retrains from the start.

use crate::common;

use crate::common::{pipeline, text};
use serde_json::Value;
use std::path::Path;

/// A small digits MLP with dropout; `rest` adds sections (a schedule, the train stage's
/// settings).
fn manifest(schedule: &str, train: &str) -> String {
    format!(
        r#"pipeline "extend"
seed 5
data {{
    source "data/digits.csv.gz"
    scale "minmax"
    split train=0.7 val=0.1 test=0.2
}}
model {{
    linear 48
    relu
    dropout 0.2
    linear 10
}}
loss "cross-entropy"
optimizer "sgd" lr=0.05 momentum=0.9
{schedule}
logging {{
    log-every-steps 7
}}
train {{
    batch-size 64
{train}
}}
eval "test" needs="train"
checkpoint "export" needs="train" path="out/model.safetensors"
"#
    )
}

/// The digits data in a fresh directory, with `extend.kdl` written as [`manifest`] says.
fn project(schedule: &str, train: &str) -> tempfile::TempDir {
    let dir = common::small_project("");
    write(dir.path(), schedule, train);
    dir
}

/// Rewrites `extend.kdl` in `dir`.
fn write(dir: &Path, schedule: &str, train: &str) {
    std::fs::write(dir.join("extend.kdl"), manifest(schedule, train)).unwrap();
}

fn run(dir: &Path, epochs: u64, extra: &[&str]) -> Value {
    let epochs = format!("train.epochs={epochs}");
    let mut args = vec!["run", "extend.kdl", "--json", "--set", &epochs];
    args.extend(extra);
    let out = pipeline(dir, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `train` stage's line of `pipeline status` for `epochs` epochs.
fn status(dir: &Path, epochs: u64) -> String {
    let epochs = format!("train.epochs={epochs}");
    let out = pipeline(dir, &["status", "extend.kdl", "--set", &epochs]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = text(&out.stdout);
    let line = all.lines().find(|l| l.starts_with("train ")).unwrap();
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The epochs the run trained, by its epoch records.
fn epochs_trained(dir: &Path, report: &Value) -> Vec<u64> {
    let run_dir = dir.join(report["run_dir"].as_str().unwrap());
    common::records(&run_dir, "epoch")
        .iter()
        .map(|r| r["epoch"].as_u64().unwrap())
        .collect()
}

fn exported(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("out/model.safetensors")).unwrap()
}

/// Trains 10 epochs, extends to 15, and compares with 15 from scratch (`--no-cache`).
fn extends_bit_for_bit(schedule: &str, train: &str) {
    let dir = project(schedule, train);
    let d = dir.path();
    run(d, 10, &[]);
    assert_eq!(
        status(d, 15),
        "train train stale extends the cached 10-epoch training"
    );
    let extended = run(d, 15, &[]);
    assert_eq!(epochs_trained(d, &extended), [11, 12, 13, 14, 15]);
    assert_eq!(extended["stages"][0]["metrics"]["epochs"], 15.0);
    let continued = exported(d);
    let fresh = run(d, 15, &["--no-cache"]);
    assert_eq!(epochs_trained(d, &fresh), (1..=15).collect::<Vec<_>>());
    assert!(
        continued == exported(d),
        "the extended training's weights differ from a fresh 15-epoch training's"
    );
    // The step records of the new epochs are those of the fresh run's last five.
    let steps = |report: &Value| -> Vec<Value> {
        let run_dir = d.join(report["run_dir"].as_str().unwrap());
        common::records(&run_dir, "step")
            .into_iter()
            .filter(|r| r["epoch"].as_u64().unwrap() > 10)
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("samples_per_second");
                r
            })
            .collect()
    };
    assert_eq!(steps(&extended), steps(&fresh));
    assert_eq!(
        extended["stages"][0]["metrics"], fresh["stages"][0]["metrics"],
        "the stage's metrics (the last epoch's) agree"
    );
}

#[test]
fn a_constant_schedule_extends_10_to_15_epochs_bit_for_bit() {
    extends_bit_for_bit("", "");
}

#[test]
fn a_step_schedule_with_warm_up_and_early_stopping_extends_bit_for_bit() {
    extends_bit_for_bit(
        "schedule \"step\" warmup-epochs=2 step-size=4 gamma=0.5",
        "    early-stop monitor=\"val.loss\" patience=100",
    );
}

#[test]
fn reduce_on_plateau_and_a_cosine_of_declared_length_extend_bit_for_bit() {
    extends_bit_for_bit(
        "schedule \"reduce-on-plateau\" monitor=\"val.loss\" patience=1 factor=0.5",
        "",
    );
    extends_bit_for_bit("schedule \"cosine\" length-epochs=12 min-lr=0.001", "");
}

#[test]
fn the_longest_shorter_training_is_extended_and_a_shorter_one_retrains() {
    let dir = project("", "");
    let d = dir.path();
    run(d, 4, &[]);
    run(d, 8, &[]);
    assert_eq!(
        status(d, 12),
        "train train stale extends the cached 8-epoch training"
    );
    assert_eq!(
        status(d, 6),
        "train train stale extends the cached 4-epoch training"
    );
    // Nothing shorter than 3 epochs is cached: it trains from the start.
    assert_eq!(status(d, 3), "train train stale train.epochs changed 8 → 3");
    let report = run(d, 3, &[]);
    assert_eq!(epochs_trained(d, &report), [1, 2, 3]);
    // A cached length is simply cached.
    assert_eq!(status(d, 8), "train train fresh");
}

#[test]
fn a_schedule_that_spans_the_training_retrains_and_status_says_why() {
    let dir = project("schedule \"cosine\" min-lr=0.001", "");
    let d = dir.path();
    run(d, 3, &[]);
    assert_eq!(
        status(d, 5),
        "train train stale train.epochs changed 3 → 5; it retrains from the start: \
         schedule \"cosine\" spans all the epochs, so the first ones change with their \
         number (declare its `length-epochs` to extend)"
    );
    let report = run(d, 5, &[]);
    assert_eq!(epochs_trained(d, &report), [1, 2, 3, 4, 5]);

    // keep-best's files are not part of the final state.
    write(d, "", "    keep-best monitor=\"val.loss\" k=1");
    run(d, 3, &[]);
    assert_eq!(
        status(d, 4),
        "train train stale train.epochs changed 3 → 4; it retrains from the start: \
         keep-best's kept weights are not part of a training's final state"
    );
}

#[test]
fn a_training_stopped_before_its_end_is_not_extended() {
    let dir = project("", "    max-steps 30");
    let d = dir.path();
    let report = run(d, 5, &[]);
    assert!(report["stages"][0]["stopped"].is_object(), "{report}");
    assert_eq!(status(d, 8), "train train stale train.epochs changed 5 → 8");
}

#[test]
fn a_training_a_callback_ended_at_its_last_epoch_is_not_extended() {
    let dir = project("", "");
    let d = dir.path();
    let one = run(d, 1, &[]);
    let per_epoch = one["stages"][0]["metrics"]["steps"].as_f64().unwrap() as u64;
    // `max-steps` ends the training at the last step of its fifth epoch: a longer
    // training would end there too, so the five epochs keep no state to continue.
    let limit = format!("    max-steps {}", 5 * per_epoch);
    write(d, "", &limit);
    let report = run(d, 5, &[]);
    assert_eq!(
        report["stages"][0]["metrics"]["steps"],
        (5 * per_epoch) as f64
    );
    assert_eq!(status(d, 8), "train train stale train.epochs changed 5 → 8");
}

#[test]
fn a_validation_that_decides_must_fall_on_the_shorter_trainings_end() {
    // Early stopping watches validations every 3 epochs (and at the end).
    let train = "    early-stop monitor=\"val.loss\" patience=100\n    validate every-epochs=3";
    let dir = project("", train);
    let d = dir.path();
    // 10 validated at its end, which 15 does not: it retrains.
    run(d, 10, &[]);
    assert_eq!(
        status(d, 15),
        "train train stale train.epochs changed 10 → 15; it retrains from the start: the \
         cached 10-epoch training validated at its end, where a 15-epoch one does not \
         (`validate every-epochs=3`), and a validation decides its course"
    );
    // 9 ends on a validation 15 has too: it is continued, bit for bit.
    run(d, 9, &[]);
    assert_eq!(
        status(d, 15),
        "train train stale extends the cached 9-epoch training"
    );
    let extended = run(d, 15, &[]);
    assert_eq!(extended["stages"][0]["resumed_at_epoch"], 10);
    let continued = exported(d);
    run(d, 15, &["--no-cache"]);
    assert!(
        continued == exported(d),
        "the weights differ from a fresh run's"
    );
}
