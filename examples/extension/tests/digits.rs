//! The extension trains digits with its own strategy and precision on two processes, and
//! `check` holds them to the compatibility rules by what their descriptions say.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A copy of the example beside a copy of the digits data, as `../data/` it expects.
fn project() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::create_dir_all(dir.path().join("ext")).unwrap();
    std::fs::copy(
        root.join("examples/data/digits.csv.gz"),
        dir.path().join("data/digits.csv.gz"),
    )
    .expect("the digits data (scripts/setup.sh puts it in examples/data/)");
    std::fs::copy(
        root.join("examples/extension/digits.kdl"),
        dir.path().join("ext/digits.kdl"),
    )
    .unwrap();
    dir
}

fn program(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_digits-compressed"))
        .args(args)
        .current_dir(dir.join("ext"))
        .env("PIPELINE_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `ext/MANIFEST` for `epochs` epochs in one process at full precision (not the
/// example's own strategy and precision); its `--json` report.
fn run_one_process(dir: &Path, manifest: &str, epochs: u64) -> Value {
    let epochs = format!("train.epochs={epochs}");
    let out = program(
        dir,
        &[
            "run",
            manifest,
            "--json",
            "--set",
            "accelerator.strategy=none",
            "--set",
            "accelerator.precision=32",
            "--set",
            &epochs,
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_custom_strategy_and_precision_train_digits_on_two_processes() {
    let dir = project();
    let checked = program(dir.path(), &["check", "digits.kdl"]);
    assert!(checked.status.success(), "{}", stderr(&checked));

    let out = program(
        dir.path(),
        &["run", "digits.kdl", "--nproc-per-node", "2", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let test = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "test")
        .unwrap();
    let accuracy = test["metrics"]["accuracy"].as_f64().unwrap();
    eprintln!("digits with ddp-bf16 and bf16-inputs on 2 processes: {accuracy}");
    assert!(accuracy >= 0.95, "test accuracy {accuracy}");
}

/// The exported weights of a run on two processes with `--set`s, from the report.
fn exported(dir: &Path, sets: &[&str]) -> Vec<u8> {
    let mut args = vec![
        "run",
        "digits.kdl",
        "--nproc-per-node",
        "2",
        "--json",
        "--no-cache",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = program(dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = &report["stages"][2]["outputs"][0];
    std::fs::read(dir.join("ext").join(export.as_str().unwrap())).unwrap()
}

/// What ran is the registered strategy, not `ddp` under another name: with the same
/// precision, its bfloat16 gradients end in other weights than `ddp`'s float32 ones,
/// while a rerun of `ddp` ends in the same bytes.
#[test]
fn the_compressed_all_reduce_is_what_runs() {
    let dir = project();
    // One epoch tells the three apart as well as thirty.
    let (fp32, one) = ("accelerator.precision=32", "train.epochs=1");
    let ddp = exported(dir.path(), &[fp32, one, "accelerator.strategy=ddp"]);
    let again = exported(dir.path(), &[fp32, one, "accelerator.strategy=ddp"]);
    let compressed = exported(dir.path(), &[fp32, one]);
    assert!(ddp == again, "ddp is deterministic");
    assert!(compressed != ddp, "ddp-bf16 trained exactly as ddp");
}

#[test]
fn the_rules_ask_the_custom_members_what_they_are() {
    let dir = project();
    // `ddp-bf16` says it needs several processes: one is refused, as `ddp` would be.
    let out = program(dir.path(), &["run", "digits.kdl", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pipeline::accelerator::strategy_with_one_process")
            && stderr(&out).contains("`strategy \"ddp-bf16\"` in a run of one process"),
        "{}",
        stderr(&out)
    );
    // `explain` documents the members this program registered beside the built-ins.
    let out = program(dir.path(), &["explain", "accelerator.strategy"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("`ddp-bf16`: data parallel; gradients sent as bfloat16")
            && text.contains("value: one of \"none\", \"ddp\", \"zero1\", \"ddp-bf16\""),
        "{text}"
    );
    // An unknown name lists what this program registered, its own members with the rest.
    let text = std::fs::read_to_string(dir.path().join("ext/digits.kdl")).unwrap();
    let typo: PathBuf = dir.path().join("ext/typo.kdl");
    std::fs::write(&typo, text.replace("\"ddp-bf16\"", "\"ddp-bf61\"")).unwrap();
    let out = program(dir.path(), &["check", "typo.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("did you mean `ddp-bf16`?")
            && stderr(&out).contains("\"none\", \"ddp\", \"zero1\", \"ddp-bf16\""),
        "{}",
        stderr(&out)
    );
}

/// The test split's loss and accuracy of a one-process run with `--set`s.
fn test_scores(dir: &Path, sets: &[&str]) -> (f64, f64) {
    let mut args = vec!["run", "digits.kdl", "--json", "--no-cache"];
    let one = ["accelerator.strategy=none", "accelerator.precision=32"];
    for set in one.iter().chain(["train.epochs=2"].iter()).chain(sets) {
        args.extend(["--set", set]);
    }
    let out = program(dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let test = &report["stages"][1]["metrics"];
    (
        test["loss"].as_f64().unwrap(),
        test["accuracy"].as_f64().unwrap(),
    )
}

/// What runs under `loss "focal"` is the registered loss: with γ = 0 it is cross-entropy
/// (the same training, to float rounding), with γ = 2 its value is far below
/// cross-entropy's, as (1 − p_t)² discounts every well-classified sample.
#[test]
fn the_registered_focal_loss_is_what_trains() {
    let dir = project();
    let (ce, ce_accuracy) = test_scores(dir.path(), &["loss.kind=cross-entropy"]);
    let (zero, zero_accuracy) = test_scores(dir.path(), &["loss.kind=focal", "loss.gamma=0"]);
    let (two, two_accuracy) = test_scores(dir.path(), &["loss.kind=focal"]);
    eprintln!("test loss: cross-entropy {ce}, focal γ=0 {zero}, γ=2 {two}");
    assert!(
        (ce - zero).abs() <= 1e-4 * ce,
        "γ = 0: {zero}, cross-entropy {ce}"
    );
    assert_eq!(ce_accuracy, zero_accuracy);
    assert!(two < 0.5 * ce, "γ = 2: {two}, cross-entropy {ce}");
    assert!(two_accuracy > 0.9, "γ = 2 trains: {two_accuracy}");
}

/// `check` and `explain` know the registered loss's key, its bounds, and what it compares
/// (class indices: a regression metric is refused, as under cross-entropy).
#[test]
fn check_and_explain_know_the_registered_loss_and_its_key() {
    let dir = project();
    let text = std::fs::read_to_string(dir.path().join("ext/digits.kdl")).unwrap();
    let with = |name: &str, loss: &str, extra: &str| {
        let body = text.replace("loss \"cross-entropy\"", loss) + extra;
        std::fs::write(dir.path().join("ext").join(name), body).unwrap();
        program(dir.path(), &["check", name, "--json"])
    };
    let codes = |out: &Output| -> Vec<(String, String)> {
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let code = d["code"].as_str().unwrap().to_string();
                (code, d["message"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let ok = with("ok.kdl", "loss \"focal\" gamma=1.5", "");
    assert!(ok.status.success(), "{}", stderr(&ok));
    let negative = with("negative.kdl", "loss \"focal\" gamma=-1", "");
    assert_eq!(negative.status.code(), Some(1));
    assert_eq!(codes(&negative)[0].0, "pipeline::manifest::out_of_range");
    let elsewhere = with("elsewhere.kdl", "loss \"cross-entropy\" gamma=1", "");
    assert!(elsewhere.status.success(), "{}", stderr(&elsewhere));
    assert_eq!(
        codes(&elsewhere),
        [(
            "pipeline::manifest::ignored_key".to_string(),
            "`loss.gamma` has no effect with `cross-entropy`".to_string()
        )]
    );
    let r2 = with(
        "r2.kdl",
        "loss \"focal\"",
        "eval \"r2\" needs=\"train\" split=\"test\" { metrics \"r2\"; }\n",
    );
    assert_eq!(r2.status.code(), Some(1));
    assert_eq!(
        codes(&r2),
        [(
            "pipeline::eval::metric_for_another_task".to_string(),
            "`r2` measures regression (`mse`, `l1`, `huber`), but the loss is `focal`".to_string()
        )]
    );
    let out = program(dir.path(), &["explain", "loss"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("`focal`: class indices against a score per class")
            && shown.contains("loss.gamma")
            && shown.contains("only for kind: focal"),
        "{shown}"
    );
}

/// The data and starting weights both sides train from (`x`, `y`, `model` in Python),
/// shared with pipeline's own parameter-group tests.
const TINY_CLASSES: &str = include_str!("../../../tests/fixtures/tiny-classes.py");

/// Runs `code` with the project's torch venv's python (`scripts/test.sh` sets
/// `PIPELINE_VENV`) in `dir`.
fn py(dir: &Path, code: &str) {
    let venv = std::env::var_os("PIPELINE_VENV").expect("PIPELINE_VENV: run scripts/test.sh");
    std::fs::write(dir.join("make.py"), code).unwrap();
    let out = Command::new(Path::new(&venv).join("bin/python"))
        .arg("make.py")
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// What `metrics "brier"` measures is the registered metric: PyTorch's Brier score of the
/// same model on the same split (a scripted module, run by libtorch) gives the same
/// value; a monitor watching it goes down (`keep-best` keeps the lowest validation); and
/// `check` and `explain` know it.
#[test]
fn the_registered_brier_metric_is_what_measures() {
    let dir = project();
    let ext = dir.path().join("ext");
    py(
        &ext,
        r#"
import torch
import torch.nn.functional as F

class Brier(torch.nn.Module):
    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # `output`: the class probabilities (float64), as the built-in metrics read them.
        truth = F.one_hot(target, output.size(1)).to(output.dtype)
        return ((output - truth) ** 2).sum(1).mean()

torch.jit.script(Brier()).save("brier.pt")
"#,
    );
    let text = std::fs::read_to_string(ext.join("digits.kdl")).unwrap();
    let manifest = text
        .replace(
            "split train=0.8 test=0.2",
            "split train=0.7 val=0.1 test=0.2",
        )
        .replace(
            "batch-size 64\n",
            "batch-size 64\n    validate { metrics \"brier\"; }\n    keep-best monitor=\"val.brier\"\n",
        )
        .replace(
            "split \"test\"\n}",
            "split \"test\"\n    metrics \"accuracy\" \"brier\" \"torch-brier\"\n}\nmetric \"torch-brier\" torchscript=\"brier.pt\" mode=\"min\"",
        );
    std::fs::write(ext.join("brier.kdl"), &manifest).unwrap();
    let report = run_one_process(dir.path(), "brier.kdl", 3);
    let test = &report["stages"][1]["metrics"];
    let (ours, torch) = (
        test["brier"].as_f64().unwrap(),
        test["torch-brier"].as_f64().unwrap(),
    );
    eprintln!("test Brier score: registered {ours}, PyTorch's {torch}");
    assert!((ours - torch).abs() <= 1e-6, "{test}");
    assert!(ours > 0.0 && ours < 0.5, "{test}");
    // Every validation measured it; the kept weights are those of the lowest.
    let run_dir = ext.join(report["run_dir"].as_str().unwrap());
    let lines = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let scores: Vec<f64> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).unwrap()["val_brier"].as_f64())
        .collect();
    assert_eq!(scores.len(), 3, "{lines}");
    let lowest = scores.iter().copied().fold(f64::INFINITY, f64::min);
    let best = &report["stages"][0]["best"][0];
    assert_eq!(best["score"].as_f64(), Some(lowest), "{best} of {lines}");

    // `explain` lists it with the built-in metrics; `check` holds it to what it says it
    // measures (class probabilities: refused under a regression loss).
    let out = program(dir.path(), &["explain", "eval.metrics"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("`brier`: the Brier score") && shown.contains("`accuracy`: the share"),
        "{shown}"
    );
    std::fs::write(
        ext.join("mse.kdl"),
        manifest.replace("loss \"cross-entropy\"", "loss \"mse\""),
    )
    .unwrap();
    let out = program(dir.path(), &["check", "mse.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pipeline::eval::metric_for_another_task")
            && stderr(&out).contains("`brier` measures classification"),
        "{}",
        stderr(&out)
    );
}

/// What `optimizer "lion"` runs is the registered Lion: five full-batch steps from the
/// same starting weights give the losses and weights that lion-pytorch's update gives in
/// PyTorch (to 1e-6), with a parameter group; `check` holds it to its keys and `explain`
/// lists it.
#[test]
fn the_registered_lion_optimizer_is_what_updates() {
    let dir = project();
    let ext = dir.path().join("ext");
    py(
        &ext,
        &(TINY_CLASSES.to_string()
            + r#"
import fnmatch, json
state = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
losses = []
for _ in range(5):
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    losses.append(loss.item())
    loss.backward()
    with torch.no_grad():
        for n, p in model.named_parameters():
            # lion-pytorch's update; `group "*.bias" weight-decay=0`.
            lr, wd, b1, b2 = 0.003, (0.0 if fnmatch.fnmatchcase(n, "*.bias") else 0.1), 0.9, 0.99
            m = state[n]
            p.mul_(1 - lr * wd)
            p.add_((m * b1 + p.grad * (1 - b1)).sign(), alpha=-lr)
            m.mul_(b2).add_(p.grad, alpha=1 - b2)
json.dump({"losses": losses, "weights": {k: v.flatten().tolist() for k, v in model.state_dict().items()}}, open("reference.json", "w"))
"#),
    );
    let manifest = r#"pipeline "lion"
data {
    source "d.csv"
    label "last"
    split train=1.0 test=0.0
}
model {
    linear 8
    relu
    linear 3
}
loss "cross-entropy"
optimizer "lion" lr=0.003 weight-decay=0.1 beta2=0.99 {
    group "*.bias" weight-decay=0
}
train epochs=5 batch-size=64 init="init.safetensors"
checkpoint "save" needs="train" path="out/model.safetensors"
logging {
    log-every-steps 1
}
"#;
    std::fs::write(ext.join("lion.kdl"), manifest).unwrap();
    let out = program(dir.path(), &["run", "lion.kdl", "--json", "--no-cache"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_dir = ext.join(report["run_dir"].as_str().unwrap());
    std::fs::copy(run_dir.join("metrics.jsonl"), ext.join("metrics.jsonl")).unwrap();
    // Compared in Python, which reads safetensors.
    py(
        &ext,
        r#"
import json
from safetensors.torch import load_file
ref = json.load(open("reference.json"))
steps = [r["loss"] for r in map(json.loads, open("metrics.jsonl")) if r["record"] == "step"]
assert len(steps) == 5 and all(abs(a - b) < 1e-6 for a, b in zip(steps, ref["losses"])), (steps, ref["losses"])
ours = load_file("out/model.safetensors")
init = load_file("init.safetensors")
for name, values in ref["weights"].items():
    got = ours[name].flatten().tolist()
    assert max(abs(a - b) for a, b in zip(got, values)) < 1e-6, (name, got, values)
    assert got != init[name].flatten().tolist(), name + " moved"
"#,
    );

    let with = |name: &str, optimizer: &str| {
        let body = manifest.replace(
            "optimizer \"lion\" lr=0.003 weight-decay=0.1 beta2=0.99 {",
            optimizer,
        );
        std::fs::write(ext.join(name), body).unwrap();
        program(dir.path(), &["check", name])
    };
    let momentum = with("momentum.kdl", "optimizer \"lion\" momentum=0.9 {");
    assert!(momentum.status.success());
    assert!(
        stderr(&momentum).contains("`optimizer.momentum` has no effect with `lion`"),
        "{}",
        stderr(&momentum)
    );
    let group = with(
        "group.kdl",
        "optimizer \"lion\" {\n    group \"0.*\" eps=1e-6\n",
    );
    assert_eq!(group.status.code(), Some(1));
    assert!(
        stderr(&group).contains("`lion` has no `eps` for a group to set"),
        "{}",
        stderr(&group)
    );
    let out = program(dir.path(), &["explain", "optimizer"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("`lion`: Lion (Chen et al., 2023)")
            && shown.contains("only for kind: adam, adamw, lion"),
        "{shown}"
    );
}

/// `callbacks "epochs-csv"` turns the registered callback on: its CSV beside
/// `metrics.jsonl` holds a row per epoch with the values of the epoch's record; `check`
/// refuses a name no program registered (with the closest one), and `explain` lists it.
#[test]
fn the_registered_csv_callback_writes_what_the_epochs_record() {
    let dir = project();
    let ext = dir.path().join("ext");
    let text = std::fs::read_to_string(ext.join("digits.kdl")).unwrap();
    let manifest = text
        .replace(
            "split train=0.8 test=0.2",
            "split train=0.7 val=0.1 test=0.2",
        )
        .replace(
            "batch-size 64\n",
            "batch-size 64\n    callbacks \"epochs-csv\"\n    validate { metrics \"f1-macro\"; }\n",
        );
    std::fs::write(ext.join("csv.kdl"), &manifest).unwrap();
    let report = run_one_process(dir.path(), "csv.kdl", 3);
    let run_dir = ext.join(report["run_dir"].as_str().unwrap());
    let epochs: Vec<Value> = std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "epoch")
        .collect();
    let table = std::fs::read_to_string(run_dir.join("train-epochs.csv")).unwrap();
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap(),
        "epoch,loss,accuracy,val_loss,val_accuracy,val_f1-macro,lr,seconds"
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|c| c.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 3, "{table}");
    for (row, record) in rows.iter().zip(&epochs) {
        for (i, key) in [
            "epoch",
            "loss",
            "accuracy",
            "val_loss",
            "val_accuracy",
            "val_f1-macro",
            "lr",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(
                row[i],
                record[key].as_f64().unwrap(),
                "{key}: {table} vs {record}"
            );
        }
    }

    let misspelt = manifest.replace("callbacks \"epochs-csv\"", "callbacks \"epoch-csv\"");
    std::fs::write(ext.join("misspelt.kdl"), misspelt).unwrap();
    let out = program(dir.path(), &["check", "misspelt.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no callback is registered as `epoch-csv`")
            && stderr(&out).contains("did you mean `epochs-csv`?"),
        "{}",
        stderr(&out)
    );
    let twice = manifest.replace(
        "callbacks \"epochs-csv\"",
        "callbacks \"epochs-csv\" \"epochs-csv\"",
    );
    std::fs::write(ext.join("twice.kdl"), twice).unwrap();
    let out = program(dir.path(), &["check", "twice.kdl", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["diagnostics"][0]["code"],
        "pipeline::train::callback_twice"
    );
    let out = program(dir.path(), &["explain", "train.callbacks"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("`epochs-csv`: a CSV of the stage's epochs"),
        "{shown}"
    );
}

/// `epochs-csv`'s rows are its snapshot state: a run killed (SIGKILL) after a snapshot
/// and resumed writes the CSV of a run never stopped — every epoch once, the same values
/// (all but the seconds).
#[test]
fn a_resumed_run_writes_the_csv_of_one_never_stopped() {
    let make = || {
        let dir = project();
        let ext = dir.path().join("ext");
        let text = std::fs::read_to_string(ext.join("digits.kdl"))
            .unwrap()
            .replace(
                "batch-size 64\n",
                "batch-size 64\n    callbacks \"epochs-csv\"\n    snapshot-every-steps 5\n",
            );
        std::fs::write(ext.join("csv.kdl"), text).unwrap();
        dir
    };
    let args = [
        "run",
        "csv.kdl",
        "--json",
        "--set",
        "accelerator.strategy=none",
        "--set",
        "accelerator.precision=32",
        "--set",
        "train.epochs=5",
    ];
    let table = |dir: &Path, out: &Output| -> Vec<String> {
        assert!(out.status.success(), "{}", stderr(out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run_dir = dir.join("ext").join(report["run_dir"].as_str().unwrap());
        let text = std::fs::read_to_string(run_dir.join("train-epochs.csv")).unwrap();
        // Every column but the last, the epoch's seconds.
        text.lines()
            .map(|l| l.rsplit_once(',').unwrap().0.to_string())
            .collect()
    };
    let killed = make();
    let snapshot = killed.path().join("cache/snapshots");
    let mut child = Command::new(env!("CARGO_BIN_EXE_digits-compressed"))
        .args(args)
        .current_dir(killed.path().join("ext"))
        .env("PIPELINE_CACHE_DIR", killed.path().join("cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let step = || -> Option<u64> {
        let stage = std::fs::read_dir(&snapshot).ok()?.flatten().next()?.path();
        let index: Value =
            serde_json::from_slice(&std::fs::read(stage.join("snapshot.json")).ok()?).ok()?;
        index["position"]["step"].as_u64()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while step().is_none_or(|s| s < 50) {
        assert!(std::time::Instant::now() < deadline, "no snapshot appeared");
        assert!(child.try_wait().unwrap().is_none(), "the run ended first");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = program(killed.path(), &args);
    assert!(
        stderr(&out).contains("resuming `train` from its snapshot"),
        "{}",
        stderr(&out)
    );
    let resumed = table(killed.path(), &out);
    let whole = make();
    let uninterrupted = table(whole.path(), &program(whole.path(), &args));
    assert_eq!(resumed.len(), 6, "a header and 5 epochs: {resumed:#?}");
    assert_eq!(resumed, uninterrupted);
}

/// The learning rate of each epoch a run trained (its epoch records), by epoch.
fn epoch_rates(dir: &Path, report: &Value) -> Vec<(u64, f64)> {
    let run_dir = dir.join("ext").join(report["run_dir"].as_str().unwrap());
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == "epoch")
        .map(|r| (r["epoch"].as_u64().unwrap(), r["lr"].as_f64().unwrap()))
        .collect()
}

/// What `schedule "warm-restarts"` runs is the registered schedule: every epoch's
/// learning rate is the one PyTorch's `CosineAnnealingWarmRestarts` gives (cycles of 2
/// then 4 epochs down to `min-lr`), to 1e-12. Having no length of its own, a 7-epoch
/// training continues the cached 3-epoch one (epochs 4 to 7, on the same curve). `check`
/// holds it to its keys and `explain` lists it.
#[test]
fn the_registered_warm_restarts_schedule_is_what_sets_the_rate() {
    let dir = project();
    let ext = dir.path().join("ext");
    py(
        &ext,
        r#"
import json, torch
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([p], lr=3e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=1e-4)
lrs = []
for _ in range(7):
    lrs.append(sched.get_last_lr()[0])
    opt.step()
    sched.step()
json.dump(lrs, open("lrs.json", "w"))
"#,
    );
    let torch: Vec<f64> =
        serde_json::from_str(&std::fs::read_to_string(ext.join("lrs.json")).unwrap()).unwrap();
    let text = std::fs::read_to_string(ext.join("digits.kdl")).unwrap();
    let schedule =
        r#"schedule "warm-restarts" restart-every=2 cycle-mult=2 min-lr=1e-4 interval="epoch""#;
    let manifest = text.replace(r#"schedule "cosine" warmup-epochs=2"#, schedule);
    assert_ne!(manifest, text);
    std::fs::write(ext.join("restarts.kdl"), &manifest).unwrap();

    let short = epoch_rates(dir.path(), &run_one_process(dir.path(), "restarts.kdl", 3));
    let long = epoch_rates(dir.path(), &run_one_process(dir.path(), "restarts.kdl", 7));
    assert_eq!(
        long.iter().map(|r| r.0).collect::<Vec<_>>(),
        [4, 5, 6, 7],
        "the 7-epoch training continues the 3-epoch one"
    );
    let ours: Vec<f64> = short.iter().chain(&long).map(|r| r.1).collect();
    assert_eq!(ours.len(), torch.len());
    for (epoch, (a, b)) in ours.iter().zip(&torch).enumerate() {
        assert!(
            (a - b).abs() <= 1e-12 * b.abs(),
            "epoch {}: {a} here, {b} in PyTorch ({ours:?} vs {torch:?})",
            epoch + 1
        );
    }
    assert!(torch[2] > torch[1], "the case restarts");

    let bad = manifest.replace("cycle-mult=2", "cycle-mult=0.5");
    std::fs::write(ext.join("bad.kdl"), bad).unwrap();
    let out = program(dir.path(), &["check", "bad.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("`schedule.cycle-mult` is out of range: 0.5"),
        "{}",
        stderr(&out)
    );
    let wrong_kind = manifest.replace(r#""warm-restarts""#, r#""cosine""#);
    std::fs::write(ext.join("wrong.kdl"), wrong_kind).unwrap();
    let out = program(dir.path(), &["check", "wrong.kdl"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("`schedule.restart-every` has no effect with `cosine`")
            && stderr(&out).contains("`restart-every` applies to: warm-restarts"),
        "{}",
        stderr(&out)
    );
    let out = program(dir.path(), &["explain", "schedule"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("`warm-restarts`: cosine cycles from the peak down to `min-lr`")
            && shown.contains("schedule.restart-every"),
        "{shown}"
    );
}

/// The test split's metrics of a one-process run of `manifest` (3 epochs).
fn test_metrics(dir: &Path, manifest: &str) -> (Value, Value) {
    let report = run_one_process(dir, manifest, 3);
    (
        report["stages"][0]["metrics"].clone(),
        report["stages"][1]["metrics"].clone(),
    )
}

/// What reads `source "digits.svm"` is the registered svmlight format: the files
/// scikit-learn writes from the digits CSV (one-based with a comment header, and
/// zero-based) train to the very losses and accuracies of the CSV itself; `check` reads a
/// sample's shape from the file through it and reports a file it cannot read at
/// `source`; keys it does not read are refused; `explain` lists it.
#[test]
fn the_registered_svmlight_format_is_what_reads_the_data() {
    let dir = project();
    let ext = dir.path().join("ext");
    py(
        &ext,
        r#"
import numpy as np
from sklearn.datasets import dump_svmlight_file, load_svmlight_file
d = np.loadtxt("../data/digits.csv.gz", delimiter=",")
x, y = d[:, :-1], d[:, -1].astype(int)
dump_svmlight_file(x, y, "digits.svm", zero_based=False, comment="the digits, one-based")
# Zero-based is told by an index 0 (and the width by the largest): the pixels rolled by
# one, so that the first and the last are not always 0; beside the same as a CSV.
r = np.roll(x, 1, axis=1)
dump_svmlight_file(r, y, "rolled.svm", zero_based=True)
np.savetxt("rolled.csv", np.column_stack([r, y]), fmt="%d", delimiter=",")
for name, features in [("digits.svm", x), ("rolled.svm", r)]:
    xs, ys = load_svmlight_file(name)
    assert (xs.toarray() == features).all() and (ys == y).all()
"#,
    );
    assert!(std::fs::read_to_string(ext.join("digits.svm"))
        .unwrap()
        .starts_with('#'));
    let text = std::fs::read_to_string(ext.join("digits.kdl")).unwrap();
    let csv_line = "    source \"../data/digits.csv.gz\"   // 64 pixel columns, then the label\n    label \"last\"\n";
    assert!(text.contains(csv_line));
    let csv = "    source \"rolled.csv\"\n    label \"last\"\n";
    std::fs::write(ext.join("rolled.kdl"), text.replace(csv_line, csv)).unwrap();
    for (file, source, same_as) in [
        ("svm.kdl", "digits.svm", "digits.kdl"),
        ("rolled-svm.kdl", "rolled.svm", "rolled.kdl"),
    ] {
        // `reshape 1 8 8` holds `check` to 64 features a sample.
        std::fs::write(
            ext.join(file),
            text.replace(csv_line, &format!("    source \"{source}\"\n")),
        )
        .unwrap();
        let out = program(dir.path(), &["check", file]);
        assert!(out.status.success(), "{}", stderr(&out));
        let expected = test_metrics(dir.path(), same_as);
        assert_eq!(test_metrics(dir.path(), file), expected, "{source}");
    }

    // A file it cannot read is reported by `check`, at `source`.
    std::fs::write(ext.join("bad.svm"), "0 1:2 3:4\n1 3:1 2:5\n").unwrap();
    let svm = std::fs::read_to_string(ext.join("svm.kdl")).unwrap();
    std::fs::write(ext.join("bad.kdl"), svm.replace("digits.svm", "bad.svm")).unwrap();
    let out = program(dir.path(), &["check", "bad.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    let shown = stderr(&out);
    assert!(
        shown.contains("pipeline::data::unreadable")
            && shown.contains("bad.svm: parse error at line 2: feature indices must be ascending")
            && shown.contains("read as svmlight"),
        "{shown}"
    );
    // Keys for columns are not its.
    std::fs::write(
        ext.join("label.kdl"),
        svm.replace(
            "source \"digits.svm\"",
            "source \"digits.svm\"\n    label \"first\"",
        ),
    )
    .unwrap();
    let out = program(dir.path(), &["check", "label.kdl"]);
    assert!(
        stderr(&out).contains("`data.label` does not apply to SVMlight data"),
        "{}",
        stderr(&out)
    );
    let out = program(dir.path(), &["explain", "data.format"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("\"image-list\", \"svmlight\"") && shown.contains("`svmlight`: LIBSVM"),
        "{shown}"
    );
}
