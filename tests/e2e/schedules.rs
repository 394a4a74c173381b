//! Every learning-rate schedule against PyTorch's own scheduler (in the project's torch
//! venv), stepped after every optimizer step or every epoch as the manifest declares: the
//! learning rate of every optimizer step of a 6-epoch training of 7 steps an epoch, to a
//! relative 1e-9 (PyTorch computes most of them recursively). `reduce-on-plateau` is fed
//! the same validation values as `ReduceLROnPlateau`.

use crate::common;

use crate::common::py;
use manifests::{Interval, Mode, Monitor, PlateauSpec, ScheduleSpec, Spanned};
use pipeline_core::schedule::{LrSchedule, Plateau};
use serde_json::Value;

const PEAK: f64 = 0.1;
const STEPS_PER_EPOCH: u64 = 7;
const EPOCHS: u64 = 6;

/// Each case: PyTorch's scheduler, whether it steps per epoch, and its learning rates.
const TORCH: &str = r#"
import json, math, warnings, torch
from torch.optim import lr_scheduler as s
warnings.filterwarnings("ignore")
PEAK, SPE, EPOCHS = 0.1, 7, 6
def lrs(make, per_epoch):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=PEAK)
    sched = make(opt)
    out = []
    for _ in range(EPOCHS if per_epoch else EPOCHS * SPE):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out
T = EPOCHS * SPE
cases = {
    "step-epoch": lrs(lambda o: s.StepLR(o, step_size=2, gamma=0.5), True),
    "step-step": lrs(lambda o: s.StepLR(o, step_size=10, gamma=0.5), False),
    "cosine-step": lrs(lambda o: s.CosineAnnealingLR(o, T_max=T, eta_min=0.001), False),
    "cosine-epoch": lrs(lambda o: s.CosineAnnealingLR(o, T_max=EPOCHS, eta_min=0.001), True),
    "cosine-length-step": lrs(lambda o: s.CosineAnnealingLR(o, T_max=2 * SPE, eta_min=0.001), False),
    "cosine-length-epoch": lrs(lambda o: s.CosineAnnealingLR(o, T_max=4, eta_min=0.0), True),
    "warmup-cosine-step": lrs(lambda o: s.SequentialLR(o, [
        s.LinearLR(o, start_factor=1 / 14, end_factor=1.0, total_iters=13),
        s.CosineAnnealingLR(o, T_max=T - 14, eta_min=0.0)], milestones=[14]), False),
    "one-cycle-step": lrs(lambda o: s.OneCycleLR(o, max_lr=PEAK, total_steps=T, pct_start=0.3,
        div_factor=25.0, final_div_factor=1e4, cycle_momentum=False), False),
    "one-cycle-epoch": lrs(lambda o: s.OneCycleLR(o, max_lr=PEAK, total_steps=EPOCHS, pct_start=0.4,
        div_factor=10.0, final_div_factor=100.0, cycle_momentum=False), True),
    "linear-step": lrs(lambda o: s.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=T), False),
    "exponential-step": lrs(lambda o: s.ExponentialLR(o, gamma=0.95), False),
    "exponential-epoch": lrs(lambda o: s.ExponentialLR(o, gamma=0.7), True),
    "polynomial-step": lrs(lambda o: s.PolynomialLR(o, total_iters=T, power=2.0), False),
    "polynomial-epoch": lrs(lambda o: s.PolynomialLR(o, total_iters=EPOCHS, power=0.5), True),
}
VALUES = [1.0, 0.9, 0.95, 0.9, 0.899, 0.91, 0.92, 0.85, 0.86, 0.87, 0.88, 0.89, 0.9,
          0.91, float("nan"), 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
plateaus = {}
for mode, values in [("min", VALUES), ("max", [-v for v in VALUES])]:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=PEAK)
    sched = s.ReduceLROnPlateau(opt, mode=mode, factor=0.5, patience=2, threshold=0.01,
                                cooldown=1, min_lr=0.02)
    out = []
    for v in values:
        sched.step(v)
        out.append(opt.param_groups[0]["lr"])
    plateaus[mode] = {"values": values, "lrs": out}
print(json.dumps({"cases": cases, "plateaus": plateaus}).replace("NaN", "null"))
"#;

/// The schedule a manifest declares with `schedule …` (the whole node).
fn declared(node: &str) -> ScheduleSpec {
    let text = format!(
        "data {{ source \"d.csv\"; label \"y\" }}\nmodel {{ linear 2 }}\nloss \"cross-entropy\"\noptimizer \"sgd\"\n{node}\ntrain\n"
    );
    let lowered = manifests::lower(&text, "schedules", std::path::Path::new("."), &[]);
    match lowered.manifest {
        Some(m) if !manifests::has_errors(&lowered.diagnostics) => m.schedule,
        _ => panic!("{node}: {:?}", lowered.diagnostics),
    }
}

/// The schedule of each case, as a manifest declares it.
fn cases() -> Vec<(&'static str, ScheduleSpec)> {
    [
        // `step` counts epochs unless told otherwise.
        ("step-epoch", r#"schedule "step" step-size=2 gamma=0.5"#),
        ("step-step", r#"schedule "step" step-size=10 gamma=0.5 interval="step""#),
        ("cosine-step", r#"schedule "cosine" min-lr=0.001"#),
        ("cosine-epoch", r#"schedule "cosine" min-lr=0.001 interval="epoch""#),
        // Of a declared length shorter than the training: past it, the curve rises again.
        ("cosine-length-step", r#"schedule "cosine" min-lr=0.001 length-epochs=2"#),
        ("cosine-length-epoch", r#"schedule "cosine" length-epochs=4 interval="epoch""#),
        ("warmup-cosine-step", r#"schedule "cosine" warmup-epochs=2"#),
        ("one-cycle-step", r#"schedule "one-cycle""#),
        (
            "one-cycle-epoch",
            r#"schedule "one-cycle" pct-start=0.4 div-factor=10.0 final-div-factor=100.0 interval="epoch""#,
        ),
        ("linear-step", r#"schedule "linear" end-factor=0.05"#),
        ("exponential-step", r#"schedule "exponential" gamma=0.95"#),
        ("exponential-epoch", r#"schedule "exponential" gamma=0.7 interval="epoch""#),
        ("polynomial-step", r#"schedule "polynomial" power=2.0"#),
        ("polynomial-epoch", r#"schedule "polynomial" power=0.5 interval="epoch""#),
    ]
    .into_iter()
    .map(|(name, node)| (name, declared(node)))
    .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

#[test]
fn every_schedule_is_pytorchs() {
    let dir = tempfile::tempdir().unwrap();
    let torch: Value = serde_json::from_str(&py(dir.path(), TORCH)).unwrap();
    let cases = cases();
    assert_eq!(cases.len(), torch["cases"].as_object().unwrap().len());
    for (name, spec) in cases {
        let expected: Vec<f64> = serde_json::from_value(torch["cases"][name].clone()).unwrap();
        let schedule = LrSchedule::new(&spec, PEAK, STEPS_PER_EPOCH, EPOCHS);
        let per_epoch = spec.interval() == Interval::Epoch;
        for step in 0..STEPS_PER_EPOCH * EPOCHS {
            let at = match per_epoch {
                true => step / STEPS_PER_EPOCH,
                false => step,
            };
            let (ours, theirs) = (schedule.lr_at(step), expected[at as usize]);
            assert!(
                close(ours, theirs),
                "{name}, step {step}: {ours} here, {theirs} in PyTorch"
            );
        }
    }
}

#[test]
fn reduce_on_plateau_is_pytorchs() {
    let dir = tempfile::tempdir().unwrap();
    let torch: Value = serde_json::from_str(&py(dir.path(), TORCH)).unwrap();
    for (mode, m) in [("min", Mode::Min), ("max", Mode::Max)] {
        let case = &torch["plateaus"][mode];
        let values: Vec<f64> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap_or(f64::NAN))
            .collect();
        let expected: Vec<f64> = serde_json::from_value(case["lrs"].clone()).unwrap();
        let spec = PlateauSpec {
            monitor: Spanned {
                value: Monitor::parse("val.loss"),
                span: None,
            },
            mode: Some(m),
            factor: 0.5,
            patience: 2,
            threshold: 0.01,
            cooldown: 1,
            min_lr: 0.02,
        };
        let mut plateau = Plateau::new(PEAK);
        for (i, (v, lr)) in values.iter().zip(&expected).enumerate() {
            // Through a snapshot and back at every validation: the state is whole.
            let state = serde_json::to_value(&plateau).unwrap();
            plateau = serde_json::from_value(state).unwrap();
            let ours = plateau.step(&spec, m, *v);
            assert!(
                close(ours, *lr),
                "{mode}, value {i} ({v}): {ours} here, {lr} in PyTorch"
            );
        }
        assert!(expected.last() < expected.first(), "the case reduces");
    }
}

/// `reduce-on-plateau` in a real run: the learning rate of every epoch in `metrics.jsonl`
/// is the one `ReduceLROnPlateau` gives after the validation losses before it. Its
/// located errors: no monitor, a monitor the run does not compute.
#[test]
fn a_run_reduces_its_learning_rate_as_pytorch_would() {
    let dir = common::digits_project();
    let d = dir.path();
    let manifest = |schedule: &str| {
        format!(
            r#"pipeline "plateau"
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
optimizer "sgd" lr=0.5
{schedule}
train {{
    epochs 15
    batch-size 64
}}
"#
        )
    };
    // The validation loss, and a metric only the monitor asks for (computed for it).
    for (monitor, key, mode) in [
        ("val.loss", "val_loss", "min"),
        ("val.f1-macro", "val_f1-macro", "max"),
    ] {
        let text_ = manifest(&format!(
            r#"schedule "reduce-on-plateau" monitor="{monitor}" factor=0.5 patience=1 threshold=0.05"#
        ));
        std::fs::write(d.join("p.kdl"), &text_).unwrap();
        let out = common::pipeline(d, &["run", "p.kdl", "--json"]);
        assert!(out.status.success(), "{}", common::text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run_dir = d.join(report["run_dir"].as_str().unwrap());
        let records = common::records(&run_dir, "epoch");
        let losses: Vec<f64> = records
            .iter()
            .map(|r| r[key].as_f64().unwrap_or_else(|| panic!("no {key} in {r}")))
            .collect();
        let lrs: Vec<f64> = records.iter().map(|r| r["lr"].as_f64().unwrap()).collect();
        let expected: Vec<f64> = serde_json::from_str(&py(
            d,
            &format!(
                "import json, torch\n\
                 p = torch.nn.Parameter(torch.zeros(1))\n\
                 opt = torch.optim.SGD([p], lr=0.5)\n\
                 s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode='{mode}', factor=0.5, patience=1, threshold=0.05)\n\
                 out = [0.5]\n\
                 for v in {losses:?}[:-1]:\n    s.step(v)\n    out.append(opt.param_groups[0]['lr'])\n\
                 print(json.dumps(out))\n"
            ),
        ))
        .unwrap();
        assert_eq!(lrs.len(), expected.len());
        for (e, (ours, theirs)) in lrs.iter().zip(&expected).enumerate() {
            assert!(
                close(*ours, *theirs),
                "{monitor}, epoch {}: {lrs:?} vs {expected:?}",
                e + 1
            );
        }
        assert!(lrs.last() < lrs.first(), "no plateau in {losses:?}");
    }
    let no_monitor = manifest(r#"schedule "reduce-on-plateau" factor=0.5"#);
    std::fs::write(d.join("none.kdl"), no_monitor).unwrap();
    let out = common::pipeline(d, &["check", "none.kdl"]);
    assert!(!out.status.success());
    common::assert_fixture(
        "schedule-no-monitor.check.stderr",
        &common::text(&out.stderr),
    );
    let no_val = manifest(r#"schedule "reduce-on-plateau" monitor="val.f1-macro""#)
        .replace("train=0.7 val=0.1 test=0.2", "train=0.8 test=0.2");
    std::fs::write(d.join("no-val.kdl"), no_val).unwrap();
    let out = common::pipeline(d, &["check", "no-val.kdl"]);
    assert!(!out.status.success());
    common::assert_fixture("schedule-no-val.check.stderr", &common::text(&out.stderr));
    let twice = manifest(r#"schedule "one-cycle" warmup-epochs=1"#);
    std::fs::write(d.join("twice.kdl"), twice).unwrap();
    let out = common::pipeline(d, &["check", "twice.kdl"]);
    assert!(!out.status.success());
    common::assert_fixture(
        "schedule-warmup-twice.check.stderr",
        &common::text(&out.stderr),
    );
}

/// `schedule { torchscript "lr.pt" }`: every step's learning rate is the peak times what
/// the scripted module's `forward(step, epoch)` gives (asked of the same module in
/// PyTorch); its file is in the training's key; a `kind` beside it, a file that is not
/// TorchScript and a module that gives a negative factor are refused, located.
#[test]
fn a_scripted_schedule_sets_every_steps_rate() {
    let dir = common::digits_project();
    let d = dir.path();
    let make = |body: &str| {
        py(
            d,
            &format!(
                "import torch\n\
                 class Lr(torch.nn.Module):\n    def forward(self, step: int, epoch: int) -> float:\n{body}\n\
                 torch.jit.script(Lr()).save('lr.pt')\n"
            ),
        );
    };
    // A warm-up over the first 10 steps, then halved every epoch.
    make(
        "        if step < 10:\n            return (step + 1) / 10.0\n        return 0.5 ** epoch",
    );
    let manifest = |schedule: &str| {
        format!(
            r#"pipeline "scripted"
seed 42
data {{
    source "data/digits.csv.gz"
    label "last"
    scale "standard"
    split train=0.8 test=0.2
}}
model {{
    linear 64
    relu
    linear 10
}}
loss "cross-entropy"
optimizer "sgd" lr=0.2
{schedule}
train {{
    epochs 3
    batch-size 64
}}
logging {{
    log-every-steps 1
}}
"#
        )
    };
    std::fs::write(
        d.join("s.kdl"),
        manifest("schedule { torchscript \"lr.pt\"; }"),
    )
    .unwrap();
    let run = || {
        let out = common::pipeline(d, &["run", "s.kdl", "--json"]);
        assert!(out.status.success(), "{}", common::text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let report = run();
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let steps = common::records(&run_dir, "step");
    let ours: Vec<f64> = steps.iter().map(|r| r["lr"].as_f64().unwrap()).collect();
    let per_epoch = steps.iter().filter(|r| r["epoch"] == 1).count();
    let theirs: Vec<f64> = serde_json::from_str(&py(
        d,
        &format!(
            "import json, torch\nm = torch.jit.load('lr.pt')\n\
             print(json.dumps([0.2 * m(s, s // {per_epoch}) for s in range({})]))\n",
            ours.len()
        ),
    ))
    .unwrap();
    assert_eq!(ours.len(), 3 * per_epoch);
    assert_eq!(ours, theirs, "every step's rate, exactly");
    // Another module is another training.
    make("        return 0.5");
    let report = run();
    assert_eq!(report["stages"][0]["status"], "ran", "{report}");

    let refused = |schedule: &str| {
        std::fs::write(d.join("r.kdl"), manifest(schedule)).unwrap();
        let out = common::pipeline(d, &["check", "r.kdl", "--json"]);
        assert_eq!(out.status.code(), Some(1));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["diagnostics"][0]["code"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        refused("schedule \"cosine\" { torchscript \"lr.pt\"; }"),
        "pipeline::schedule::kind_and_torchscript"
    );
    std::fs::write(d.join("notes.txt"), "not a module").unwrap();
    assert_eq!(
        refused("schedule { torchscript \"notes.txt\"; }"),
        "pipeline::schedule::not_torchscript"
    );
    assert_eq!(
        refused("schedule { torchscript \"nope.pt\"; }"),
        "pipeline::schedule::missing_torchscript"
    );
    make("        return -1.0");
    let out = common::pipeline(d, &["run", "s.kdl"]);
    assert!(!out.status.success());
    let shown = common::text(&out.stderr);
    assert!(
        shown.contains("pipeline::schedule::bad_torchscript")
            && shown.contains("returned -1 for step 0 (epoch 0): the factor is a number ≥ 0"),
        "{shown}"
    );
}
