//! End-to-end tests of fine-tuning with the real binary: a `train` stage that starts
//! from another model's checkpoint (`init`, `strict=#false`) and freezes some of its
//! parameters (`freeze`).

use crate::common;

use crate::common::{
    assert_fixture, kill_after_snapshot, pipeline, small_project, tensors, text, SMALL,
};
use serde_json::{json, Value};
use std::path::Path;

/// SMALL's model (`linear 32; relu; linear 10`) with another head: layer 2 is now
/// `linear 20`, and a new layer 4 maps it to the 10 classes. Layer 0 comes from the
/// pretrained weights and stays frozen, under a weight decay that would move it.
const TUNE: &str = r#"pipeline "tune"
seed 5
data {
    source "data/digits.csv.gz"
    scale "minmax"
    split train=0.8 test=0.2
}
model {
    linear 32
    relu
    linear 20
    relu
    linear 10
}
loss "cross-entropy"
optimizer "adamw" lr=0.01 weight-decay=0.1
train "tune" epochs=2 batch-size=64 init="pretrained.safetensors" strict=#false {
    freeze "0.*"
}
checkpoint "tuned" needs="tune" path="out/tuned.safetensors"
"#;

/// A project where SMALL has been trained and its checkpoint copied to
/// `pretrained.safetensors`, with `tune.kdl` holding `manifest`.
fn pretrained(manifest: &str) -> tempfile::TempDir {
    let dir = small_project(SMALL);
    let out = pipeline(dir.path(), &["run", "small.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::copy(
        dir.path().join("out/model.safetensors"),
        dir.path().join("pretrained.safetensors"),
    )
    .unwrap();
    std::fs::write(dir.path().join("tune.kdl"), manifest).unwrap();
    dir
}

/// `pipeline run tune.kdl --json ARGS`: its report and its stderr.
fn run(dir: &Path, args: &[&str], ok: bool) -> (Value, String) {
    let mut all = vec!["run", "tune.kdl", "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert_eq!(out.status.success(), ok, "{}", text(&out.stderr));
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        text(&out.stderr),
    )
}

/// The tensor `name` of `weights`, as bits (so that equality is bit for bit).
fn bits(weights: &[(String, Vec<f32>)], name: &str) -> Vec<u32> {
    let (_, values) = weights
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_new_head_starts_from_the_layers_that_match_and_the_run_names_the_others() {
    let dir = pretrained(TUNE);
    let (report, log) = run(dir.path(), &[], true);
    assert_eq!(
        report["stages"][0]["init"],
        json!({
            "loaded": ["0.bias", "0.weight"],
            "missing": ["4.bias", "4.weight"],
            "unexpected": [],
            "wrong_shape": [
                {"name": "2.bias", "model": [20], "file": [10]},
                {"name": "2.weight", "model": [20, 32], "file": [10, 32]},
            ],
        })
    );
    assert!(
        log.contains(
            "warning: stage `tune` loaded 2 of the model's 6 tensors from pretrained.safetensors (`strict=#false`)\n  \
             freshly initialised: `2.bias` (the model's [20], the file's [10]), `2.weight` (the model's [20, 32], the file's [10, 32]), `4.bias`, `4.weight`\n  \
             unused in the file: `2.bias`, `2.weight`\n"
        ),
        "{log}"
    );
    // Layer 0 started as the checkpoint's and, frozen, is still exactly that.
    let (before, after) = (
        tensors(&dir.path().join("pretrained.safetensors")),
        tensors(&dir.path().join("out/tuned.safetensors")),
    );
    for name in ["0.weight", "0.bias"] {
        assert_eq!(bits(&after, name), bits(&before, name), "{name}");
    }
    assert_eq!(bits(&after, "2.weight").len(), 20 * 32);
    assert_eq!(bits(&after, "4.weight").len(), 10 * 20);
}

#[test]
fn strict_refuses_another_model_naming_every_tensor_that_does_not_fit() {
    let dir = pretrained(&TUNE.replace(" strict=#false", ""));
    let (report, log) = run(dir.path(), &[], false);
    assert_eq!(
        report["stages"][0]["error"]["code"],
        "pipeline::train::bad_init"
    );
    assert_eq!(report["stages"][1]["status"], "skipped");
    assert_fixture("finetune-strict.run.stderr", &log);
}

#[test]
fn a_frozen_layer_keeps_its_starting_weights_bit_for_bit_and_the_others_train() {
    let same = SMALL
        .replace("weight-decay=0.0", "weight-decay=0.1")
        .replace(
            "train epochs=3 batch-size=64\n",
            "train epochs=2 batch-size=64 init=\"pretrained.safetensors\" freeze=\"0.*\"\n",
        )
        .replace("out/model.safetensors", "out/tuned.safetensors");
    let dir = pretrained(&same);
    let (report, log) = run(dir.path(), &[], true);
    assert_eq!(
        report["stages"][0]["init"]["loaded"],
        json!(["0.bias", "0.weight", "2.bias", "2.weight"])
    );
    assert!(
        !log.contains("warning"),
        "an exact match says nothing: {log}"
    );
    let (before, after) = (
        tensors(&dir.path().join("pretrained.safetensors")),
        tensors(&dir.path().join("out/tuned.safetensors")),
    );
    for name in ["0.weight", "0.bias"] {
        assert_eq!(bits(&after, name), bits(&before, name), "{name} is frozen");
    }
    for name in ["2.weight", "2.bias"] {
        assert_ne!(bits(&after, name), bits(&before, name), "{name} trains");
    }
}

#[test]
fn a_freeze_pattern_that_matches_nothing_is_an_error_on_the_pattern() {
    let dir = pretrained(&TUNE.replace("freeze \"0.*\"", "freeze \"0.*\" \"5.*\""));
    let (report, log) = run(dir.path(), &[], false);
    assert_eq!(
        report["stages"][0]["error"]["code"],
        "pipeline::train::freeze_matches_nothing"
    );
    assert_fixture("finetune-freeze-nothing.run.stderr", &log);

    std::fs::write(
        dir.path().join("tune.kdl"),
        TUNE.replace("freeze \"0.*\"", "freeze \"0.wieght\""),
    )
    .unwrap();
    let (report, _) = run(dir.path(), &[], false);
    let error = &report["stages"][0]["error"];
    assert_eq!(error["help"], "did you mean `0.weight`?");
    assert_eq!(error["line"], 18, "on the pattern: {error:#}");

    let (report, _) = run(dir.path(), &["--set", "tune.freeze=*"], false);
    assert_eq!(
        report["stages"][0]["error"]["code"],
        "pipeline::train::all_frozen"
    );
}

#[test]
fn changing_freeze_or_strict_makes_the_stage_stale_and_status_says_why() {
    let dir = pretrained(TUNE);
    run(dir.path(), &[], true);
    let status = |args: &[&str]| {
        let mut all = vec!["status", "tune.kdl"];
        all.extend(args);
        let out = pipeline(dir.path(), &all);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(
        status(&[]),
        "tune · 2 of 2 stages fresh · cache ./.pipeline/cache\n\
         stage  kind        status  why\n\
         tune   train       fresh\n\
         tuned  checkpoint  fresh\n"
    );
    assert_eq!(
        status(&["--set", "tune.freeze=2.*"]),
        "tune · 0 of 2 stages fresh · cache ./.pipeline/cache\n\
         stage  kind        status  why\n\
         tune   train       stale   train.freeze changed [\"0.*\"] → [\"2.*\"]\n\
         tuned  checkpoint  stale   upstream stage tune is stale\n"
    );
    assert!(
        status(&["--set", "tune.strict=true"])
            .contains("tune   train       stale   train.strict changed false → true\n"),
        "{}",
        status(&["--set", "tune.strict=true"])
    );
    // The same patterns in another order, and the default written out, are the same key.
    std::fs::write(
        dir.path().join("tune.kdl"),
        TUNE.replace("freeze \"0.*\"", "freeze \"0.*\" \"0.*\""),
    )
    .unwrap();
    assert!(status(&[]).contains("2 of 2 stages fresh"));
}

/// The digits CNN with its convolution frozen and a snapshot every 5 steps.
fn frozen_digits() -> tempfile::TempDir {
    let dir = common::digits_project();
    let text = std::fs::read_to_string(dir.path().join("digits.kdl")).unwrap();
    let text = text.replace(
        "    epochs 30\n    batch-size 64\n",
        "    epochs 6\n    batch-size 64\n    snapshot-every-steps 5\n    freeze \"1.*\"\n",
    );
    assert!(text.contains("freeze \"1.*\""));
    std::fs::write(dir.path().join("digits.kdl"), text).unwrap();
    dir
}

#[test]
fn a_killed_run_with_frozen_layers_resumes_to_the_same_weights_bit_for_bit() {
    let killed = frozen_digits();
    let at = kill_after_snapshot(killed.path(), "digits.kdl", 30);
    let out = pipeline(killed.path(), &["run", "digits.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("resuming `train` from its snapshot"),
        "{}",
        text(&out.stderr)
    );
    let resumed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let whole = frozen_digits();
    let out = pipeline(whole.path(), &["run", "digits.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let uninterrupted: Value = serde_json::from_slice(&out.stdout).unwrap();
    let exported = |dir: &Path, report: &Value| {
        let path = report["stages"][2]["outputs"][0].as_str().unwrap();
        std::fs::read(dir.join(path)).unwrap()
    };
    assert!(
        exported(killed.path(), &resumed) == exported(whole.path(), &uninterrupted),
        "resumed at step {at}: the weights must be identical"
    );
}
