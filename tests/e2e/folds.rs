//! End-to-end tests of k-fold cross-validation (`data.split folds=K`), with the real
//! binary: the folds are scikit-learn's `StratifiedKFold` and `KFold` (the same rows when
//! unshuffled, the same class counts per fold when shuffled); each fold's training is a
//! stage of its own in the cache; the eval reports the folds' mean and standard deviation,
//! each fold's metrics equal to scikit-learn's on its out-of-fold predictions; a test
//! split is kept out of the folds; what cannot take K models is refused where it is
//! written.

use crate::common::{
    assert_fixture, draws, pipeline, py, records, refused, run_json, split_json, statuses, text,
};
use serde_json::Value;
use std::path::Path;

/// `n` plants of three kinds in the proportions 6 : 3 : 2, each with three measurements
/// and a soil type (text, so categorical: one-hot from each fold's training part).
fn plants(path: &Path, n: usize) {
    let mut next = draws(11);
    let mut out = String::from("width,height,weight,soil,kind\n");
    for i in 0..n {
        let (kind, centre) = match i % 11 {
            0..=5 => ("fern", 0.0),
            6..=8 => ("moss", 1.2),
            _ => ("reed", 2.4),
        };
        let soil = ["clay", "sand", "loam"][(next() * 3.0) as usize % 3];
        let mut value = || centre + 1.1 * (next() - 0.5) * 2.0;
        let (w, h, m) = (value(), value() * 2.0, value() + 5.0);
        out += &format!("{w:.4},{h:.4},{m:.4},{soil},{kind}\n");
    }
    std::fs::write(path, out).unwrap();
}

const CLASSES: &str = r#"pipeline "plants"
seed 3
data "plants.csv" {
    header #true
    label "kind"
    scale "standard"
    split folds=4 stratify=#true shuffle=#false
}
model {
    linear 16
    relu
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=0.02
train epochs=12 batch-size=32
eval "cv" {
    needs "train"
    metrics "f1-macro"
    output "oof.csv"
}
"#;

fn run(dir: &Path, args: &[&str]) -> Value {
    run_json(dir, "plants.kdl", args)
}

#[test]
fn each_fold_trains_apart_and_the_eval_reports_their_mean_and_spread() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    plants(&d.join("plants.csv"), 209);
    std::fs::write(d.join("plants.kdl"), CLASSES).unwrap();
    let report = run(d, &[]);
    let names: Vec<String> = statuses(&report).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "train.fold-1",
            "train.fold-2",
            "train.fold-3",
            "train.fold-4",
            "cv"
        ]
    );
    let cv = &report["stages"][4];
    let split = split_json(d, &report);
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let lines = records(&run_dir, "eval");
    let folds: Vec<u64> = lines.iter().map(|l| l["fold"].as_u64().unwrap()).collect();
    assert_eq!(folds, [1, 2, 3, 4]);

    // The folds, the per-fold metrics, their mean and spread, against scikit-learn and
    // numpy on the same rows and the out-of-fold predictions.
    let out = py(
        d,
        &format!(
            r#"
import json, numpy as np, pandas as pd
from sklearn.model_selection import StratifiedKFold
from sklearn.metrics import accuracy_score, f1_score
data = pd.read_csv("plants.csv")
split = json.loads('''{split}''')
lines = json.loads('''{lines}''')
cv = json.loads('''{cv}''')
theirs = [sorted(test.tolist()) for _, test in StratifiedKFold(4).split(data, data["kind"])]
assert [sorted(f) for f in split["folds"]] == theirs, (split["folds"], theirs)
assert split["test"] == []
oof = pd.read_csv("oof.csv")
assert sorted(oof["row"]) == list(range(len(data))), "every row predicted once"
classes = sorted(data["kind"].unique())
for line in lines:
    part = oof[oof["fold"] == line["fold"]]
    assert sorted(part["row"]) == theirs[line["fold"] - 1]
    truth = data["kind"].to_numpy()[part["row"]]
    guess = np.array(classes)[part[[f"prob_{{c}}" for c in classes]].to_numpy().argmax(1)]
    assert abs(accuracy_score(truth, guess) - line["accuracy"]) < 1e-12
    assert abs(f1_score(truth, guess, average="macro") - line["f1-macro"]) < 1e-12
for name in ["loss", "accuracy", "f1-macro"]:
    values = np.array([l[name] for l in lines])
    assert abs(values.mean() - cv["metrics"][name]) < 1e-12, name
    assert abs(values.std() - cv["metrics_std"][name]) < 1e-12, name
assert cv["metrics"]["samples"] == len(data)
print(cv["metrics"]["accuracy"], cv["metrics_std"]["accuracy"])
"#,
            split = split,
            lines = Value::from(lines.clone()),
            cv = cv,
        ),
    );
    eprintln!("mean accuracy ± std over the folds: {}", out.trim());
    assert!(cv["metrics"]["accuracy"].as_f64().unwrap() > 0.7, "{cv}");

    // The table shows the spread.
    let table = pipeline(d, &["run", "plants.kdl"]);
    let stdout = text(&table.stdout);
    assert!(stdout.contains(" ± "), "{stdout}");

    // A fold computed alone (as a run killed after it would have) is not computed again.
    let ten = ["--set", "train.epochs=10"];
    let alone = run(d, &[ten[0], ten[1], "--stage", "train.fold-2"]);
    assert_eq!(
        statuses(&alone),
        [("train.fold-2".to_string(), "ran".to_string())]
    );
    let rest = run(d, &ten);
    let ran: Vec<String> = statuses(&rest)
        .into_iter()
        .map(|(name, status)| format!("{name} {status}"))
        .collect();
    assert_eq!(
        ran,
        [
            "train.fold-1 ran",
            "train.fold-2 cached",
            "train.fold-3 ran",
            "train.fold-4 ran",
            "cv ran"
        ]
    );

    // Shuffled, the folds change and each keeps StratifiedKFold's count of each class.
    let shuffled = run(d, &["--set", "data.split.shuffle=true"]);
    let split = split_json(d, &shuffled);
    py(
        d,
        &format!(
            r#"
import json, numpy as np, pandas as pd
from sklearn.model_selection import StratifiedKFold
data = pd.read_csv("plants.csv")
split = json.loads('''{split}''')
kinds = data["kind"].to_numpy()
count = lambda rows: sorted(zip(*np.unique(kinds[rows], return_counts=True)))
theirs = [count(test) for _, test in StratifiedKFold(4, shuffle=True, random_state=0).split(data, kinds)]
assert [count(f) for f in split["folds"]] == theirs, ([count(f) for f in split["folds"]], theirs)
plain = [test.tolist() for _, test in StratifiedKFold(4).split(data, kinds)]
assert [sorted(f) for f in split["folds"]] != plain
"#
        ),
    );
}

const VALUES: &str = r#"pipeline "plants"
seed 5
data "plants.csv" {
    header #true
    features "width" "height" "soil"
    label "weight"
    scale "standard"
    split folds=3 test=0.2 shuffle=#false
}
model {
    linear 8
    relu
    linear 1
}
loss "mse"
optimizer "adam" lr=0.02
train epochs=8 batch-size=32
eval "cv" {
    needs "train"
    metrics "r2"
}
eval "held-back" {
    needs "train"
    split "test"
    metrics "r2"
}
"#;

#[test]
fn a_test_split_stays_out_of_the_folds_and_every_fold_model_is_scored_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    plants(&d.join("plants.csv"), 100);
    std::fs::write(d.join("plants.kdl"), VALUES).unwrap();
    // `--stage` with the training's name runs its folds.
    let trained = run(d, &["--stage", "train"]);
    assert_eq!(
        statuses(&trained),
        ["train.fold-1", "train.fold-2", "train.fold-3"]
            .map(|n| (n.to_string(), "ran".to_string()))
    );
    let report = run(d, &[]);
    let split = split_json(d, &report);
    // Unshuffled, the test split is the last 20 rows and the folds are `KFold(3)`'s of
    // the others.
    py(
        d,
        &format!(
            r#"
import json
from sklearn.model_selection import KFold
split = json.loads('''{split}''')
assert split["test"] == list(range(80, 100)), split["test"]
assert split["folds"] == [t.tolist() for _, t in KFold(3).split(range(80))], split["folds"]
"#
        ),
    );
    let run_dir = d.join(report["run_dir"].as_str().unwrap());
    let held_back: Vec<Value> = records(&run_dir, "eval")
        .into_iter()
        .filter(|l| l["stage"] == "held-back")
        .collect();
    assert_eq!(held_back.len(), 3);
    for line in &held_back {
        assert_eq!(
            (line["split"].as_str(), line["samples"].as_u64()),
            (Some("test"), Some(20))
        );
    }
    let stage = &report["stages"][4];
    let r2: Vec<f64> = held_back
        .iter()
        .map(|l| l["r2"].as_f64().unwrap())
        .collect();
    let mean = r2.iter().sum::<f64>() / 3.0;
    assert!(
        (stage["metrics"]["r2"].as_f64().unwrap() - mean).abs() < 1e-12,
        "{stage}"
    );
    assert_eq!(stage["metrics"]["samples"].as_f64(), Some(60.0));
    assert!(
        stage["metrics_std"]["r2"].as_f64().unwrap() > 0.0,
        "{stage}"
    );

    // A sweep ranks its points by the folds' mean; the point run as it is is cached.
    let out = pipeline(
        d,
        &[
            "sweep",
            "plants.kdl",
            "--json",
            "--grid",
            "optimizer.lr=0.02,0.005",
            "--monitor",
            "cv.r2",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let swept: Value = serde_json::from_slice(&out.stdout).unwrap();
    let points = swept["points"].as_array().unwrap();
    let cv = |p: &Value| {
        let stages = p["stages"].as_array().unwrap();
        let cv = stages.iter().find(|s| s["name"] == "cv").unwrap();
        (cv["metrics"]["r2"].as_f64().unwrap(), cv["status"].clone())
    };
    let (first, second) = (cv(&points[0]), cv(&points[1]));
    assert!(first.0 >= second.0, "best first: {swept}");
    assert_eq!(points[0]["monitor"].as_f64(), Some(first.0));
    let mean = report["stages"][3]["metrics"]["r2"].as_f64().unwrap();
    let same = points
        .iter()
        .find(|p| p["overrides"].to_string().contains("0.02"))
        .unwrap();
    assert_eq!(cv(same), (mean, Value::from("cached")), "{swept}");
}

#[test]
fn what_needs_one_model_of_k_folds_is_refused_where_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    plants(&d.join("plants.csv"), 30);
    let export = CLASSES.replace(
        "eval \"cv\" {",
        "checkpoint \"export\" {\n    needs \"train\"\n}\neval \"cv\" {",
    );
    std::fs::write(d.join("plants.kdl"), export).unwrap();
    let stderr = refused(d, &["check", "plants.kdl"], 1);
    assert_fixture("folds-checkpoint.check.stderr", &stderr);
    let val = CLASSES.replace("split folds=4", "split folds=4 val=0.1 test=0.1 train=0.8");
    std::fs::write(d.join("plants.kdl"), val).unwrap();
    let stderr = refused(d, &["check", "plants.kdl"], 1);
    assert_fixture("folds-and-val.check.stderr", &stderr);
}
