//! End-to-end tests of the `pipeline` binary: what a user types, what a user sees.
//!
//! Rendered diagnostics are compared whole against `tests/fixtures/*.stderr`; run with
//! `PIPELINE_BLESS=1` to rewrite those files after an intended change, then review the diff.

use crate::common::{assert_fixture, digits_project, pipeline, root, text};
use serde_json::Value;
use std::path::Path;

#[test]
fn every_example_and_benchmark_manifest_passes_check() {
    let mut examples: Vec<String> = ["examples", "bench/manifests"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(root().join(dir)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kdl"))
        .map(|p| p.display().to_string())
        .collect();
    examples.sort();
    assert!(!examples.is_empty());
    let mut args = vec!["check"];
    args.extend(examples.iter().map(String::as_str));
    let out = pipeline(&root(), &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for example in &examples {
        assert!(
            text(&out.stderr).contains(&format!("ok: {example}")),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn check_renders_every_problem_pointing_into_the_file() {
    let dir = root().join("tests/fixtures");
    for name in [
        "invalid-values",
        "cycle",
        "model-graph",
        "residual-mismatch",
    ] {
        let out = pipeline(&dir, &["check", &format!("{name}.kdl")]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert_eq!(text(&out.stdout), "");
        assert_fixture(&format!("{name}.check.stderr"), &text(&out.stderr));
    }
}

#[test]
fn check_json_gives_positions_for_ci() {
    let out = pipeline(
        &root().join("tests/fixtures"),
        &["check", "--json", "invalid-values.kdl"],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let diags = v["diagnostics"].as_array().unwrap();
    assert_eq!(diags.len(), 8);
    assert_eq!(
        diags[0],
        serde_json::json!({
            "code": "pipeline::manifest::unknown_value",
            "severity": "error",
            "message": "`standrd` is not a valid `data.scale`",
            "file": "invalid-values.kdl",
            "line": 5,
            "column": 11,
            "help": "did you mean `standard`?",
        })
    );
    let out = pipeline(&root(), &["check", "--json", "examples/digits.kdl"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout).trim(), r#"{"diagnostics":[],"ok":true}"#);
}

#[test]
fn check_takes_overrides_and_checks_them_like_the_file() {
    let out = pipeline(
        &root(),
        &[
            "check",
            "examples/digits.kdl",
            "--set",
            "optimizer.lr=-1",
            "--set",
            "train.epochs=2",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`optimizer.lr` is out of range: -1 (from --set optimizer.lr=-1)"),
        "{stderr}"
    );
    let out = pipeline(
        &root(),
        &["check", "examples/digits.kdl", "--set", "optimizer.lr"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "a malformed --set is a usage error"
    );
}

#[test]
fn a_missing_manifest_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = pipeline(dir.path(), &["run"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot read pipeline.kdl"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("pass the manifest's path"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn graph_prints_the_stage_dag() {
    let out = pipeline(
        &root(),
        &["graph", "examples/digits.kdl", "--format", "mermaid"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "flowchart LR\n    s0[\"train (train)\"]\n    s1([\"test (eval)\"])\n    s2[(\"export (checkpoint)\")]\n    s0 --> s1\n    s0 --> s2\n"
    );
    let out = pipeline(&root(), &["graph", "examples/digits.kdl"]);
    assert!(
        text(&out.stdout).starts_with("digraph \"digits\" {"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn bad_data_and_models_are_diagnosed_before_training() {
    let dir = root().join("tests/fixtures");
    for name in [
        "missing-data",
        "short-row",
        "label-out-of-range",
        "conv-on-flat",
        "residual-mismatch",
    ] {
        let out = pipeline(&dir, &["run", &format!("{name}.kdl")]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert_fixture(&format!("{name}.run.stderr"), &text(&out.stderr));
    }
    assert!(
        !dir.join(".pipeline").exists(),
        "a run that cannot start writes nothing"
    );
}

#[test]
fn digits_trains_evaluates_and_exports() {
    let project = digits_project();
    let out = pipeline(
        project.path(),
        &["run", "digits.kdl", "--set", "train.epochs=4", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["pipeline"], "digits");
    let stages = report["stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["train", "test", "export"]);
    assert!(stages.iter().all(|s| s["status"] == "ran"), "{report:#}");
    let accuracy = stages[1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(
        accuracy > 0.8,
        "test accuracy {accuracy} after 4 epochs (chance is 0.1)"
    );

    // metrics.jsonl: one line per epoch, the loss going down, then the eval line (and a
    // step record every 50 steps).
    let run_dir = project.path().join(report["run_dir"].as_str().unwrap());
    let lines: Vec<Value> = std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["record"] != "step")
        .collect();
    assert_eq!(lines.len(), 5);
    let losses: Vec<f64> = lines[..4]
        .iter()
        .map(|l| l["loss"].as_f64().unwrap())
        .collect();
    assert!(
        losses[3] < losses[0] / 2.0,
        "training loss should fall: {losses:?}"
    );
    assert_eq!(lines[4]["stage"], "test");

    // The checkpoint: safetensors plus metadata, nothing half-written left behind.
    let weights = run_dir.join("export.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    assert_eq!(
        header["1.weight"]["shape"],
        serde_json::json!([32, 1, 3, 3])
    );
    assert_eq!(header["1.weight"]["dtype"], "F32");
    assert!(
        header.get("2.running_mean").is_some(),
        "batch-norm statistics are exported"
    );
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("export.json")).unwrap())
            .unwrap();
    assert_eq!(meta["pipeline"], "digits");
    assert_eq!(meta["from_stage"], "train");
    assert_eq!(meta["epoch"], 4);
    assert_eq!(
        meta["fingerprint"].as_str().unwrap().len(),
        64,
        "the stage's cache key"
    );
    assert_eq!(
        meta["scaling"]["kind"], "standard",
        "what applying the model needs"
    );
    assert_eq!(meta["scaling"]["subtract"].as_array().unwrap().len(), 64);
    assert_eq!(meta["precision"], "32");
    assert_eq!(meta["loss"], "cross-entropy");
    let leftovers = std::fs::read_dir(&run_dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".tmp")
        })
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn stage_selects_what_runs_and_the_summary_table_is_printed() {
    let project = digits_project();
    let out = pipeline(
        project.path(),
        &[
            "run",
            "digits.kdl",
            "--stage",
            "train",
            "--set",
            "train.epochs=1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("stage  kind   status  time"), "{stdout}");
    assert!(stdout.contains("\ntrain  train  ran"), "{stdout}");
    assert!(!stdout.contains("export"), "{stdout}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("train epoch 1/1  loss"),
        "plain progress lines when not a terminal: {stderr}"
    );
    assert!(
        stderr.contains("1797 samples (1438 train, 0 val, 359 test)"),
        "{stderr}"
    );

    let out = pipeline(project.path(), &["run", "digits.kdl", "--stage", "tset"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("help: did you mean `test`?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn every_compatibility_rule_is_rendered_pointing_at_each_entry_involved() {
    let dir = root().join("tests/fixtures/rules");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kdl"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let driver = Path::new("/proc/driver/nvidia/version").exists();
    let mut seen = String::new();
    for name in names {
        if name == "cuda-without-driver" && driver {
            eprintln!("skipped {name}: this machine has an NVIDIA driver");
            continue;
        }
        let out = pipeline(&dir, &["check", &format!("{name}.kdl")]);
        let stderr = text(&out.stderr);
        assert_fixture(&format!("rules/{name}.check.stderr"), &stderr);
        seen += &stderr;
    }
    for rule in pipeline_core::compat::RULES {
        if rule.when.starts_with("check") {
            assert!(
                seen.contains(rule.code),
                "no fixture triggers {}",
                rule.code
            );
        }
    }
}

#[test]
fn explain_documents_a_key_and_the_rules_it_meets() {
    let out = pipeline(&root(), &["explain", "accelerator.loss-scale"]);
    assert!(out.status.success());
    assert_fixture("explain-loss-scale.stdout", &text(&out.stdout));
    // A key that takes metrics lists them (pipeline_core's), one that takes registered
    // callbacks says that this program registers none.
    let out = pipeline(&root(), &["explain", "train.validate.metrics"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("value: one or more metric names")
            && shown.contains("`r2`: the coefficient of determination"),
        "{shown}"
    );
    let out = pipeline(&root(), &["explain", "train.callbacks"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("value: one or more names of registered members")
            && shown.contains("this program registers none"),
        "{shown}"
    );
    let out = pipeline(&root(), &["explain", "acelerator"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("did you mean `accelerator`?"));
    let out = pipeline(&root(), &["explain"]);
    let all = text(&out.stdout);
    for section in manifests::schema::sections() {
        for key in section.keys {
            assert!(
                all.contains(&format!("\n{}.{}\n", section.name, key.name)),
                "{}.{} is documented",
                section.name,
                key.name
            );
        }
    }
}

/// Test accuracy of the digits example with `--set` values.
fn digits_accuracy(project: &Path, sets: &[&str]) -> f64 {
    let mut args = vec!["run", "digits.kdl", "--json", "--no-cache"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = pipeline(project, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap()
}

#[test]
fn digits_in_bf16_mixed_on_the_cpu_is_within_a_point_of_fp32() {
    let project = digits_project();
    let epochs = "train.epochs=12";
    let fp32 = digits_accuracy(project.path(), &[epochs]);
    let bf16 = digits_accuracy(
        project.path(),
        &[
            epochs,
            "accelerator.precision=bf16-mixed",
            "accelerator.deterministic=#true",
        ],
    );
    assert!(fp32 > 0.9, "fp32 {fp32}");
    assert!(
        (fp32 - bf16).abs() <= 0.01,
        "fp32 {fp32} vs bf16-mixed {bf16}"
    );
}

#[test]
fn uneven_accumulation_is_a_warning_when_the_run_starts() {
    let dir = root().join("tests/fixtures");
    let project = tempfile::tempdir().unwrap();
    std::fs::copy(dir.join("data/tiny.csv"), project.path().join("tiny.csv")).unwrap();
    std::fs::write(
        project.path().join("acc.kdl"),
        "data { source \"tiny.csv\"; split train=1.0 val=0.0 test=0.0; }\nmodel { linear 3; }\nloss \"cross-entropy\"\noptimizer \"sgd\" lr=0.1\naccelerator accumulate=4\ntrain epochs=1 batch-size=10\n",
    )
    .unwrap();
    let out = pipeline(project.path(), &["run", "acc.kdl", "--no-cache"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stderr);
    assert!(
        log.contains("warning[pipeline::accelerator::uneven_accumulation]: stage `train`: 6 batches per epoch do not divide into steps of 4; the last step of each epoch sums 2\n  help: pick an `accumulate`"),
        "{log}"
    );
    assert!(
        log.contains(
            "effective batch 40 (10 × 4 accumulated × 1 process) · 2 optimizer steps per epoch"
        ),
        "{log}"
    );
}

/// `pipeline check --nproc-per-node N --nnodes M --device D` decides the rules that wait
/// for `run` (how the job is launched, what its machines have) before it is queued,
/// located in the file as every diagnostic.
#[test]
fn check_with_the_launch_context_decides_what_would_stop_the_job() {
    let manifest = crate::common::SMALL.replace(
        "train epochs=3",
        "accelerator strategy=\"ddp\" device=\"cuda\"\ntrain epochs=3",
    );
    let dir = crate::common::small_project(&manifest);
    let d = dir.path();
    let check = |args: &[&str]| {
        let mut all = vec!["check", "small.kdl"];
        all.extend(args);
        let out = pipeline(d, &all);
        (out.status.code(), text(&out.stderr))
    };
    // Said of the job: two processes on machines with GPUs, whatever this machine has.
    let (code, stderr) = check(&["--nproc-per-node", "2", "--device", "cuda"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("NVIDIA driver"), "{stderr}");
    // One process of `ddp`, on machines without a GPU: both refused now.
    let (code, stderr) = check(&["--nproc-per-node", "1", "--device", "cpu"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_fixture("check-launch-one-process-no-gpu.stderr", &stderr);
    // Processes over machines: 2 × 2 of a strategy of one process.
    let none = crate::common::SMALL.replace(
        "train epochs=3",
        "accelerator strategy=\"none\"\ntrain epochs=3",
    );
    std::fs::write(d.join("small.kdl"), none).unwrap();
    let (code, stderr) = check(&["--nproc-per-node", "2", "--nnodes", "2"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("pipeline::accelerator::processes_without_strategy"),
        "{stderr}"
    );
    assert!(
        stderr.contains("4 processes, but no distributed strategy"),
        "{stderr}"
    );
    assert_eq!(check(&[]).0, Some(0));
}
