//! Applying a trained model to new samples: a `predict` stage reads a file without labels
//! as training read its data (columns by name or position, the training split's scaling
//! and filling, the class names) and writes one row per sample, which equals the eval
//! pass on the same rows and PyTorch applying the exported checkpoint; an `eval` stage
//! takes another labelled file with `source` and writes its predictions with `output`.
//! Predictions are cached, restored where the manifest says, and never written over a
//! file `pipeline` did not write. Bad sources are located `check` errors or clear run
//! errors naming the file.

use crate::common::{assert_fixture, pipeline, py, root, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// `pipeline run MANIFEST --json` in `dir`, which must succeed: its report.
fn run(dir: &Path, manifest: &str) -> Value {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A predictions table: its header, and its rows by their `row`.
fn table(path: &Path) -> (Vec<String>, BTreeMap<usize, Vec<String>>) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader.headers().unwrap().iter().map(String::from).collect();
    let rows = reader
        .records()
        .map(|r| {
            let r: Vec<String> = r.unwrap().iter().map(String::from).collect();
            (r[0].parse().unwrap(), r[1..].to_vec())
        })
        .collect();
    (header, rows)
}

/// The rendered diagnostic of `code` in `stderr`: from its code to the blank line after
/// its help.
fn diagnostic<'a>(stderr: &'a str, code: &str) -> &'a str {
    let start = stderr
        .find(code)
        .unwrap_or_else(|| panic!("no {code} in {stderr}"));
    let body = start + code.len() + 2;
    let end = stderr[body..]
        .find("\n\n")
        .map_or(stderr.len(), |e| body + e);
    &stderr[start..end]
}

/// The stage named `name` in a report.
fn stage<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name} in {report}"))
}

fn output(dir: &Path, report: &Value, name: &str) -> std::path::PathBuf {
    dir.join(stage(report, name)["outputs"][0].as_str().unwrap())
}

/// `examples/breast-cancer.kdl` (whose `predict` stage reads the tumours without their
/// class) with more stages that apply the model: to the test split and to the whole
/// labelled file (an `eval` with `output`), and as an array.
const MORE: &str = r#"
eval "test-rows" {
    needs "train"
    output "test-predictions.csv"
}
eval "all-rows" {
    needs "train"
    source "data/breast_cancer.csv"
    skip-rows 1
    metrics "accuracy"
    output "all.csv"
}
predict "as-array" {
    needs "train"
    source "data/breast_cancer_unlabelled.csv"
    output "out/predictions.npy"
}
"#;

fn breast_cancer() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    for file in ["breast_cancer.csv", "breast_cancer_unlabelled.csv"] {
        let from = root().join("examples/data").join(file);
        std::fs::copy(&from, dir.path().join("data").join(file))
            .unwrap_or_else(|_| panic!("{}: run scripts/setup.sh", from.display()));
    }
    let example = std::fs::read_to_string(root().join("examples/breast-cancer.kdl")).unwrap();
    std::fs::write(dir.path().join("bc.kdl"), example + MORE).unwrap();
    dir
}

#[test]
fn predict_on_features_without_labels_gives_the_eval_pass_classes_and_pytorchs_probabilities() {
    let dir = breast_cancer();
    let d = dir.path();
    let report = run(d, "bc.kdl");
    let predicted = output(d, &report, "new-tumours");
    assert!(predicted.ends_with("new-tumours.csv"), "{report}");
    let (header, rows) = table(&predicted);
    assert_eq!(header, ["row", "class", "prob_0", "prob_1"]);
    assert_eq!(rows.len(), 569);
    assert_eq!(
        rows.keys().copied().collect::<Vec<_>>(),
        (0..569).collect::<Vec<_>>()
    );
    assert_eq!(stage(&report, "new-tumours")["metrics"]["samples"], 569.0);

    // The eval pass on the test split: the same class and probabilities on each of its rows.
    let (eval_header, test_rows) = table(&d.join("test-predictions.csv"));
    assert_eq!(eval_header, header);
    assert_eq!(
        test_rows.len() as f64,
        stage(&report, "test-rows")["metrics"]["samples"]
    );
    for (row, values) in &test_rows {
        assert_eq!(&rows[row], values, "row {row}");
    }
    // The eval pass on the whole labelled file: every row the same, and its accuracy is
    // the predicted classes' against the file's.
    let (_, all_rows) = table(&d.join("all.csv"));
    assert_eq!(all_rows, rows);
    let labels: Vec<String> = std::fs::read_to_string(d.join("data/breast_cancer.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().to_string())
        .collect();
    let hits = rows.iter().filter(|(i, v)| v[0] == labels[**i]).count();
    let accuracy = stage(&report, "all-rows")["metrics"]["accuracy"]
        .as_f64()
        .unwrap();
    assert_eq!(accuracy, hits as f64 / 569.0);
    assert!(accuracy > 0.95, "{accuracy}");

    // PyTorch applying the exported checkpoint with its metadata's scaling to the raw
    // features gives the same probabilities; the array holds them too.
    let export = output(d, &report, "export");
    let out = py(
        d,
        &format!(
            r#"
import csv, json, numpy as np, torch
from safetensors.torch import load_file
sd = load_file({export:?})
meta = json.load(open({meta:?}))
model = torch.nn.Sequential(torch.nn.Linear(30, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).eval()
model.load_state_dict({{"0.weight": sd["0.weight"], "0.bias": sd["0.bias"], "2.weight": sd["3.weight"], "2.bias": sd["3.bias"]}})
X = np.loadtxt("data/breast_cancer_unlabelled.csv", delimiter=",")
s = meta["scaling"]
x = torch.tensor((X - np.array(s["subtract"])) / np.array(s["divide"]), dtype=torch.float32)
with torch.no_grad():
    p = torch.softmax(model(x).double(), 1).numpy()
rows = list(csv.DictReader(open({predicted:?})))
mine = np.array([[float(r["prob_0"]), float(r["prob_1"])] for r in rows])
print(np.abs(p - mine).max())
print((p.argmax(1) == np.array([int(r["class"]) for r in rows])).mean())
a = np.load("out/predictions.npy")
print(a.dtype, a.shape, np.abs(a - mine).max())
"#,
            export = export,
            meta = export.with_extension("json"),
            predicted = predicted,
        ),
    );
    let lines: Vec<&str> = out.lines().collect();
    let worst: f64 = lines[0].parse().unwrap();
    assert!(worst < 1e-5, "PyTorch differs by {worst}");
    assert_eq!(lines[1], "1.0", "{out}");
    assert_eq!(lines[2], "float64 (569, 2) 0.0", "{out}");

    // Cached: nothing runs again, and a removed output comes back from the cache.
    let before = std::fs::read(d.join("all.csv")).unwrap();
    std::fs::remove_file(d.join("all.csv")).unwrap();
    std::fs::remove_file(d.join("out/predictions.npy")).unwrap();
    let again = run(d, "bc.kdl");
    for s in again["stages"].as_array().unwrap() {
        assert_eq!(s["status"], "cached", "{again}");
    }
    assert_eq!(std::fs::read(d.join("all.csv")).unwrap(), before);
    assert!(d.join("out/predictions.npy").is_file());
}

#[test]
fn predictions_never_replace_a_file_pipeline_did_not_write() {
    let dir = breast_cancer();
    let d = dir.path();
    std::fs::write(d.join("all.csv"), "my own notes\n").unwrap();
    let out = pipeline(d, &["run", "bc.kdl"]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(d.join("all.csv")).unwrap(), b"my own notes\n");
    let stderr = text(&out.stderr);
    assert_fixture(
        "predict/refused.stderr",
        diagnostic(&stderr, "pipeline::predictions::refused"),
    );
    // Once moved away, the run writes it, and replaces what it wrote on the next change.
    std::fs::remove_file(d.join("all.csv")).unwrap();
    run(d, "bc.kdl");
    let manifest = std::fs::read_to_string(d.join("bc.kdl")).unwrap();
    std::fs::write(d.join("bc.kdl"), manifest.replace("epochs 30", "epochs 29")).unwrap();
    let report = run(d, "bc.kdl");
    assert_eq!(stage(&report, "all-rows")["status"], "ran");
}

/// A table with a header and text labels: `f0` … `f5` and `kind`, two classes told
/// apart by the sign of `f0 + f1 − f2`.
fn named_table(path: &Path, columns: &[&str], rows: usize, label: bool) {
    let mut out = columns.join(",");
    if label {
        out.push_str(",kind");
    }
    out.push('\n');
    let mut x = 7u64;
    for i in 0..rows {
        let mut values = BTreeMap::new();
        for j in 0..6 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            values.insert(format!("f{j}"), ((x >> 33) % 2000) as f64 / 100.0 - 10.0);
        }
        values.insert("id".into(), i as f64);
        let cells: Vec<String> = columns
            .iter()
            .map(|c| match c.strip_prefix("id") {
                Some(_) => format!("sample-{i}"),
                None => values[*c].to_string(),
            })
            .collect();
        out.push_str(&cells.join(","));
        if label {
            let kind = if values["f0"] + values["f1"] - values["f2"] > 0.0 {
                "up"
            } else {
                "down"
            };
            out.push(',');
            out.push_str(kind);
        }
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

const NAMED: &str = r#"pipeline "named"
seed 5
data {
    source "train.csv"
    header #true
    label "kind"
    scale "standard"
    split train=0.8 test=0.2
}
model {
    linear 16
    relu
    linear 2
}
loss "cross-entropy"
optimizer "adam" lr=1e-2
train epochs=20 batch-size=32
eval "labelled" {
    needs "train"
    source "labelled.csv"
    output "labelled-predictions.csv"
}
predict "new" {
    needs "train"
    source "new.csv"
    output "new-predictions.csv"
}
"#;

#[test]
fn a_predict_source_is_matched_by_column_name_and_predictions_name_the_classes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let features = ["f0", "f1", "f2", "f3", "f4", "f5"];
    named_table(&d.join("train.csv"), &features, 400, true);
    named_table(&d.join("labelled.csv"), &features, 60, true);
    // The same samples in another order of columns, with an id, without labels.
    named_table(
        &d.join("new.csv"),
        &["id", "f5", "f4", "f3", "f2", "f1", "f0"],
        60,
        false,
    );
    std::fs::write(d.join("named.kdl"), NAMED).unwrap();
    let report = run(d, "named.kdl");
    let (header, new) = table(&d.join("new-predictions.csv"));
    assert_eq!(header, ["row", "kind", "prob_down", "prob_up"]);
    let (_, labelled) = table(&d.join("labelled-predictions.csv"));
    assert_eq!(new, labelled);
    assert!(new.values().any(|v| v[0] == "up") && new.values().any(|v| v[0] == "down"));
    let accuracy = stage(&report, "labelled")["metrics"]["accuracy"]
        .as_f64()
        .unwrap();
    assert!(accuracy > 0.9, "{accuracy}");
    // `id` copies the source's id column after `row`, as written; the rest is the same.
    // An export names the columns its input is made of and its outputs stand for.
    let with_id = NAMED.replace(
        "    output \"new-predictions.csv\"\n",
        "    output \"new-predictions.csv\"\n    id \"id\"\n",
    ) + "checkpoint \"export\" needs=\"train\" path=\"model.safetensors\"\n";
    std::fs::write(d.join("named.kdl"), &with_id).unwrap();
    run(d, "named.kdl");
    let metadata: Value =
        serde_json::from_slice(&std::fs::read(d.join("model.json")).unwrap()).unwrap();
    assert_eq!(metadata["feature_columns"], serde_json::json!(features));
    assert_eq!(metadata["label_columns"], serde_json::json!(["kind"]));
    assert_eq!(metadata["classes"], serde_json::json!(["down", "up"]));
    let (header, identified) = table(&d.join("new-predictions.csv"));
    assert_eq!(header, ["row", "id", "kind", "prob_down", "prob_up"]);
    for (row, cells) in &identified {
        assert_eq!(cells[0], format!("sample-{row}"));
        assert_eq!(cells[1..], new[row][..]);
    }
    assert_eq!(identified.len(), new.len());
    // A column the source lacks is named at the run, located at `id`.
    std::fs::write(
        d.join("named.kdl"),
        with_id.replace("id \"id\"", "id \"key\""),
    )
    .unwrap();
    let out = pipeline(d, &["run", "named.kdl"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The diagnostic as one line, without the frame miette wraps it in.
    let words: Vec<&str> = stderr.split_whitespace().filter(|w| *w != "│").collect();
    let shown = words.join(" ");
    assert!(
        shown.contains("pipeline::predict::bad_id × ")
            && shown.contains("new.csv: cannot read the `id` column: the header has no column `key`; it has: id, f5, f4, f3, f2, f1, f0")
            && shown.contains("copied from the source"),
        "{shown}"
    );
    // Predictions as an array have no column for it: refused by check.
    let npy = with_id.replace("new-predictions.csv", "new-predictions.npy");
    std::fs::write(d.join("npy.kdl"), npy).unwrap();
    let out = pipeline(d, &["check", "npy.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fixture("predict-id-npy.check.stderr", &text(&out.stderr));
    // Nor has a source of arrays.
    let arrays = with_id.replace("source \"new.csv\"", "source \"new.npy\"");
    std::fs::write(d.join("arrays.kdl"), arrays).unwrap();
    let out = pipeline(d, &["check", "arrays.kdl"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("× `id \"id\"`: new.npy is not a table: it has no columns"),
        "{stderr}"
    );
}

#[test]
fn a_source_without_the_trainings_columns_or_with_a_missing_value_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let features = ["f0", "f1", "f2", "f3", "f4", "f5"];
    named_table(&d.join("train.csv"), &features, 200, true);
    named_table(&d.join("labelled.csv"), &features, 20, true);
    named_table(
        &d.join("new.csv"),
        &["f0", "f1", "f2", "f4", "f5"],
        20,
        false,
    );
    std::fs::write(d.join("named.kdl"), NAMED).unwrap();
    let out = pipeline(d, &["run", "named.kdl"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert_fixture(
        "predict/other-columns.stderr",
        diagnostic(&stderr, "pipeline::data::other_columns"),
    );
    assert!(!d.join("new-predictions.csv").exists());

    // A missing value: training does not fill them, and no sample is left out.
    named_table(&d.join("new.csv"), &features, 20, false);
    let new = std::fs::read_to_string(d.join("new.csv")).unwrap();
    let mut lines: Vec<String> = new.lines().map(String::from).collect();
    let mut cells: Vec<&str> = lines[3].split(',').collect();
    cells[2] = "";
    lines[3] = cells.join(",");
    std::fs::write(d.join("new.csv"), lines.join("\n") + "\n").unwrap();
    // A class the model never saw.
    let labelled = std::fs::read_to_string(d.join("labelled.csv")).unwrap();
    std::fs::write(
        d.join("labelled.csv"),
        labelled.replacen(",up\n", ",sideways\n", 1),
    )
    .unwrap();
    let out = pipeline(d, &["run", "named.kdl"]);
    let stderr = text(&out.stderr);
    assert_fixture(
        "predict/missing-value.stderr",
        diagnostic(&stderr, "pipeline::data::missing_value"),
    );
    assert_fixture(
        "predict/unknown-class.stderr",
        diagnostic(&stderr, "pipeline::data::unknown_class"),
    );
}

#[test]
fn regression_and_multi_label_predictions_and_metrics_are_named_by_their_label_columns() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rows = String::from("a,b,y1,y2\n");
    let mut bits = String::from("a,b,left,right\n");
    for i in 0..200 {
        let (a, b) = ((i % 20) as f64 / 10.0, (i / 20) as f64 / 5.0);
        rows.push_str(&format!("{a},{b},{},{}\n", 2.0 * a - b, a + b));
        bits.push_str(&format!(
            "{a},{b},{},{}\n",
            u8::from(a > 1.0),
            u8::from(b > 1.0)
        ));
    }
    std::fs::write(d.join("values.csv"), rows).unwrap();
    std::fs::write(d.join("bits.csv"), bits).unwrap();
    std::fs::write(d.join("new.csv"), "b,a\n0.5,1.5\n1.8,0.1\n").unwrap();
    let manifest = |source: &str, labels: &str, loss: &str, more: &str| {
        format!(
            r#"pipeline "{loss}"
seed 1
data {{
    source "{source}"
    header #true
    label {labels}
    split train=0.8 test=0.2
}}
model {{
    linear 32
    relu
    linear 2
}}
loss "{loss}"
optimizer "adam" lr=1e-2
train epochs=60 batch-size=32
predict "new" {{
    needs "train"
    source "new.csv"
    output "{loss}.csv"
}}
{more}
"#
        )
    };
    std::fs::write(
        d.join("values.kdl"),
        manifest("values.csv", r#""y1" "y2""#, "mse", ""),
    )
    .unwrap();
    std::fs::write(
        d.join("bits.kdl"),
        manifest(
            "bits.csv",
            r#""left" "right""#,
            "bce-with-logits",
            r#"eval "test" needs="train" { metrics "f1-macro" "recall-per-class" "auroc"; }"#,
        ),
    )
    .unwrap();
    run(d, "values.kdl");
    let (header, values) = table(&d.join("mse.csv"));
    assert_eq!(header, ["row", "y1", "y2"]);
    // (a, b) = (1.5, 0.5): y1 = 2.5, y2 = 2.0; (0.1, 1.8): y1 = −1.6, y2 = 1.9.
    let close = |text: &str, want: f64| (text.parse::<f64>().unwrap() - want).abs() < 0.3;
    assert!(
        close(&values[&0][0], 2.5) && close(&values[&0][1], 2.0),
        "{values:?}"
    );
    assert!(
        close(&values[&1][0], -1.6) && close(&values[&1][1], 1.9),
        "{values:?}"
    );
    let report = run(d, "bits.kdl");
    // Multi-label metrics, per label by its name (scikit-learn's: `tests/e2e/metrics.rs`).
    let metrics = &stage(&report, "test")["metrics"];
    for name in [
        "f1-macro",
        "recall-per-class.left",
        "recall-per-class.right",
        "auroc",
    ] {
        let value = metrics[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: {metrics}"));
        assert!(value > 0.8 && value <= 1.0, "{name}: {metrics}");
    }
    let (header, bits) = table(&d.join("bce-with-logits.csv"));
    assert_eq!(header, ["row", "left", "right", "prob_left", "prob_right"]);
    assert_eq!(bits[&0][..2], ["1", "0"], "{bits:?}");
    assert_eq!(bits[&1][..2], ["0", "1"], "{bits:?}");
    let p: f64 = bits[&0][2].parse().unwrap();
    assert!(p > 0.5 && p <= 1.0, "{bits:?}");
}

#[test]
fn check_locates_what_a_predict_or_eval_source_cannot_be() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for file in ["data.csv", "new.csv", "new.npy", "new.txt"] {
        std::fs::write(d.join(file), "1,2,0\n").unwrap();
    }
    std::fs::write(
        d.join("bad.kdl"),
        r#"pipeline "bad"
data "data.csv"
model { linear 2; }
loss "cross-entropy"
optimizer "adam"
train
eval "both" {
    needs "train"
    split "val"
    source "new.npy"
}
predict "text" {
    needs "train"
    source "new.txt"
    output "out.parquet"
}
predict "over-data" {
    needs "train"
    source "new.csv"
    output "data.csv"
}
predict "nothing"
predict "same" {
    needs "train"
    source "new.csv"
    output "out.csv"
}
eval "same-too" {
    needs "train"
    source "new.csv"
    output "out.csv"
}
"#,
    )
    .unwrap();
    let out = pipeline(d, &["check", "bad.kdl"]);
    assert!(!out.status.success());
    assert_fixture("predict/check.stderr", &text(&out.stderr));
}
