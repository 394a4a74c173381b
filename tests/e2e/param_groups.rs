//! Optimizer parameter groups (`optimizer { group "*.bias" weight-decay=0 }`) against
//! PyTorch's `param_groups` in the project's torch venv: the same starting weights
//! (`train.init`), one full batch a step, a schedule scaling every group's rate; the
//! loss of every step and the final weights to 1e-6. A group with `lr=0` holds its layer
//! bit for bit; a pattern that matches no parameter fails the run at the pattern, with
//! the model's names; a run with groups killed after a snapshot resumes bit for bit.

use crate::common::{py, records, tensors, text};
use serde_json::Value;
use std::path::Path;

/// Writes `d.csv` (48 samples, 4 features, 3 classes) and `init.safetensors` (the
/// starting weights of `linear 8; relu; linear 3`), then trains as `groups` (Python's
/// `param_groups`, the names as the checkpoint writes them) say for 5 full-batch steps:
/// each step's loss and the final weights, as JSON.
fn reference(dir: &Path, optimizer: &str, groups: &str) -> Value {
    let scheduled = match optimizer.contains("# schedule") {
        true => "True",
        false => "False",
    };
    let out = py(
        dir,
        &format!(
            r#"{TINY_CLASSES}
import fnmatch, json
named = dict(model.named_parameters())
groups, taken = [], set()
for g_ in {groups}:
    patterns = g_.pop("patterns")
    params = [n for n in named if n not in taken and any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    taken.update(params)
    groups.append(dict(params=[named[n] for n in params], **g_))
groups.append(dict(params=[named[n] for n in named if n not in taken]))
opt = {optimizer}
sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.5, 5) if {scheduled} else None
losses = []
for _ in range(5):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    losses.append(loss.item())
    loss.backward()
    opt.step()
    if sched:
        sched.step()
print(json.dumps({{"losses": losses, "weights": {{k: v.flatten().tolist() for k, v in model.state_dict().items()}}}}))
"#
        ),
    );
    serde_json::from_str(out.trim()).unwrap()
}

/// The data and starting weights both sides train from (`x`, `y`, `model` in Python).
const TINY_CLASSES: &str = include_str!("../fixtures/tiny-classes.py");

fn manifest(optimizer: &str) -> String {
    format!(
        r#"pipeline "groups"
data {{
    source "d.csv"
    label "last"
    split train=1.0 test=0.0
}}
model {{
    linear 8
    relu
    linear 3
}}
loss "cross-entropy"
{optimizer}
train epochs=5 batch-size=64 init="init.safetensors"
checkpoint "save" needs="train" path="out/model.safetensors"
logging {{
    log-every-steps 1
}}
"#
    )
}

/// Trains `optimizer` here and `torch_optimizer` over `groups` in PyTorch; compares
/// each step's loss and the final weights, and gives the final weights.
fn compare(optimizer: &str, torch_optimizer: &str, groups: &str) -> Vec<(String, Vec<f32>)> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let theirs = reference(d, torch_optimizer, groups);
    std::fs::write(d.join("g.kdl"), manifest(optimizer)).unwrap();
    let out = crate::common::pipeline(d, &["run", "g.kdl", "--json", "--no-cache"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let ours: Vec<f64> = records(&run_dir, "step")
        .iter()
        .map(|r| r["loss"].as_f64().unwrap())
        .collect();
    let expected: Vec<f64> = serde_json::from_value(theirs["losses"].clone()).unwrap();
    assert_eq!(ours.len(), 5, "a step record per step: {ours:?}");
    for (step, (a, b)) in ours.iter().zip(&expected).enumerate() {
        assert!(
            (a - b).abs() < 1e-6,
            "step {}: {ours:?} vs {expected:?}",
            step + 1
        );
    }
    let weights = tensors(&d.join("out/model.safetensors"));
    for (name, values) in &weights {
        let reference: Vec<f64> = serde_json::from_value(theirs["weights"][name].clone()).unwrap();
        assert_eq!(values.len(), reference.len(), "{name}");
        for (a, b) in values.iter().zip(&reference) {
            assert!(
                (*a as f64 - b).abs() < 1e-6,
                "{name}: {values:?} vs {reference:?}"
            );
        }
    }
    weights
}

#[test]
fn groups_update_as_pytorchs_param_groups() {
    // `0.bias` is in both groups' patterns: the first wins (no decay, the peak rate).
    compare(
        r#"optimizer "adamw" lr=0.05 weight-decay=0.1 {
    group "*.bias" weight-decay=0
    group "0.*" lr=0.01 beta1=0.8
}
schedule "linear" end-factor=0.5"#,
        // The schedule scales every group's rate alike, as PyTorch's `LinearLR` does.
        "torch.optim.AdamW(groups, lr=0.05, weight_decay=0.1) # schedule",
        r#"[dict(patterns=["*.bias"], weight_decay=0.0), dict(patterns=["0.*"], lr=0.01, betas=(0.8, 0.999))]"#,
    );
}

#[test]
fn a_group_with_no_rate_holds_its_layer_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let init = {
        reference(dir.path(), "torch.optim.SGD(groups, lr=0.1)", "[]");
        tensors(&dir.path().join("init.safetensors"))
    };
    let after = compare(
        r#"optimizer "sgd" lr=0.1 momentum=0.9 weight-decay=0.01 {
    group "2.*" lr=0
}"#,
        "torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.01)",
        r#"[dict(patterns=["2.*"], lr=0.0)]"#,
    );
    let bits = |w: &[(String, Vec<f32>)], name: &str| -> Vec<u32> {
        let (_, v) = w.iter().find(|(n, _)| n == name).unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    };
    for name in ["2.weight", "2.bias"] {
        assert_eq!(bits(&after, name), bits(&init, name), "{name} held");
    }
    assert_ne!(
        bits(&after, "0.weight"),
        bits(&init, "0.weight"),
        "0.weight trained"
    );
}

#[test]
fn a_pattern_that_matches_nothing_fails_the_run_at_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    reference(d, "torch.optim.SGD(groups, lr=0.1)", "[]");
    let text_ = manifest(
        r#"optimizer "adamw" {
    group "*.bias" "0.wieght" weight-decay=0
}"#,
    );
    std::fs::write(d.join("g.kdl"), text_).unwrap();
    let out = crate::common::pipeline(d, &["run", "g.kdl"]);
    assert!(!out.status.success());
    crate::common::assert_fixture(
        "group-matches-nothing.run.stderr",
        &crate::common::without_elapsed(&text(&out.stderr)),
    );
    // A key the optimizer does not take is refused at `check`.
    let text_ = manifest(
        r#"optimizer "adam" {
    group "*.bias" momentum=0.9
}"#,
    );
    std::fs::write(d.join("g.kdl"), text_).unwrap();
    let out = crate::common::pipeline(d, &["check", "g.kdl"]);
    assert!(!out.status.success());
    crate::common::assert_fixture("group-key-not-for-kind.check.stderr", &text(&out.stderr));
}

/// The digits CNN under SGD with momentum, its biases in a group of their own (another
/// rate, no weight decay, less momentum), a snapshot every 5 steps.
fn grouped_digits() -> tempfile::TempDir {
    let dir = crate::common::digits_project();
    let text = std::fs::read_to_string(dir.path().join("digits.kdl")).unwrap();
    let text = text
        .replace(
            "optimizer \"adamw\" lr=3e-3 weight-decay=1e-4",
            "optimizer \"sgd\" lr=0.05 momentum=0.9 weight-decay=1e-4 {\n    group \"*.bias\" lr=0.01 weight-decay=0 momentum=0.5\n}",
        )
        .replace(
            "    epochs 30\n    batch-size 64\n",
            "    epochs 6\n    batch-size 64\n    snapshot-every-steps 5\n",
        );
    assert!(text.contains("group \"*.bias\"") && text.contains("snapshot-every-steps 5"));
    std::fs::write(dir.path().join("digits.kdl"), text).unwrap();
    dir
}

/// Each group's optimizer state is in the snapshot: a run killed (SIGKILL) after a
/// snapshot resumes to the weights of one never stopped, bit for bit.
#[test]
fn a_killed_run_with_groups_resumes_to_the_same_weights_bit_for_bit() {
    let killed = grouped_digits();
    let at = crate::common::kill_after_snapshot(killed.path(), "digits.kdl", 30);
    let run = |dir: &Path| -> Vec<u8> {
        let out = crate::common::pipeline(dir, &["run", "digits.kdl", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr).contains("resuming `train` from its snapshot"),
            dir == killed.path(),
            "{}",
            text(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let path = report["stages"][2]["outputs"][0].as_str().unwrap();
        std::fs::read(dir.join(path)).unwrap()
    };
    let resumed = run(killed.path());
    let whole = grouped_digits();
    assert!(
        resumed == run(whole.path()),
        "resumed at step {at}: the weights must be identical"
    );
}
