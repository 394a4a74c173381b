//! Every metric of `pipeline_core::metrics` against scikit-learn's own value on the same
//! predictions (in the project's torch venv), to 1e-6: a binary, a multiclass, a
//! multi-label and a two-output regression set, fixed by their seeds.

use crate::common;

use crate::common::py;
use pipeline_core::metrics::{self, Predictions, Score};
use serde_json::Value;

/// The sets and scikit-learn's values, as JSON.
const SETS: &str = r#"
import json, numpy as np
from sklearn import metrics as m
r = np.random.default_rng(7)
out = {}
def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True)); return e / e.sum(axis=1, keepdims=True)
for name, n, c in [("binary", 200, 2), ("multiclass", 300, 4)]:
    y = r.integers(0, c, n)
    z = r.standard_normal((n, c)) + 1.5 * np.eye(c)[y]
    p = softmax(z)
    p[:5] = p[0]          # tied rows: ties in the ranking and in the argmax
    p[5] = np.full(c, 1 / c)
    pred = p.argmax(axis=1)
    e = {"accuracy": m.accuracy_score(y, pred),
         "log-loss": m.log_loss(y, p, labels=list(range(c))),
         "auroc": m.roc_auc_score(y, p[:, 1]) if c == 2 else m.roc_auc_score(y, p, multi_class="ovr"),
         "confusion-matrix": m.confusion_matrix(y, pred, labels=list(range(c))).tolist()}
    if c > 2:
        e["top-2-accuracy"] = m.top_k_accuracy_score(y, p, k=2, labels=list(range(c)))
    for f, fn in [("precision", m.precision_score), ("recall", m.recall_score), ("f1", m.f1_score)]:
        for avg in ["macro", "micro", "weighted"]:
            e[f"{f}-{avg}"] = fn(y, pred, average=avg, zero_division=0)
        e[f"{f}-per-class"] = fn(y, pred, average=None, labels=list(range(c)), zero_division=0).tolist()
    out[name] = {"probabilities": p.ravel().tolist(), "labels": y.tolist(), "classes": c, "expected": e}
# Multi-label: three labels, one rare, with tied scores.
y = (r.random((120, 3)) < [0.5, 0.3, 0.1]).astype(int)
p = 1 / (1 + np.exp(-(r.standard_normal((120, 3)) + 1.5 * (2 * y - 1))))
p[:4] = p[0]
pred = (p > 0.5).astype(int)
e = {"auroc": m.roc_auc_score(y, p)}
for f, fn in [("precision", m.precision_score), ("recall", m.recall_score), ("f1", m.f1_score)]:
    for avg in ["macro", "micro", "weighted"]:
        e[f"{f}-{avg}"] = fn(y, pred, average=avg, zero_division=0)
    e[f"{f}-per-class"] = fn(y, pred, average=None, zero_division=0).tolist()
out["multilabel"] = {"probabilities": p.ravel().tolist(), "truth": y.ravel().astype(float).tolist(), "labels": 3, "expected": e}
t = r.standard_normal((150, 2)) * [1.0, 10.0]
o = t + r.standard_normal((150, 2)) * [0.5, 4.0]
out["regression"] = {"outputs": o.ravel().tolist(), "targets": t.ravel().tolist(), "width": 2, "expected": {
    "mse": m.mean_squared_error(t, o), "rmse": m.root_mean_squared_error(t, o),
    "mae": m.mean_absolute_error(t, o), "r2": m.r2_score(t, o)}}
print(json.dumps(out))
"#;

fn floats(v: &Value) -> Vec<f64> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn every_metric_is_scikit_learns() {
    let dir = tempfile::tempdir().unwrap();
    let sets: Value = serde_json::from_str(&py(dir.path(), SETS)).unwrap();
    let mut checked = 0;
    for (name, set) in sets.as_object().unwrap() {
        let (probabilities, labels, outputs, targets, truth);
        let predictions = match (set.get("classes"), set.get("labels")) {
            (_, Some(width)) if width.is_u64() => {
                probabilities = floats(&set["probabilities"]);
                truth = floats(&set["truth"]);
                Predictions::Labels {
                    probabilities: &probabilities,
                    truth: &truth,
                    labels: width.as_u64().unwrap() as usize,
                }
            }
            (Some(classes), _) => {
                probabilities = floats(&set["probabilities"]);
                labels = serde_json::from_value::<Vec<i64>>(set["labels"].clone()).unwrap();
                Predictions::Classes {
                    probabilities: &probabilities,
                    labels: &labels,
                    classes: classes.as_u64().unwrap() as usize,
                }
            }
            _ => {
                outputs = floats(&set["outputs"]);
                targets = floats(&set["targets"]);
                Predictions::Values {
                    outputs: &outputs,
                    targets: &targets,
                    width: 2,
                }
            }
        };
        for (metric, expected) in set["expected"].as_object().unwrap() {
            let m = metrics::parse(metric).unwrap_or_else(|| panic!("no metric `{metric}`"));
            let got = m.compute(&predictions).unwrap();
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-6;
            let ok = match &got {
                Score::One(x) => close(*x, expected.as_f64().unwrap()),
                Score::PerClass(xs) => {
                    let want = floats(expected);
                    xs.len() == want.len() && xs.iter().zip(&want).all(|(a, b)| close(*a, *b))
                }
                Score::Matrix(rows) => *expected == serde_json::json!(rows),
            };
            assert!(ok, "{name} {metric}: {got:?}, scikit-learn {expected}");
            checked += 1;
        }
    }
    assert_eq!(checked, 16 + 17 + 13 + 4, "every metric of every set");
}

#[test]
fn every_registered_name_is_a_metric_and_others_are_not() {
    for name in [
        "accuracy",
        "top-3-accuracy",
        "f1-macro",
        "recall-per-class",
        "auroc",
        "r2",
    ] {
        assert_eq!(metrics::parse(name).unwrap().name(), name);
    }
    for name in ["top-1-accuracy", "f1", "f1-average", "R2", "precision-"] {
        assert!(metrics::parse(name).is_none(), "{name}");
    }
}

#[test]
fn an_eval_stage_reports_its_metrics_and_writes_its_confusion_matrix() {
    use common::{assert_fixture, pipeline, text};
    let dir = common::digits_project();
    let d = dir.path();
    let manifest = std::fs::read_to_string(d.join("digits.kdl"))
        .unwrap()
        .replace("epochs 30", "epochs 3");
    let with = |metrics: &str| {
        let at = manifest
            .find("eval \"test\" {")
            .expect("the example's eval stage");
        let mut m = manifest.clone();
        m.insert_str(
            at + "eval \"test\" {".len(),
            &format!("\n    metrics {metrics}"),
        );
        m
    };
    std::fs::write(
        d.join("m.kdl"),
        with(r#""accuracy" "f1-macro" "precision-per-class" "auroc" "confusion-matrix""#),
    )
    .unwrap();
    let out = pipeline(d, &["run", "m.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let eval = &report["stages"][1]["metrics"];
    let accuracy = eval["accuracy"].as_f64().unwrap();
    for key in [
        "f1-macro",
        "auroc",
        "precision-per-class.0",
        "precision-per-class.9",
    ] {
        let v = eval[key]
            .as_f64()
            .unwrap_or_else(|| panic!("no `{key}` in {eval}"));
        assert!((0.0..=1.0).contains(&v), "{key} {v}");
    }
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let matrix: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("test-confusion-matrix.json")).unwrap())
            .unwrap();
    let rows: Vec<Vec<u64>> = serde_json::from_value(matrix["matrix"].clone()).unwrap();
    let total: u64 = rows.iter().flatten().sum();
    let right: u64 = (0..rows.len()).map(|i| rows[i][i]).sum();
    assert_eq!(total as f64, eval["samples"].as_f64().unwrap());
    assert!((right as f64 / total as f64 - accuracy).abs() < 1e-12);
    // Names that are no metric, and metrics of the other task, are check errors.
    std::fs::write(d.join("unknown.kdl"), with(r#""accuracy" "f1""#)).unwrap();
    let out = pipeline(d, &["check", "unknown.kdl"]);
    assert!(!out.status.success());
    assert_fixture("metrics-unknown.check.stderr", &text(&out.stderr));
    std::fs::write(d.join("task.kdl"), with(r#""r2""#)).unwrap();
    let out = pipeline(d, &["check", "task.kdl"]);
    assert!(!out.status.success());
    assert_fixture("metrics-other-task.check.stderr", &text(&out.stderr));
    // Multi-label outputs take per-label metrics, not single-label ones.
    let multi_label = with(r#""f1-micro" "auroc" "accuracy" "log-loss""#)
        .replace(r#"loss "cross-entropy""#, r#"loss "bce-with-logits""#);
    std::fs::write(d.join("labels.kdl"), multi_label).unwrap();
    let out = pipeline(d, &["check", "labels.kdl"]);
    assert!(!out.status.success());
    assert_fixture("metrics-multi-label.check.stderr", &text(&out.stderr));
}

/// The scripted metrics of the tests below: an accuracy (which must equal the built-in
/// one exactly), a Brier score, one of the wrong arguments and one of many values.
const SCRIPTED: &str = r#"
import torch
import torch.nn.functional as F

class Accuracy(torch.nn.Module):
    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (output.argmax(1) == target).to(torch.float64).mean()

class Brier(torch.nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        truth = F.one_hot(target, output.size(1)).to(output.dtype)
        return self.scale * ((output - truth) ** 2).sum(1).mean()

class One(torch.nn.Module):
    def forward(self, output: torch.Tensor) -> torch.Tensor:
        return output.mean()

class PerSample(torch.nn.Module):
    def forward(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return output.max(1).values

torch.jit.script(Accuracy()).save("accuracy.pt")
torch.jit.script(Brier(1.0)).save("brier.pt")
torch.jit.script(Brier(2.0)).save("brier-twice.pt")
torch.jit.script(One()).save("one.pt")
torch.jit.script(PerSample()).save("per-sample.pt")
"#;

/// `common::SMALL` with a validation split, the scripted metrics defined, `keep-best`
/// watching the Brier score (its direction the metric's `mode`), and `extra` at the end.
fn scripted_manifest(eval_metrics: &str, extra: &str) -> String {
    common::SMALL
        .replace(
            "split train=0.8 test=0.2",
            "split train=0.7 val=0.1 test=0.2",
        )
        .replace(
            "train epochs=3 batch-size=64",
            "train epochs=4 batch-size=64 {\n    validate { metrics \"hits\"; }\n    keep-best monitor=\"val.brier\"\n}",
        )
        .replace(
            "eval \"test\" needs=\"train\" split=\"test\"",
            &format!("eval \"test\" needs=\"train\" split=\"test\" {{\n    metrics {eval_metrics}\n}}"),
        )
        + "metric \"hits\" {\n    torchscript \"accuracy.pt\"\n    mode \"max\"\n}\nmetric \"brier\" torchscript=\"brier.pt\" mode=\"min\"\n"
        + extra
}

/// A metric written in Python and scripted (`metric "NAME" { torchscript "…" }`) is
/// measured wherever a built-in one is: a scripted accuracy equals `accuracy` exactly, at
/// every validation and in an `eval`; `keep-best` watching the scripted Brier score keeps
/// the validation where it was lowest (the metric's `mode`); the module's content is in
/// the key of every stage that measures it.
#[test]
fn a_scripted_metric_is_measured_and_watched_as_a_built_in_one() {
    use common::{pipeline, text};
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    py(d, SCRIPTED);
    std::fs::write(
        d.join("m.kdl"),
        scripted_manifest(r#""accuracy" "hits" "brier""#, ""),
    )
    .unwrap();
    let run = || -> Value {
        let out = pipeline(d, &["run", "m.kdl", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let report = run();
    let eval = &report["stages"][1]["metrics"];
    assert_eq!(eval["hits"], eval["accuracy"], "{eval}");
    let brier = eval["brier"].as_f64().unwrap();
    assert!(brier > 0.0 && brier < 1.0, "{eval}");
    // Every validation measured the scripted metrics; the kept weights are those of the
    // lowest Brier score.
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let lines = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let validations: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("val_brier").is_some())
        .collect();
    assert_eq!(validations.len(), 4, "{lines}");
    for v in &validations {
        assert_eq!(v["val_hits"], v["val_accuracy"], "{v}");
    }
    let lowest = validations
        .iter()
        .map(|v| v["val_brier"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let best = &report["stages"][0]["best"][0];
    assert_eq!(best["score"].as_f64(), Some(lowest), "{best} of {lines}");
    // The module is in the key: the same answers from the cache; another module under
    // the same name measures again (training too, whose monitor watches it).
    let again = run();
    assert_eq!(again["stages"][1]["status"], "cached");
    std::fs::copy(d.join("brier-twice.pt"), d.join("brier.pt")).unwrap();
    let twice = run();
    assert_eq!(twice["stages"][0]["status"], "ran");
    assert_eq!(twice["stages"][1]["status"], "ran");
    assert_eq!(
        twice["stages"][1]["metrics"]["brier"].as_f64(),
        Some(2.0 * brier)
    );
}

/// What a scripted metric cannot be is said on its line: a built-in metric's name, a
/// missing module, a name defined twice, a metric no stage measures (a warning), an
/// unknown name (whose help lists the manifest's own); and at run start, a `forward` of
/// other arguments, or one that gives more than one number.
#[test]
fn a_scripted_metric_that_cannot_be_one_is_refused_on_its_line() {
    use common::{assert_fixture, pipeline, text};
    let dir = common::small_project(common::SMALL);
    let d = dir.path();
    py(d, SCRIPTED);
    let extra = "metric \"accuracy\" torchscript=\"accuracy.pt\" mode=\"max\"\n\
                 metric \"gone\" torchscript=\"nowhere.pt\" mode=\"max\"\n\
                 metric \"hits\" torchscript=\"accuracy.pt\" mode=\"max\"\n";
    std::fs::write(
        d.join("bad.kdl"),
        scripted_manifest(r#""hits" "brier" "brierr""#, extra),
    )
    .unwrap();
    let out = pipeline(d, &["check", "bad.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_fixture("metrics-scripted.check.stderr", &text(&out.stderr));
    for (module, code, says) in [
        (
            "one.pt",
            "pipeline::metric::torchscript_arguments",
            "forward(self, output)",
        ),
        // The training validates first: its `keep-best` watches the metric.
        (
            "per-sample.pt",
            "pipeline::train::undefined_metric",
            "returned 180 numbers",
        ),
    ] {
        let text_ = scripted_manifest(r#""brier""#, "").replace("brier.pt", module);
        std::fs::write(d.join("wrong.kdl"), text_).unwrap();
        let out = pipeline(d, &["run", "wrong.kdl", "--no-cache"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let said = text(&out.stderr);
        assert!(
            said.contains(code) && said.contains(says),
            "{module}: {said}"
        );
    }
}
