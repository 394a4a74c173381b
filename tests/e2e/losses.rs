//! The losses beyond the plain ones, against PyTorch's own on the same weights and data
//! (in the project's torch venv): cross-entropy with `class-weights "balanced"` (the
//! weights scikit-learn's `compute_class_weight` gives) and with given weights, `l1`,
//! `huber`, and multi-label binary cross-entropy with `pos-weight`. Each trains a little,
//! exports its weights, and the `eval` stage's loss on the test split must be what
//! `torch.nn.functional` computes from the exported weights on the same rows. Bad weights
//! are located errors.

use crate::common;

use crate::common::{assert_fixture, pipeline, py, text};
use serde_json::Value;
use std::path::Path;

fn manifest(source: &str, label: &str, outputs: usize, loss: &str) -> String {
    format!(
        r#"pipeline "losses"
seed 7
data {{
    source "{source}"
    label {label}
    scale "none"
    split train=0.8 test=0.2
}}
model {{
    linear {outputs}
}}
{loss}
optimizer "adam" lr=1e-2
train {{
    epochs 3
    batch-size 64
}}
eval "test" needs="train"
checkpoint "export" needs="train" path="out/model.safetensors"
"#
    )
}

/// Runs `text_`; the eval stage's loss and the run directory.
fn eval_loss(dir: &Path, text_: &str) -> (f64, String) {
    std::fs::write(dir.join("l.kdl"), text_).unwrap();
    let out = pipeline(dir, &["run", "l.kdl", "--json", "--no-cache"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        report["stages"][1]["metrics"]["loss"].as_f64().unwrap(),
        report["run_dir"].as_str().unwrap().to_string(),
    )
}

/// PyTorch's loss `expression` (of `out`, the exported linear layer on the test rows, and
/// `y`, their labels) on the data `load` reads into `X` and `Y`, as the run split it.
fn torch_loss(dir: &Path, run_dir: &str, load: &str, expression: &str) -> f64 {
    let code = format!(
        "import json, numpy as np, torch, torch.nn.functional as F\n\
         from safetensors.torch import load_file\n\
         from sklearn.utils.class_weight import compute_class_weight\n\
         {load}\n\
         split = json.load(open('{run_dir}/split.json'))\n\
         w = load_file('out/model.safetensors')\n\
         def rows(name): return np.array(split[name])\n\
         train, test = rows('train'), rows('test')\n\
         x = torch.tensor(X[test], dtype=torch.float32)\n\
         out = x @ w['0.weight'].T + w['0.bias']\n\
         y = torch.tensor(Y[test])\n\
         print(float({expression}))\n"
    );
    py(dir, &code).trim().parse().unwrap()
}

const DIGITS: &str = "d = np.loadtxt('data/digits.csv.gz', delimiter=',')\n\
                      X, Y = d[:, :-1], d[:, -1].astype(np.int64)";

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * b.abs().max(1e-3)
}

#[test]
fn class_weighted_cross_entropy_is_pytorchs() {
    let dir = common::digits_project();
    let d = dir.path();
    let balanced = manifest(
        "data/digits.csv.gz",
        "\"last\"",
        10,
        "loss \"cross-entropy\" class-weights=\"balanced\"",
    );
    let (ours, run_dir) = eval_loss(d, &balanced);
    let theirs = torch_loss(
        d,
        &run_dir,
        DIGITS,
        "F.cross_entropy(out, y, weight=torch.tensor(compute_class_weight('balanced', classes=np.arange(10), y=Y[train]), dtype=torch.float32))",
    );
    assert!(close(ours, theirs), "{ours} here, {theirs} in PyTorch");
    let weights = "1 2 3 4 5 6 7 8 9 10";
    let given = manifest(
        "data/digits.csv.gz",
        "\"last\"",
        10,
        &format!("loss {{\n    kind \"cross-entropy\"\n    class-weights {weights}\n}}"),
    );
    let (ours, run_dir) = eval_loss(d, &given);
    let theirs = torch_loss(
        d,
        &run_dir,
        DIGITS,
        "F.cross_entropy(out, y, weight=torch.arange(1, 11, dtype=torch.float32))",
    );
    assert!(close(ours, theirs), "{ours} here, {theirs} in PyTorch");
    // Weights of the wrong count: the run names them in the manifest.
    let wrong = given.replace(weights, "1 2 3");
    std::fs::write(d.join("wrong.kdl"), wrong).unwrap();
    let out = pipeline(d, &["run", "wrong.kdl", "--no-cache"]);
    assert!(!out.status.success());
    assert_fixture("losses-class-weights-count.run.stderr", &text(&out.stderr));
}

#[test]
fn l1_and_huber_are_pytorchs() {
    let dir = common::digits_project();
    let d = dir.path();
    let load = "d = np.loadtxt('data/digits.csv.gz', delimiter=',')\n\
                X, Y = d[:, :-1], d[:, -1:].astype(np.float32)";
    for (loss, expression) in [
        ("loss \"l1\"", "F.l1_loss(out, y)"),
        (
            "loss \"huber\" delta=0.5",
            "F.huber_loss(out, y, delta=0.5)",
        ),
    ] {
        let text_ = manifest("data/digits.csv.gz", "\"last\"", 1, loss);
        let (ours, run_dir) = eval_loss(d, &text_);
        let theirs = torch_loss(d, &run_dir, load, expression);
        assert!(
            close(ours, theirs),
            "{loss}: {ours} here, {theirs} in PyTorch"
        );
    }
}

#[test]
fn multi_label_binary_cross_entropy_with_pos_weight_is_pytorchs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Three binary labels of five features, positives rarer for some.
    py(
        d,
        "import numpy as np\n\
         r = np.random.default_rng(3)\n\
         X = r.standard_normal((400, 5))\n\
         Y = (X[:, :3] + r.standard_normal((400, 3)) > [0.0, 1.0, 1.5]).astype(np.float64)\n\
         with open('multi.csv', 'w') as f:\n    \
             f.write('a,b,c,d,e,y1,y2,y3\\n')\n    \
             for x, y in zip(X, Y): f.write(','.join(map(str, list(x) + list(y))) + '\\n')\n",
    );
    let text_ = manifest(
        "multi.csv",
        "\"y1\" \"y2\" \"y3\"",
        3,
        "loss {\n    kind \"bce-with-logits\"\n    pos-weight 1.0 3.0 6.0\n}",
    )
    .replace("    scale", "    header #true\n    scale");
    let (ours, run_dir) = eval_loss(d, &text_);
    let load = "d = np.loadtxt('multi.csv', delimiter=',', skiprows=1)\n\
                X, Y = d[:, :5], d[:, 5:].astype(np.float32)";
    let theirs = torch_loss(
        d,
        &run_dir,
        load,
        "F.binary_cross_entropy_with_logits(out, y, pos_weight=torch.tensor([1.0, 3.0, 6.0]))",
    );
    assert!(close(ours, theirs), "{ours} here, {theirs} in PyTorch");
    let wrong = text_.replace("pos-weight 1.0 3.0 6.0", "pos-weight 1.0 3.0");
    std::fs::write(d.join("wrong.kdl"), wrong).unwrap();
    let out = pipeline(d, &["run", "wrong.kdl", "--no-cache"]);
    assert!(!out.status.success());
    assert_fixture("losses-pos-weight-count.run.stderr", &text(&out.stderr));
}

/// A loss written in Python and scripted (`loss { torchscript "…" }`): libtorch runs it.
/// The script's cross-entropy trains the small digits MLP to the same test loss and the
/// same weights, bit for bit, as `loss "cross-entropy"`; a focal loss scripted the same
/// way trains to another; the file's content is in the key.
#[test]
fn a_scripted_loss_trains_as_the_built_in_it_computes() {
    let dir = common::small_project(common::SMALL);
    py(
        dir.path(),
        r#"
import torch
import torch.nn.functional as F

class CrossEntropy(torch.nn.Module):
    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target)

class Focal(torch.nn.Module):
    def __init__(self, gamma: float):
        super().__init__()
        self.gamma = gamma

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(output, dim=-1).gather(1, target.unsqueeze(1)).squeeze(1)
        return (-(1 - log_p.exp()) ** self.gamma * log_p).mean()

torch.jit.script(CrossEntropy()).save("ce.pt")
torch.jit.script(Focal(2.0)).save("focal.pt")
"#,
    );
    let scripted = common::SMALL.replace(
        "loss \"cross-entropy\"",
        "loss {\n    torchscript \"ce.pt\"\n}",
    );
    std::fs::write(dir.path().join("scripted.kdl"), &scripted).unwrap();
    let run = |file: &str| -> (Value, Vec<(String, Vec<f32>)>) {
        let out = pipeline(dir.path(), &["run", file, "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let weights = common::tensors(&dir.path().join("out/model.safetensors"));
        (report, weights)
    };
    let (builtin, builtin_weights) = run("small.kdl");
    let (script, script_weights) = run("scripted.kdl");
    let test_loss = |r: &Value| r["stages"][1]["metrics"]["loss"].as_f64().unwrap();
    assert_eq!(test_loss(&script), test_loss(&builtin));
    assert_eq!(
        script["stages"][1]["metrics"]["accuracy"],
        builtin["stages"][1]["metrics"]["accuracy"]
    );
    assert!(
        script_weights == builtin_weights,
        "the scripted cross-entropy trained other weights"
    );
    assert_eq!(script["stages"][0]["status"], "ran");

    // The module's content is the key: the same file answers from the cache, another
    // module under the same name trains again, to another loss.
    let (again, _) = run("scripted.kdl");
    assert_eq!(again["stages"][0]["status"], "cached");
    std::fs::copy(dir.path().join("focal.pt"), dir.path().join("ce.pt")).unwrap();
    let (focal, _) = run("scripted.kdl");
    assert_eq!(focal["stages"][0]["status"], "ran");
    assert!(
        test_loss(&focal) < 0.8 * test_loss(&builtin),
        "focal {} against cross-entropy {}",
        test_loss(&focal),
        test_loss(&builtin)
    );
}

/// What a scripted loss cannot be is said before training, on the `torchscript` line:
/// a missing file, a file that is not TorchScript, a `forward` of other arguments, a
/// result that is not one number; and a loss that is named twice.
#[test]
fn a_scripted_loss_that_cannot_be_one_is_refused_on_its_line() {
    let dir = common::small_project(common::SMALL);
    py(
        dir.path(),
        r#"
import torch

class One(torch.nn.Module):
    def forward(self, output: torch.Tensor) -> torch.Tensor:
        return output.mean()

class PerSample(torch.nn.Module):
    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(output, target, reduction="none")

torch.jit.script(One()).save("one.pt")
torch.jit.script(PerSample()).save("per-sample.pt")
torch.save(torch.nn.Linear(2, 2).state_dict(), "weights.pt")
"#,
    );
    let with = |name: &str, loss: &str| {
        let text = common::SMALL.replace("loss \"cross-entropy\"", loss);
        std::fs::write(dir.path().join(name), text).unwrap();
        name.to_string()
    };
    let codes = |args: &[&str]| -> Vec<String> {
        let out = pipeline(dir.path(), args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let all = text(&out.stderr);
        all.lines()
            .filter(|l| l.starts_with("pipeline::") || l.contains("× "))
            .map(str::trim)
            .map(String::from)
            .collect()
    };
    let missing = with("missing.kdl", "loss { torchscript \"nowhere.pt\"; }");
    let said = codes(&["check", &missing]);
    assert!(
        said.iter()
            .any(|l| l.contains("pipeline::loss::missing_torchscript")),
        "{said:?}"
    );
    let pickled = with("pickled.kdl", "loss { torchscript \"weights.pt\"; }");
    let said = codes(&["check", &pickled]);
    assert!(
        said.iter()
            .any(|l| l.contains("pipeline::loss::not_torchscript")),
        "{said:?}"
    );
    let both = with("both.kdl", "loss \"mse\" { torchscript \"one.pt\"; }");
    let said = codes(&["check", &both]);
    assert!(
        said.iter()
            .any(|l| l.contains("pipeline::loss::kind_and_torchscript")),
        "{said:?}"
    );
    let one = with("one.kdl", "loss { torchscript \"one.pt\"; }");
    let said = codes(&["run", &one]);
    assert!(
        said.iter()
            .any(|l| l.contains("pipeline::loss::torchscript_arguments")),
        "{said:?}"
    );
    let per_sample = with("per-sample.kdl", "loss { torchscript \"per-sample.pt\"; }");
    let out = pipeline(dir.path(), &["run", &per_sample]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("pipeline::loss::mismatch")
            && text(&out.stderr).contains("not one number"),
        "{}",
        text(&out.stderr)
    );
}
