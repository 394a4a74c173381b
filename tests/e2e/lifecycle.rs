//! The training lifecycle (callbacks): early stopping stops, says where and why, and
//! resumes bit for bit after kill -9 with its patience counter and best value; the best
//! weights are kept, stored and taken by later stages, and resume bit for bit too;
//! validation within epochs, `max-steps` and `max-time` stop where they say; a loss that
//! stops being finite stops the run at its batch, and in a terminal its progress bar stays
//! where it failed; monitors the run does not compute are `check` errors.

use crate::common;

use crate::common::{assert_fixture, kill_after_snapshot, pipeline, tensors, text};
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
    common::records(&run_dir, "epoch")
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
    // Step records every 7 steps: those after the resume are those of the whole run.
    let text_ = manifest(
        "    epochs 200\n    batch-size 8\n    snapshot-every-steps 20\n    early-stop monitor=\"val.loss\" patience=3\n    keep-best monitor=\"val.accuracy\" k=2",
    ) + "logging {\n    log-every-steps 7\n}\n";
    let whole = run(d, "r.kdl", &text_, &["--no-cache"]);
    let best_whole = kept(d, &whole);
    assert_eq!(best_whole.len(), 2, "{whole}");
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
    // The same weights kept, from the same validations with the same scores.
    let without_paths = |report: &Value| {
        let mut best = report["stages"][0]["best"].clone();
        for k in best.as_array_mut().unwrap() {
            k["path"] = Value::Null;
        }
        best
    };
    assert_eq!(without_paths(&resumed), without_paths(&whole));
    assert_eq!(kept(d, &resumed), best_whole, "the kept weights differ");
    let steps = |report: &Value| -> Vec<Value> {
        let run_dir = d.join(report["run_dir"].as_str().unwrap());
        let mut steps = common::records(&run_dir, "step");
        for r in &mut steps {
            r.as_object_mut().unwrap().remove("samples_per_second");
        }
        steps
    };
    let after = steps(&resumed);
    assert!(!after.is_empty());
    let first = after[0]["step"].as_u64().unwrap();
    assert!(first > step, "{} after the snapshot at {step}", after[0]);
    let whole_after: Vec<Value> = steps(&whole)
        .into_iter()
        .filter(|r| r["step"].as_u64().unwrap() >= first)
        .collect();
    assert_eq!(
        after, whole_after,
        "the step records after the resume differ"
    );
}

/// The tensors of every kept weights file the report names, the best first.
fn kept(dir: &Path, report: &Value) -> Vec<Vec<(String, Vec<f32>)>> {
    report["stages"][0]["best"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| tensors(&dir.join(k["path"].as_str().unwrap())))
        .collect()
}

#[test]
fn keep_best_keeps_the_best_validations_weights_for_later_stages() {
    let dir = common::digits_project();
    let d = dir.path();
    let text_ = manifest(&format!(
        "{EARLY}\n    keep-best monitor=\"val.loss\" k=3"
    ))
    .replace(
        "eval \"test\" needs=\"train\"\n",
        "eval \"test\" needs=\"train\"\neval \"val-best\" needs=\"train\" split=\"val\" from=\"best\"\neval \"val-third\" needs=\"train\" split=\"val\" from=\"best-3\"\n",
    )
    .replace(
        "path=\"out/model.safetensors\"",
        "path=\"out/model.safetensors\" from=\"best\"",
    );
    let report = run(d, "kb.kdl", &text_, &[]);
    let best = report["stages"][0]["best"].as_array().unwrap().clone();
    assert_eq!(best.len(), 3, "{report}");
    // The three lowest validation losses of `metrics.jsonl`, the best first (of equal
    // ones the earlier), with their epochs and scores.
    let records = epochs(d, &report);
    let mut by_loss: Vec<(f64, u64)> = records
        .iter()
        .map(|r| {
            (
                r["val_loss"].as_f64().unwrap(),
                r["epoch"].as_u64().unwrap(),
            )
        })
        .collect();
    by_loss.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (k, (loss, epoch)) in best.iter().zip(&by_loss) {
        assert_eq!(k["score"].as_f64().unwrap(), *loss, "{k}");
        assert_eq!(k["epoch"].as_u64().unwrap(), *epoch, "{k}");
        assert_eq!(k["monitor"], "val.loss");
        assert!(d.join(k["path"].as_str().unwrap()).is_file(), "{k}");
    }
    // The stages that take them measure those weights: the loss of the validation
    // split is the score they were kept for (summed in other batches: to rounding).
    let stage = |name: &str| {
        report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    for (name, k) in [("val-best", &best[0]), ("val-third", &best[2])] {
        let loss = stage(name)["metrics"]["loss"].as_f64().unwrap();
        let score = k["score"].as_f64().unwrap();
        assert!(
            (loss - score).abs() < 1e-6 * score,
            "{name}: {loss} vs {score}"
        );
    }
    let metadata: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("out/model.json")).unwrap()).unwrap();
    assert_eq!(metadata["weights"], "best");
    assert_eq!(metadata["epoch"], best[0]["epoch"]);
    assert_eq!(metadata["metrics"]["val_loss"], best[0]["score"]);
    assert_eq!(
        tensors(&d.join("out/model.safetensors")),
        tensors(&d.join(best[0]["path"].as_str().unwrap()))
    );
    // Cached, the stage still names them, and the stages that take them are cached.
    let again = run(d, "kb.kdl", &text_, &[]);
    assert_eq!(again["stages"][0]["status"], "cached");
    assert_eq!(again["stages"][0]["best"], report["stages"][0]["best"]);
    assert!(again["stages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["status"] == "cached"));
    // Without a cache, they are in the run directory.
    let uncached = run(d, "kb.kdl", &text_, &["--no-cache"]);
    let run_dir = uncached["run_dir"].as_str().unwrap();
    for k in uncached["stages"][0]["best"].as_array().unwrap() {
        let path = k["path"].as_str().unwrap();
        assert!(path.starts_with(run_dir), "{path}");
        assert_eq!(
            tensors(&d.join(path)),
            tensors(
                &d.join(
                    best[k["rank"].as_u64().unwrap() as usize - 1]["path"]
                        .as_str()
                        .unwrap()
                )
            )
        );
    }
}

#[test]
fn validation_within_epochs_and_max_steps_stop_where_they_say() {
    let dir = common::digits_project();
    let d = dir.path();
    // 1257 training samples in batches of 64: 20 steps an epoch.
    let text_ = manifest(
        "    epochs 10\n    batch-size 64\n    max-steps 30\n    validate every-steps=7 {\n        metrics \"f1-macro\" \"auroc\"\n    }",
    );
    let report = run(d, "steps.kdl", &text_, &[]);
    let train = &report["stages"][0];
    assert_eq!(train["metrics"]["steps"], 30.0, "{report}");
    assert_eq!(train["stopped"]["epoch"], 2);
    assert_eq!(train["stopped"]["reason"], "it reached `max-steps 30`");
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    // Within epochs at steps 7, 14, 21, 28; at the ends of epoch 1 (step 20) and of the
    // training (step 30, within epoch 2).
    let within: Vec<u64> = common::records(&run_dir, "validation")
        .iter()
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(within, [7, 14, 21, 28]);
    let ends = common::records(&run_dir, "epoch");
    assert_eq!(ends.len(), 2);
    assert_eq!(ends[1]["steps"], 10);
    let validations = common::records(&run_dir, "validation");
    for l in validations.iter().chain(&ends) {
        for key in ["val_loss", "val_accuracy", "val_f1-macro", "val_auroc"] {
            assert!(l[key].is_f64(), "{key} missing from {l}");
        }
    }
}

#[test]
fn max_time_stops_at_the_first_step_after_it() {
    let dir = common::digits_project();
    let d = dir.path();
    let report = run(
        d,
        "time.kdl",
        // One microsecond: less than any optimizer step takes (a millisecond was not, on
        // a fast CI machine).
        &manifest("    epochs 50\n    batch-size 64\n    max-time 0.000001"),
        &[],
    );
    let train = &report["stages"][0];
    assert_eq!(train["stopped"]["epoch"], 1, "{report}");
    assert_eq!(train["metrics"]["steps"], 1.0);
    let reason = train["stopped"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("it reached `max-time 0.000001` ("),
        "{reason}"
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
    // The failed epoch is not recorded: `metrics.jsonl` has no line of it.
    let runs: Vec<_> = std::fs::read_dir(d.join(".pipeline/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    let log = std::fs::read_to_string(runs[0].join("metrics.jsonl")).unwrap();
    assert_eq!(log, "", "{log}");
}

/// What a terminal showed while `pipeline ARGS` ran in it (tmux, 120 × 40), every 100 ms,
/// the last screen after it ended, with the exit code on its last line as `EXIT=N`.
fn in_a_terminal(dir: &Path, args: &str) -> Vec<String> {
    // A server of its own: tests run side by side.
    let socket = format!(
        "pipeline-test-{}-{}",
        std::process::id(),
        dir.file_name().unwrap().to_string_lossy()
    );
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("tmux runs (Debian's `tmux` package)")
    };
    let command = format!(
        "NO_COLOR=1 {} {args}; echo EXIT=$?; sleep 600",
        env!("CARGO_BIN_EXE_pipeline")
    );
    let started = tmux(&["new-session", "-d", "-x", "120", "-y", "40", &command]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut frames = Vec::new();
    loop {
        let shown = text(&tmux(&["capture-pane", "-p"]).stdout);
        let done = shown.contains("EXIT=") || std::time::Instant::now() > deadline;
        frames.push(shown);
        if done {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    tmux(&["kill-server"]);
    frames
}

#[test]
fn a_failed_training_leaves_its_progress_bar_above_the_error_in_a_terminal() {
    let dir = common::digits_project();
    let d = dir.path();
    let text_ = manifest("    epochs 5\n    batch-size 64")
        .replace("optimizer \"adam\" lr=3e-3", "optimizer \"sgd\" lr=1e12");
    std::fs::write(d.join("nan.kdl"), text_).unwrap();
    let screen = in_a_terminal(d, "run nan.kdl").pop().unwrap();
    let lines: Vec<&str> = screen.lines().collect();
    let bar = lines
        .iter()
        .position(|l| l.starts_with("train (train) · epoch 1/5 ["))
        .unwrap_or_else(|| panic!("no progress bar:\n{screen}"));
    // The bar stopped after the second step (the third failed), saying so.
    assert!(lines[bar].ends_with("] step 2/20 · failed"), "{screen}");
    let error = lines
        .iter()
        .position(|l| l.contains("the training loss became NaN at epoch 1, batch 3"))
        .unwrap_or_else(|| panic!("no error:\n{screen}"));
    assert!(error > bar, "{screen}");
    assert!(screen.contains("EXIT=1"), "{screen}");
}

#[test]
fn the_progress_bar_redraws_in_place_with_the_running_loss_and_leaves_the_table_intact() {
    let dir = common::digits_project();
    let d = dir.path();
    // Long enough to be seen mid-run (seconds): 30 epochs of 158 steps, a step record
    // every 5.
    let text_ =
        manifest("    epochs 30\n    batch-size 8") + "logging {\n    log-every-steps 5\n}\n";
    std::fs::write(d.join("bar.kdl"), text_).unwrap();
    let frames = in_a_terminal(d, "run bar.kdl --no-cache");
    let screen = frames.last().unwrap();
    assert!(screen.contains("EXIT=0"), "{screen}");
    let bars: Vec<&str> = frames
        .iter()
        .filter_map(|f| f.lines().find(|l| l.starts_with("train (train) · epoch ")))
        .collect();
    for frame in &frames {
        let drawn = frame
            .lines()
            .filter(|l| l.contains("(train) · epoch "))
            .count();
        assert!(drawn <= 1, "the bar is redrawn in place:\n{frame}");
    }
    // Seen mid-run: the epoch, the step within it, the time left, the running loss
    // (and accuracy) and the throughput of the last record, within the terminal's width.
    let shown = |bar: &&str| {
        bar.contains(" step ")
            && bar.contains("/158 · ETA ")
            && bar.contains(" · loss ")
            && bar.contains(" · acc ")
            && bar.contains(" samples/s")
    };
    assert!(bars.iter().any(shown), "{bars:#?}");
    assert!(bars.iter().all(|b| b.chars().count() <= 120), "{bars:#?}");
    // At the end the bar is gone and the table is whole, a line per stage.
    let lines: Vec<&str> = screen.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("stage   kind        status"))
        .unwrap_or_else(|| panic!("no table:\n{screen}"));
    for (row, stage) in lines[header + 1..]
        .iter()
        .zip(["train ", "test ", "export "])
    {
        assert!(row.starts_with(stage), "{row:?} in\n{screen}");
        assert!(row.contains(" ran "), "{row:?} in\n{screen}");
    }
    assert!(!screen.contains("(train) · epoch "), "{screen}");
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
    // A metric of the training batches, and metrics of more than one value.
    let unmeasured = manifest(&format!(
        "{}\n    keep-best monitor=\"val.f1-per-class\"\n    validate {{\n        metrics \"confusion-matrix\"\n    }}",
        EARLY.replace("val.loss", "f1-macro")
    ));
    std::fs::write(d.join("unmeasured.kdl"), unmeasured).unwrap();
    let out = pipeline(d, &["check", "unmeasured.kdl"]);
    assert!(!out.status.success());
    assert_fixture(
        "lifecycle-monitor-unmeasured.check.stderr",
        &text(&out.stderr),
    );
    // Best weights a stage does not keep, or not that many.
    let no_best = manifest(&format!("{EARLY}\n    keep-best k=2"))
        .replace(
            "eval \"test\" needs=\"train\"",
            "eval \"test\" needs=\"train\" from=\"best-3\"",
        )
        .replace(
            "path=\"out/model.safetensors\"",
            "path=\"out/model.safetensors\" from=\"worst\"",
        );
    std::fs::write(d.join("no-best.kdl"), &no_best).unwrap();
    let out = pipeline(d, &["check", "no-best.kdl"]);
    assert!(!out.status.success());
    assert_fixture("lifecycle-no-best.check.stderr", &text(&out.stderr));
    let none_kept = manifest(EARLY).replace(
        "path=\"out/model.safetensors\"",
        "path=\"out/model.safetensors\" from=\"best\"",
    );
    std::fs::write(d.join("none-kept.kdl"), &none_kept).unwrap();
    let out = pipeline(d, &["check", "none-kept.kdl"]);
    assert!(!out.status.success());
    assert_fixture("lifecycle-none-kept.check.stderr", &text(&out.stderr));
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
    let text_ = manifest(&format!(
        "{EARLY}\n    keep-best monitor=\"val.accuracy\" k=2"
    ))
    .replace(
        "eval \"test\" needs=\"train\"",
        "eval \"test\" needs=\"train\" from=\"best\"",
    );
    let report = run(d, "ddp.kdl", &text_, &ddp);
    let stopped = report["stages"][0]["stopped"]["epoch"].as_u64().unwrap();
    assert!((4..200).contains(&stopped), "{report}");
    let records = epochs(d, &report);
    assert_eq!(records.len() as u64, stopped);
    // Rank 0 keeps the weights of its best validations.
    let best = &report["stages"][0]["best"][0];
    let top = records
        .iter()
        .map(|r| r["val_accuracy"].as_f64().unwrap())
        .fold(f64::MIN, f64::max);
    assert_eq!(best["score"].as_f64().unwrap(), top, "{report}");
    // … and evaluates them.
    assert!(
        report["stages"][1]["metrics"]["accuracy"].is_f64(),
        "{report}"
    );
}
