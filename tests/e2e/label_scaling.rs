//! End-to-end tests of `scale-label`, with the real binary: a regression on prices in
//! the hundreds of thousands and a second target in thousandths trains on labels scaled
//! with the training split's statistics (scikit-learn's `StandardScaler` fitted on the
//! same rows gives the same ones); the evaluation's metrics and the predictions are in
//! the labels' units (recomputed in PyTorch from the exported weights and the recorded
//! scaling); a classification loss refuses it.

use crate::common::{assert_fixture, checkpoint_metadata, draws, pipeline, py, refused, text};
use serde_json::Value;
use std::path::Path;

/// Houses: three features and two targets of very different sizes (a price around
/// 300,000 and a yearly cost in thousandths of it), from a fixed generator.
fn houses(path: &Path, rows: usize, seed: u64) {
    let mut next = draws(seed);
    let mut out = String::from("area,rooms,age,price,cost\n");
    for _ in 0..rows {
        let (area, rooms, age) = (
            40.0 + 160.0 * next(),
            (1.0 + 5.0 * next()).floor(),
            60.0 * next(),
        );
        let price =
            90_000.0 + 2_100.0 * area + 9_000.0 * rooms - 1_200.0 * age + 8_000.0 * (next() - 0.5);
        let cost = 0.004 * price + 2.0 * (next() - 0.5);
        out += &format!("{area:.2},{rooms},{age:.1},{price:.0},{cost:.3}\n");
    }
    std::fs::write(path, out).unwrap();
}

const MANIFEST: &str = r#"pipeline "houses"
seed 3
data "houses.csv" {
    header #true
    label "price" "cost"
    scale "standard"
    scale-label "standard"
    split train=0.7 val=0.15 test=0.15
}
model {
    linear 16
    relu
    linear 2
}
loss "mse"
optimizer "adam" lr=1e-2
train epochs=40 batch-size=32 {
    validate {
        metrics "mae"
    }
}
eval "score" {
    needs "train"
    split "test"
    metrics "mse" "mae" "rmse" "r2"
}
checkpoint "export" {
    needs "train"
}
predict "new" {
    needs "train"
    source "new.csv"
    output "new-predictions.csv"
}
"#;

fn run(dir: &Path, manifest: &str) -> Value {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn scaled_labels_train_and_every_metric_and_prediction_is_in_the_labels_units() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    houses(&d.join("houses.csv"), 400, 1);
    houses(&d.join("new.csv"), 30, 2);
    std::fs::write(d.join("houses.kdl"), MANIFEST).unwrap();
    let report = run(d, "houses.kdl");
    let metrics = &report["stages"][1]["metrics"];
    let r2 = metrics["r2"].as_f64().unwrap();
    assert!(r2 > 0.95, "{metrics}");

    let meta = checkpoint_metadata(d, &report, 2);
    assert_eq!(meta["label_scaling"]["kind"], "standard");
    assert_eq!(meta["label_columns"], serde_json::json!(["price", "cost"]));

    // scikit-learn's scalers fitted on the training rows give the recorded scaling; the
    // exported weights, their outputs taken back to the labels' units with it, give the
    // run's predictions and its test metrics.
    let export = report["stages"][2]["outputs"][0].as_str().unwrap();
    let metadata = report["stages"][2]["outputs"][1].as_str().unwrap();
    let split = format!("{}/split.json", report["run_dir"].as_str().unwrap());
    let out = py(
        d,
        &format!(
            r#"
import csv, json, numpy as np, torch
from safetensors.torch import load_file
from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score
from sklearn.preprocessing import StandardScaler
def table(path):
    rows = np.loadtxt(path, delimiter=",", skiprows=1)
    return rows[:, :3], rows[:, 3:]
meta = json.load(open({metadata:?}))
split = json.load(open({split:?}))
X, Y = table("houses.csv")
features = StandardScaler().fit(X[split["train"]])
labels = StandardScaler().fit(Y[split["train"]])
scaling = meta["label_scaling"]
assert np.allclose(scaling["add"], labels.mean_, rtol=1e-6), (scaling, labels.mean_)
assert np.allclose(scaling["multiply"], labels.scale_, rtol=1e-6), (scaling, labels.scale_)
sd = load_file({export:?})
model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
model.load_state_dict({{"0.weight": sd["0.weight"], "0.bias": sd["0.bias"], "2.weight": sd["2.weight"], "2.bias": sd["2.bias"]}})
def predict(x):
    with torch.no_grad():
        out = model(torch.tensor(features.transform(x), dtype=torch.float32)).double().numpy()
    return out * np.array(scaling["multiply"]) + np.array(scaling["add"])
test = split["test"]
truth, ours = Y[test], predict(X[test])
print(json.dumps({{
    "mse": mean_squared_error(truth, ours),
    "mae": mean_absolute_error(truth, ours),
    "rmse": float(np.mean(np.sqrt(((truth - ours) ** 2).mean(0)))),
    "r2": r2_score(truth, ours),
}}))
Xn, _ = table("new.csv")
written = list(csv.DictReader(open("new-predictions.csv")))
written = np.array([[float(r["price"]), float(r["cost"])] for r in written])
print(float(np.abs(written / predict(Xn) - 1).max()))
"#
        ),
    );
    let mut lines = out.lines();
    let torch: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let worst: f64 = lines.next().unwrap().trim().parse().unwrap();
    for name in ["mse", "mae", "rmse", "r2"] {
        let (ours, theirs) = (
            metrics[name].as_f64().unwrap(),
            torch[name].as_f64().unwrap(),
        );
        assert!(
            (ours - theirs).abs() <= 1e-5 * theirs.abs().max(1.0),
            "{name}: pipeline {ours}, PyTorch and scikit-learn {theirs}"
        );
    }
    eprintln!("test metrics {metrics}; predictions against PyTorch's, relative: {worst:e}");
    assert!(worst < 1e-5, "{worst}");
}

#[test]
fn a_classification_loss_refuses_scaled_labels() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    houses(&d.join("houses.csv"), 20, 1);
    std::fs::write(
        d.join("houses.kdl"),
        MANIFEST
            .replace("label \"price\" \"cost\"", "label \"rooms\"")
            .replace("loss \"mse\"", "loss \"cross-entropy\"")
            .replace("    metrics \"mse\" \"mae\" \"rmse\" \"r2\"\n", "")
            .replace("metrics \"mae\"", "metrics \"accuracy\""),
    )
    .unwrap();
    let stderr = refused(d, &["check", "houses.kdl"], 1);
    assert_fixture("scale-label-classes.check.stderr", &stderr);
}
