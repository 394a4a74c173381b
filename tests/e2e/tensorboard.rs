//! TensorBoard: a run's event files, read with TensorBoard's own reader
//! (`EventAccumulator`, in the project's venv), hold exactly the scalars of
//! `metrics.jsonl` at the optimizer steps they were measured at, and the run's
//! hyper-parameters for the HParams tab; `logging { tensorboard #false }` writes none.

use crate::common;

use crate::common::{pipeline, py, text};
use serde_json::Value;
use std::path::Path;

fn manifest(logging: &str) -> String {
    format!(
        r#"pipeline "tb"
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
schedule "cosine"
train {{
    epochs 3
    batch-size 64
    validate every-steps=15 {{
        metrics "f1-macro"
    }}
}}
{logging}
"#
    )
}

/// A step record every 8 steps, with the gradients' norm.
const STEPS: &str = "logging {\n    log-every-steps 8\n    grad-norm #true\n}";

fn run(dir: &Path, text_: &str, args: &[&str]) -> Value {
    std::fs::write(dir.join("tb.kdl"), text_).unwrap();
    let mut all = vec!["run", "tb.kdl", "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every scalar TensorBoard's reader finds, as `TAG STEP VALUE` lines, then the
/// HParams plugin's hyper-parameters and session status as `hparam NAME VALUE` and
/// `status N`.
const READ: &str = r#"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator, SCALARS, TENSORS
from tensorboard.plugins.hparams import metadata
ea = EventAccumulator(sys.argv[1], size_guidance={SCALARS: 0, TENSORS: 0})
ea.Reload()
for tag in sorted(ea.Tags()["scalars"]):
    for e in ea.Scalars(tag):
        print(tag, e.step, repr(e.value))
content = ea.PluginTagToContent("hparams")
start = metadata.parse_session_start_info_plugin_data(content["_hparams_/session_start_info"])
for name in sorted(start.hparams):
    v = start.hparams[name]
    print("hparam", name, v.WhichOneof("kind"), getattr(v, v.WhichOneof("kind")))
experiment = metadata.parse_experiment_plugin_data(content["_hparams_/experiment"])
print("metrics", " ".join(m.name.tag for m in experiment.metric_infos))
end = metadata.parse_session_end_info_plugin_data(content["_hparams_/session_end_info"])
print("status", end.status)
"#;

/// What TensorBoard's reader finds in the run's event files: the scalars by tag, step
/// and value, the hyper-parameters, and the lines naming the metrics and the status,
/// after comparing the scalars with `metrics.jsonl`'s.
fn read_and_compare(d: &Path, run_dir: &Path) -> (Vec<String>, Vec<String>) {
    let events = run_dir.join("tensorboard/train");
    let files: Vec<_> = std::fs::read_dir(&events).unwrap().collect();
    assert_eq!(files.len(), 1, "one event file");
    std::fs::write(d.join("read.py"), READ).unwrap();
    let read = py(
        d,
        &format!(
            "import runpy, sys\nsys.argv = ['read.py', {:?}]\nrunpy.run_path('read.py')\n",
            events.display().to_string()
        ),
    );
    // What metrics.jsonl says, as (tag, optimizer step, value).
    let mut expected: Vec<(String, u64, f64)> = Vec::new();
    let mut step = 0;
    let log = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    for line in log.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        if r["stage"] != "train" {
            continue;
        }
        if r["record"] == "epoch" {
            step += r["steps"].as_u64().unwrap();
        }
        let at = r.get("step").map_or(step, |s| s.as_u64().unwrap());
        let mut put = |tag: &str, x: &Value| {
            expected.push((tag.to_string(), at, x.as_f64().unwrap()));
        };
        let val = |k: &str| format!("val/{}", k.strip_prefix("val_").unwrap());
        for (k, x) in r.as_object().unwrap() {
            match (r["record"].as_str().unwrap(), k.as_str()) {
                // A validation within an epoch: its values at its step.
                ("validation", k) if k.starts_with("val_") => put(&val(k), x),
                // A step record: at its step.
                (
                    "step",
                    "loss" | "accuracy" | "lr" | "grad_norm" | "loss_scale" | "samples_per_second",
                ) => put(&format!("step/{k}"), x),
                // An epoch's record: at the step it ended on.
                ("epoch", "loss" | "accuracy") => put(&format!("train/{k}"), x),
                ("epoch", "lr" | "samples_per_second" | "epoch") => put(k, x),
                ("epoch", k) if k.starts_with("val_") => put(&val(k), x),
                _ => {}
            }
        }
    }
    expected.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut found: Vec<(String, u64, f64)> = Vec::new();
    let mut hparams = Vec::new();
    let mut rest = Vec::new();
    for line in read.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[0] {
            "hparam" => hparams.push(parts[1..].join(" ")),
            "metrics" | "status" => rest.push(line.to_string()),
            tag => found.push((
                tag.to_string(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )),
        }
    }
    // 20 steps per epoch, validated every 15: within epochs at 15, 30 and 45, and at
    // every epoch's end (20, 40, 60); step records every 8 steps.
    assert_eq!(
        found.iter().map(|f| (&f.0, f.1)).collect::<Vec<_>>(),
        expected.iter().map(|e| (&e.0, e.1)).collect::<Vec<_>>(),
        "{read}"
    );
    assert!(found.iter().any(|f| f.0 == "val/f1-macro" && f.1 == 15));
    assert!(found.iter().any(|f| f.0 == "step/loss" && f.1 == 8));
    assert!(found.iter().any(|f| f.0 == "step/grad_norm" && f.1 == 8));
    for (f, e) in found.iter().zip(&expected) {
        // TensorBoard keeps float32.
        assert_eq!(f.2, e.2 as f32 as f64, "{} at {}", f.0, f.1);
    }
    (hparams, rest)
}

#[test]
fn tensorboards_reader_finds_the_scalars_of_metrics_jsonl_and_the_hparams() {
    let dir = common::digits_project();
    let d = dir.path();
    let report = run(d, &manifest(STEPS), &[]);
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let (hparams, rest) = read_and_compare(d, &run_dir);
    assert_eq!(
        hparams,
        [
            "accumulate number_value 1.0",
            "batch_size number_value 64.0",
            "epochs number_value 3.0",
            "loss string_value cross-entropy",
            "lr number_value 0.003",
            "optimizer string_value adam",
            "precision string_value 32",
            "schedule string_value cosine",
            "seed number_value 42.0",
            "weight_decay number_value 0.0",
        ]
    );
    assert_eq!(rest.len(), 2, "{rest:?}");
    for tag in [
        "train/loss",
        "val/loss",
        "val/accuracy",
        "val/f1-macro",
        "lr",
    ] {
        assert!(rest[0].split(' ').any(|t| t == tag), "{tag}: {}", rest[0]);
    }
    // SessionEndInfo.status: SUCCESS.
    assert_eq!(rest[1], "status 1");
}

#[test]
fn under_ddp_rank_0_writes_the_scalars_of_its_metrics_jsonl() {
    let dir = common::digits_project();
    let d = dir.path();
    let text_ = manifest(&format!("{STEPS}\naccelerator strategy=\"ddp\""));
    let report = run(d, &text_, &["--nproc-per-node", "2"]);
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let (hparams, _) = read_and_compare(d, &run_dir);
    assert!(hparams.contains(&"batch_size number_value 64.0".to_string()));
    // The other process writes none, in its own directory or in the run's.
    let boards: Vec<_> = walk(d)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("tfevents"))
        .collect();
    assert_eq!(boards.len(), 1, "{boards:?}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        match path.is_dir() {
            true => files.extend(walk(&path)),
            false => files.push(path),
        }
    }
    files
}

#[test]
fn tensorboard_off_writes_no_event_file() {
    let dir = common::digits_project();
    let d = dir.path();
    let report = run(d, &manifest("logging {\n    tensorboard #false\n}"), &[]);
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    assert!(run_dir.join("metrics.jsonl").exists());
    assert!(!run_dir.join("tensorboard").exists());
}

#[test]
fn tensorboard_dir_collects_the_runs_of_every_manifest_in_one_tree() {
    let dir = common::digits_project();
    let d = dir.path();
    for name in ["first", "second"] {
        let text_ = manifest("").replace("pipeline \"tb\"", &format!("pipeline \"{name}\""));
        std::fs::write(d.join("tb.kdl"), text_).unwrap();
        let out = pipeline(
            d,
            &[
                "run",
                "tb.kdl",
                "--json",
                "--force",
                "--tensorboard-dir",
                "boards",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run_dir = d.join(report["run_dir"].as_str().unwrap());
        assert!(!run_dir.join("tensorboard").exists());
        let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
        let stage = d.join("boards").join(name).join(id).join("train");
        let files: Vec<_> = std::fs::read_dir(&stage).unwrap().collect();
        assert_eq!(files.len(), 1, "{}", stage.display());
    }
    let pipelines: Vec<String> = std::fs::read_dir(d.join("boards"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(pipelines.len(), 2, "{pipelines:?}");
}

#[test]
fn a_tensorboard_dir_that_is_a_file_is_a_clear_error() {
    let dir = common::digits_project();
    let d = dir.path();
    std::fs::write(d.join("tb.kdl"), manifest("")).unwrap();
    std::fs::write(d.join("boards"), "not a directory").unwrap();
    let out = pipeline(d, &["run", "tb.kdl", "--tensorboard-dir", "boards"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot write TensorBoard's event file in boards/tb/"),
        "{err}"
    );
    assert!(err.contains("logging { tensorboard #false }"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        std::fs::read_to_string(d.join("boards")).unwrap(),
        "not a directory"
    );
}
