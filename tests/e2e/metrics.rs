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
