//! End-to-end tests of time-series windows (`data.window`), with the real binary: a
//! series trains a GRU on windows of its rows, split in time order; the test metrics and
//! the predictions (one per complete window of a new series, named by its last row's id)
//! are recomputed in PyTorch from the exported weights (the GRU twin of `docs/models.md`),
//! windows cut with numpy and scaled with scikit-learn on the training windows' rows; what
//! cannot be windowed is refused where it is written.

use crate::common::{
    assert_fixture, checkpoint_metadata, draws, pipeline, py, refused, root, split_json, text,
};
use serde_json::Value;
use std::path::Path;

/// A daily series of `days` rows: an electricity load with a weekly and a yearly cycle,
/// driven by the temperature, and some noise; `day` names the row.
fn series(path: &Path, days: usize, seed: u64) {
    let mut next = draws(seed);
    let mut out = String::from("day,load,temp\n");
    let mut load: f64 = 100.0;
    for t in 0..days {
        let year = (t as f64 * std::f64::consts::TAU / 365.0).sin();
        let week = (t as f64 * std::f64::consts::TAU / 7.0).sin();
        let temp = 12.0 - 10.0 * year + 3.0 * (next() - 0.5);
        load = 0.6 * load + 0.4 * (100.0 + 2.5 * (12.0 - temp) + 8.0 * week) + 2.0 * (next() - 0.5);
        out += &format!("d{t},{load:.3},{temp:.2}\n");
    }
    std::fs::write(path, out).unwrap();
}

const MANIFEST: &str = r#"pipeline "load"
seed 4
data "load.csv" {
    header #true
    features "load" "temp"
    label "load"
    scale "standard"
    scale-label "standard"
    window length=14 horizon=2 stride=1
    split train=0.7 val=0.15 test=0.15
}
model {
    gru 24 output="last"
    linear 1
}
loss "mse"
optimizer "adam" lr=1e-2
train epochs=25 batch-size=32
eval "score" {
    needs "train"
    split "test"
    metrics "mse" "r2"
}
checkpoint "export" {
    needs "train"
}
predict "next" {
    needs "train"
    source "recent.csv"
    output "forecast.csv"
    id "day"
}
"#;

#[test]
fn windows_split_in_time_order_train_a_gru_and_predict_every_complete_window() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    series(&d.join("load.csv"), 500, 1);
    series(&d.join("recent.csv"), 40, 2);
    std::fs::write(d.join("load.kdl"), MANIFEST).unwrap();

    let out = pipeline(d, &["check", "load.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = pipeline(d, &["run", "load.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let metrics = &report["stages"][1]["metrics"];
    assert!(metrics["r2"].as_f64().unwrap() > 0.7, "{metrics}");
    let meta = checkpoint_metadata(d, &report, 2);
    assert_eq!(meta["input_shape"], serde_json::json!([14, 2]));

    // 500 rows make 500 − 14 − 2 + 1 = 485 windows: 340 train, 73 val, 72 test, each
    // named by its last row, in time order.
    let split = split_json(d, &report);
    let rows = |s: &str| -> Vec<u64> {
        split[s]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap())
            .collect()
    };
    let (train, val, test) = (rows("train"), rows("val"), rows("test"));
    assert_eq!((train.len(), val.len(), test.len()), (340, 73, 72));
    assert_eq!(train, (13..353).collect::<Vec<u64>>());
    assert_eq!(val, (353..426).collect::<Vec<u64>>());
    assert_eq!(test, (426..498).collect::<Vec<u64>>());

    let export = report["stages"][2]["outputs"][0].as_str().unwrap();
    let metadata = report["stages"][2]["outputs"][1].as_str().unwrap();
    let docs = root().join("docs/models.md");
    let out = py(
        d,
        &format!(
            r#"
import csv, json, re, numpy as np, torch
from torch import nn
from safetensors.torch import load_file
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.preprocessing import StandardScaler
space = {{"nn": nn, "torch": torch}}
exec(re.search(r"```python\n(# twins.*?)```", open({docs:?}).read(), re.S).group(1), space)
model = nn.Sequential(space["GRU"](2, 24, output="last"), nn.Linear(24, 1))
model.load_state_dict(load_file({export:?}), strict=True)
model.eval()
meta = json.load(open({metadata:?}))
def table(path):
    rows = list(csv.DictReader(open(path)))
    return np.array([[float(r["load"]), float(r["temp"])] for r in rows]), [r["day"] for r in rows]
X, _ = table("load.csv")
L, H = 14, 2
# The training windows start at 0 … 339 and read rows 0 … 352.
features = StandardScaler().fit(X[:353])
labels = StandardScaler().fit(X[L - 1 + H:340 + L - 1 + H, :1])
assert np.allclose(meta["label_scaling"]["add"], labels.mean_, rtol=1e-6)
def predict(x, starts):
    windows = np.stack([features.transform(x)[s:s + L] for s in starts])
    with torch.no_grad():
        out = model(torch.tensor(windows, dtype=torch.float32)).double().numpy()
    return labels.inverse_transform(out)[:, 0]
test = range(340 + 73, 485)
truth = np.array([X[s + L - 1 + H, 0] for s in test])
ours = predict(X, test)
print(json.dumps({{"mse": mean_squared_error(truth, ours), "r2": r2_score(truth, ours)}}))
Xn, days = table("recent.csv")
starts = range(len(Xn) - L + 1)
written = list(csv.DictReader(open("forecast.csv")))
assert [r["day"] for r in written] == [days[s + L - 1] for s in starts], [r["day"] for r in written]
ours = np.array([float(r["load"]) for r in written])
print(float(np.abs(ours / predict(Xn, starts) - 1).max()))
"#
        ),
    );
    let mut lines = out.lines();
    let torch: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let worst: f64 = lines.next().unwrap().trim().parse().unwrap();
    for name in ["mse", "r2"] {
        let (ours, theirs) = (
            metrics[name].as_f64().unwrap(),
            torch[name].as_f64().unwrap(),
        );
        assert!(
            (ours - theirs).abs() <= 1e-5 * theirs.abs().max(1.0),
            "{name}: pipeline {ours}, PyTorch {theirs}"
        );
    }
    eprintln!("test metrics {metrics}; forecasts against PyTorch's, relative: {worst:e}");
    assert!(worst < 1e-5, "{worst}");
}

#[test]
fn what_is_not_a_series_of_rows_is_refused_where_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    series(&d.join("load.csv"), 15, 1);
    let shuffled = MANIFEST.replace(
        "split train=0.7 val=0.15 test=0.15",
        "missing \"drop-row\"\n    split train=0.7 val=0.15 test=0.15",
    );
    std::fs::write(d.join("load.kdl"), shuffled).unwrap();
    let stderr = refused(d, &["check", "load.kdl"], 1);
    assert_fixture("window-drop-row.check.stderr", &stderr);

    // 15 rows hold no window of 14 rows with a label 2 rows after it.
    std::fs::write(d.join("load.kdl"), MANIFEST).unwrap();
    series(&d.join("recent.csv"), 20, 2);
    let stderr = refused(d, &["run", "load.kdl"], 1);
    assert!(
        stderr.contains("load.csv: 15 rows make no window of 14 rows and a label 2 rows after it"),
        "{stderr}"
    );
    assert!(stderr.contains("pipeline::data::no_window"), "{stderr}");
}

/// The rows of the series `file` with a date for `day`, in the file's order or shuffled.
fn dated(file: &Path, shuffled: bool) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header = lines.remove(0);
    let first = 19_723; // 2024-01-01, in days since 1970
    for (t, line) in lines.iter_mut().enumerate() {
        let (_, rest) = line.split_once(',').unwrap();
        let date = days_to_date(first + t as i64);
        *line = format!("{date},{rest}");
    }
    if shuffled {
        // A fixed shuffle: every 7th row first, then the rest backwards.
        let (sevens, rest): (Vec<_>, Vec<_>) =
            lines.into_iter().enumerate().partition(|(i, _)| i % 7 == 0);
        lines = sevens
            .into_iter()
            .chain(rest.into_iter().rev())
            .map(|(_, l)| l)
            .collect();
    }
    format!("{header}\n{}\n", lines.join("\n"))
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (civil from days, H. Hinnant's).
fn days_to_date(z: i64) -> String {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!("{year:04}-{month:02}-{day:02}")
}

#[test]
fn a_time_column_orders_shuffled_rows_as_the_sorted_file_has_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    series(&d.join("load.csv"), 300, 3);
    series(&d.join("recent.csv"), 20, 4);
    std::fs::write(d.join("recent.csv"), dated(&d.join("recent.csv"), true)).unwrap();
    let manifest = MANIFEST
        .replace("stride=1", "stride=1 time=\"day\"")
        .replace("    id \"day\"\n", "");
    let mut reports = Vec::new();
    for shuffled in [false, true] {
        let file = dated(&d.join("load.csv"), shuffled);
        std::fs::write(d.join("dated.csv"), &file).unwrap();
        std::fs::write(
            d.join("load.kdl"),
            manifest.replace("\"load.csv\"", "\"dated.csv\""),
        )
        .unwrap();
        let out = pipeline(d, &["run", "load.kdl", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        // Each split's windows, by the date of their last row.
        let dates: Vec<&str> = file.lines().skip(1).map(|l| &l[..10]).collect();
        let split = split_json(d, &report);
        let of = |s: &str| -> Vec<String> {
            let rows = split[s].as_array().unwrap();
            rows.iter()
                .map(|r| dates[r.as_u64().unwrap() as usize].to_string())
                .collect()
        };
        let (train, val, test) = (of("train"), of("val"), of("test"));
        assert!(train.last() < val.first() && val.last() < test.first());
        assert!(train.windows(2).all(|w| w[0] < w[1]), "in time order");
        reports.push((report["stages"][1]["metrics"].clone(), train, val, test));
    }
    let (sorted, shuffled) = (&reports[0], &reports[1]);
    assert_eq!(
        (&sorted.1, &sorted.2, &sorted.3),
        (&shuffled.1, &shuffled.2, &shuffled.3)
    );
    // The same windows; the statistics summed in another order may differ in the last bits.
    let (a, b) = (
        sorted.0["mse"].as_f64().unwrap(),
        shuffled.0["mse"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-3 * a, "{a} against {b}");

    // A date missing from a row is named.
    let file = dated(&d.join("load.csv"), true);
    let mut lines: Vec<&str> = file.lines().collect();
    let second = format!(",{}", lines[2].split_once(',').unwrap().1);
    lines[2] = &second;
    std::fs::write(d.join("dated.csv"), lines.join("\n")).unwrap();
    let stderr = refused(d, &["run", "load.kdl"], 1);
    assert_fixture("window-bad-time.run.stderr", &stderr);
}
