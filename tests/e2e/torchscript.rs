//! End-to-end tests of `model { torchscript "net.pt" }` with the real binary and modules
//! scripted by the project's torch venv: the example against its native twin, the
//! checkpoint loaded back into the module by its state-dict names, the cache, the
//! accelerator's settings (precisions, accumulation, clipping, ddp and zero1), bitwise
//! resume, and every way a file or a module can be wrong.

use crate::common::{
    assert_fixture, digits_project, kill_after_snapshot, pipeline, py, root, tensors, text,
};
use serde_json::Value;
use std::path::Path;

/// Scripts `module` (a Python expression, with `torch` and `nn` imported and the seed
/// set) and saves it to `dir/name`.
fn script(dir: &Path, name: &str, module: &str) {
    py(
        dir,
        &format!(
            "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n\
             torch.jit.script({module}).save({name:?})\n"
        ),
    );
}

/// An MLP without dropout or batch-norm, so that runs split across processes compute
/// the same as one.
const MLP: &str = "nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))";

/// A digits project whose `ts.kdl` trains the scripted module `data/net.pt`.
fn project(module: &str, train: &str) -> tempfile::TempDir {
    let dir = digits_project();
    script(dir.path(), "data/net.pt", module);
    std::fs::write(
        dir.path().join("ts.kdl"),
        format!(
            r#"pipeline "ts"
seed 3
data {{
    source "data/digits.csv.gz"
    scale "minmax"
    split train=0.8 test=0.2
}}
model {{
    torchscript "data/net.pt"
}}
loss "cross-entropy"
optimizer "adamw" lr=0.003
{train}
eval "test" needs="train" split="test"
checkpoint "export" needs="train" path="out/model.safetensors"
"#
        ),
    )
    .unwrap();
    dir
}

/// `pipeline run MANIFEST --json ARGS`, which must succeed: its report and stderr.
fn run(dir: &Path, manifest: &str, args: &[&str]) -> (Value, String) {
    let mut all = vec!["run", manifest, "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        text(&out.stderr),
    )
}

fn accuracy(report: &Value, stage: usize) -> f64 {
    report["stages"][stage]["metrics"]["accuracy"]
        .as_f64()
        .unwrap()
}

#[test]
fn the_example_matches_its_native_twin_and_its_checkpoint_loads_into_the_module() {
    let dir = digits_project();
    std::fs::copy(
        root().join("examples/data/digits-cnn.pt"),
        dir.path().join("data/digits-cnn.pt"),
    )
    .expect("examples/data/digits-cnn.pt: run scripts/setup.sh");
    std::fs::copy(
        root().join("examples/torchscript.kdl"),
        dir.path().join("torchscript.kdl"),
    )
    .unwrap();
    let (scripted, _) = run(dir.path(), "torchscript.kdl", &[]);
    let (native, _) = run(dir.path(), "digits.kdl", &[]);
    let (a, b) = (accuracy(&scripted, 1), accuracy(&native, 1));
    assert!(a >= 0.95, "the scripted model reaches {a}");
    assert!(
        (a - b).abs() <= 0.01,
        "the scripted model reaches {a}, its native twin {b}"
    );

    // The checkpoint holds the module's own state dict (buffers included, batch-norm's
    // step count among them), and PyTorch loads it strictly.
    let exported = scripted["stages"][2]["outputs"][0].as_str().unwrap();
    let steps = scripted["stages"][0]["metrics"]["steps"].as_f64().unwrap() as u64;
    let report = py(
        dir.path(),
        &format!(
            "import torch\nfrom safetensors.torch import load_file\n\
             m = torch.jit.load('data/digits-cnn.pt')\nsd = load_file({exported:?})\n\
             assert sorted(sd) == sorted(m.state_dict()), (sorted(sd), sorted(m.state_dict()))\n\
             m.load_state_dict(sd, strict=True)\n\
             print(int(sd['norm.num_batches_tracked']))\n\
             print(float((sd['conv.weight'] - torch.jit.load('data/digits-cnn.pt').conv.weight).abs().max()))\n"
        ),
    );
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines[0], steps.to_string(), "batch-norm counted every step");
    assert!(
        lines[1].parse::<f64>().unwrap() > 0.01,
        "the exported weights were trained"
    );

    // The module's content is in the key: the same file is cached, another is trained.
    let (again, _) = run(dir.path(), "torchscript.kdl", &[]);
    assert_eq!(again["stages"][0]["status"], "cached");
    std::fs::copy(
        dir.path().join("data/digits-cnn.pt"),
        dir.path().join("data/copy.pt"),
    )
    .unwrap();
    let moved = std::fs::read_to_string(dir.path().join("torchscript.kdl"))
        .unwrap()
        .replace("data/digits-cnn.pt", "data/copy.pt");
    std::fs::write(dir.path().join("torchscript.kdl"), &moved).unwrap();
    let (copied, _) = run(dir.path(), "torchscript.kdl", &[]);
    assert_eq!(
        copied["stages"][0]["status"], "cached",
        "a copy under another name is the same model"
    );
    py(
        dir.path(),
        "import torch\nm = torch.jit.load('data/copy.pt')\n\
         torch.nn.init.zeros_(m.out.bias)\nm.out.bias.data += 0.5\nm.save('data/copy.pt')\n",
    );
    let (changed, _) = run(dir.path(), "torchscript.kdl", &[]);
    assert_eq!(changed["stages"][0]["status"], "ran");
}

#[test]
fn precisions_accumulation_clipping_ddp_and_zero1_train_a_scripted_module() {
    let dir = project(MLP, "train epochs=3 batch-size=16");
    let (mixed, _) = run(
        dir.path(),
        "ts.kdl",
        &[
            "--no-cache",
            "--set",
            "accelerator.precision=bf16-mixed",
            "--set",
            "accelerator.accumulate=2",
            "--set",
            "accelerator.max-norm=0.5",
        ],
    );
    assert!(accuracy(&mixed, 1) > 0.85, "{mixed}");
    let (true_bf16, _) = run(
        dir.path(),
        "ts.kdl",
        &["--no-cache", "--set", "accelerator.precision=bf16-true"],
    );
    assert!(accuracy(&true_bf16, 1) > 0.8, "{true_bf16}");

    // Two processes with batch 16 train as one with batch 32, under ddp and zero1.
    let (single, _) = run(
        dir.path(),
        "ts.kdl",
        &["--no-cache", "--set", "train.batch-size=32"],
    );
    let single_weights = tensors(&dir.path().join("out/model.safetensors"));
    assert_eq!(
        single_weights
            .iter()
            .map(|t| t.0.as_str())
            .collect::<Vec<_>>(),
        ["0.bias", "0.weight", "2.bias", "2.weight"]
    );
    for strategy in ["ddp", "zero1"] {
        let (split, _) = run(
            dir.path(),
            "ts.kdl",
            &[
                "--no-cache",
                "--nproc-per-node",
                "2",
                "--set",
                &format!("accelerator.strategy={strategy}"),
            ],
        );
        assert_eq!(
            split["stages"][0]["metrics"]["steps"],
            single["stages"][0]["metrics"]["steps"]
        );
        let weights = tensors(&dir.path().join("out/model.safetensors"));
        for ((name, a), (_, b)) in weights.iter().zip(&single_weights) {
            let worst = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{strategy} {name}: differs by {worst}");
        }
    }
}

#[test]
fn a_killed_run_of_a_scripted_module_resumes_to_the_same_weights_bit_for_bit() {
    // Dropout draws from the generator and batch-norm keeps statistics: both must be
    // in the snapshot for the resumed run to match.
    let module = "nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), \
                  nn.Dropout(0.3), nn.Linear(64, 10))";
    let train = "train epochs=6 batch-size=16 snapshot-every-steps=20";
    let killed = project(module, train);
    let at = kill_after_snapshot(killed.path(), "ts.kdl", 60);
    let (_, log) = run(killed.path(), "ts.kdl", &[]);
    assert!(log.contains("resuming `train` from its snapshot"), "{log}");
    let whole = project(module, train);
    run(whole.path(), "ts.kdl", &[]);
    let weights = |d: &Path| std::fs::read(d.join("out/model.safetensors")).unwrap();
    assert!(
        weights(killed.path()) == weights(whole.path()),
        "resumed at step {at}: the weights must be identical"
    );
}

/// `pipeline check ts.kdl`'s stderr, which must fail.
fn check_fails(dir: &Path) -> String {
    let out = pipeline(dir, &["check", "ts.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stderr)
}

#[test]
fn check_refuses_what_is_not_a_torchscript_archive() {
    let dir = project(MLP, "train epochs=1 batch-size=16");
    assert!(pipeline(dir.path(), &["check", "ts.kdl"]).status.success());
    // torch.save of a module: a zip of pickles, with no TorchScript code.
    py(
        dir.path(),
        &format!("import torch\nfrom torch import nn\ntorch.save({MLP}, 'data/net.pt')\n"),
    );
    assert_fixture(
        "torchscript-torch-save.check.stderr",
        &check_fails(dir.path()),
    );
    // The same in the legacy format: a bare pickle.
    py(
        dir.path(),
        &format!(
            "import torch\nfrom torch import nn\n\
             torch.save({MLP}.state_dict(), 'data/net.pt', _use_new_zipfile_serialization=False)\n"
        ),
    );
    let err = check_fails(dir.path());
    assert!(
        err.contains("the model data/net.pt is a pickle (`torch.save` in its legacy format), not TorchScript"),
        "{err}"
    );
    // A cut archive.
    script(dir.path(), "data/net.pt", MLP);
    let bytes = std::fs::read(dir.path().join("data/net.pt")).unwrap();
    std::fs::write(dir.path().join("data/net.pt"), &bytes[..bytes.len() - 100]).unwrap();
    let err = check_fails(dir.path());
    assert!(err.contains("is a damaged zip archive"), "{err}");
    // No file at all.
    std::fs::remove_file(dir.path().join("data/net.pt")).unwrap();
    let err = check_fails(dir.path());
    assert!(
        err.contains("the TorchScript model ") && err.contains("data/net.pt does not exist"),
        "{err}"
    );
    // `run` refuses the same before training.
    let out = pipeline(dir.path(), &["run", "ts.kdl"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_torchscript_model_stands_alone() {
    let dir = project(MLP, "train epochs=1 batch-size=16");
    let manifest = std::fs::read_to_string(dir.path().join("ts.kdl"))
        .unwrap()
        .replace(
            "    torchscript \"data/net.pt\"\n",
            "    torchscript \"data/net.pt\"\n    linear 10\n    residual { torchscript \"data/net.pt\"; }\n",
        )
        .replace(
            "optimizer \"adamw\" lr=0.003\n",
            "optimizer \"adamw\" lr=0.003\naccelerator strategy=\"ddp\" sync-batch-norm=#true\n",
        );
    std::fs::write(dir.path().join("ts.kdl"), &manifest).unwrap();
    assert_fixture("torchscript-alone.check.stderr", &check_fails(dir.path()));
    // Nor is it a part of a native model.
    let nested = manifest.replace(
        "    torchscript \"data/net.pt\"\n    linear 10\n",
        "    linear 10\n",
    );
    std::fs::write(dir.path().join("ts.kdl"), nested).unwrap();
    let err = check_fails(dir.path());
    assert!(
        err.contains("a `torchscript` module is a whole model, not a part of one"),
        "{err}"
    );
}

#[test]
fn modules_that_do_not_fit_the_data_are_located_diagnostics_without_a_traceback() {
    // A forward that fails inside the interpreter: the first layer expects 32 features.
    let dir = project(
        "nn.Sequential(nn.Linear(32, 10))",
        "train epochs=1 batch-size=16",
    );
    let out = pipeline(dir.path(), &["run", "ts.kdl"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        !err.contains("Traceback") && !err.contains("Exception raised"),
        "{err}"
    );
    assert_fixture("torchscript-forward.run.stderr", &err);

    // A forward that returns a tuple.
    py(
        dir.path(),
        r#"
import torch
from torch import nn
from typing import Tuple

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.l(x), x

torch.jit.script(Two()).save('data/net.pt')
"#,
    );
    let out = pipeline(dir.path(), &["run", "ts.kdl"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "the model fails on the data: the module's forward returns Tuple, not one tensor"
        ),
        "{err}"
    );

    // Too few outputs for the labels.
    script(dir.path(), "data/net.pt", "nn.Linear(64, 5)");
    let out = pipeline(dir.path(), &["run", "ts.kdl"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("is out of range for the model's 5 outputs"),
        "{err}"
    );
}

#[test]
fn parameters_frozen_in_python_or_by_freeze_stay_as_they_started() {
    let dir = project(MLP, "train epochs=1 batch-size=16 { freeze \"2.bias\"; }");
    py(
        dir.path(),
        &format!(
            "import torch\nfrom torch import nn\ntorch.manual_seed(0)\nm = {MLP}\n\
             m[0].weight.requires_grad_(False)\ntorch.jit.script(m).save('data/net.pt')\n"
        ),
    );
    run(dir.path(), "ts.kdl", &[]);
    let moved = py(
        dir.path(),
        "import torch\nfrom safetensors.torch import load_file\n\
         start = torch.jit.load('data/net.pt').state_dict()\n\
         end = load_file('out/model.safetensors')\n\
         for k in sorted(start):\n    print(k, float((start[k] - end[k]).abs().max()) > 0)\n",
    );
    assert_eq!(
        moved,
        "0.bias True\n0.weight False\n2.bias False\n2.weight True\n"
    );
}

#[test]
fn a_tied_weight_is_trained_once_and_stays_tied() {
    // `b` shares `a`'s weight (as a language model's embedding and output layer do):
    // libtorch lists it under both names, and it must be one parameter to the optimizer.
    let dir = project(MLP, "train epochs=2 batch-size=16");
    py(
        dir.path(),
        r#"
import torch
from torch import nn

class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)
        self.b.weight = self.a.weight
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        return self.out(torch.tanh(self.b(torch.tanh(self.a(x)))))

torch.manual_seed(0)
torch.jit.script(Tied()).save("data/net.pt")
"#,
    );
    let out = pipeline(dir.path(), &["run", "ts.kdl"]);
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    let unique = 64 * 64 + 64 + 64 + 64 * 10 + 10;
    assert!(
        log.contains(&format!("({unique} trainable)")),
        "the shared weight counts once: {log}"
    );
    let weights = tensors(&dir.path().join("out/model.safetensors"));
    let get = |name: &str| &weights.iter().find(|w| w.0 == name).unwrap().1;
    assert!(
        get("a.weight") == get("b.weight"),
        "still tied after training"
    );
}
