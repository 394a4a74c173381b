//! End-to-end tests of tables with columns of text and of dates, with the real binary: a
//! column of dates gives its parts as numbers (compared with Python's `datetime`); a column
//! of text is categorical without being declared (one-hot, its values the training split's),
//! a column of codes is one when named, by index as an input of its own; missing values
//! and values not seen in training; `check` saying what the run will do; and the whole
//! encoding compared with scikit-learn's (`SimpleImputer`, `StandardScaler`,
//! `OneHotEncoder(handle_unknown="ignore")` fitted on the same training rows) through
//! the exported model's predictions.

use crate::common::{assert_fixture, checkpoint_metadata, draws, pipeline, py, refused, text};
use serde_json::Value;
use std::path::Path;

/// A species table of `rows` rows as people keep them: the label first, two columns of
/// text (`island`, `sex`, which has `NA`s), four measurements (one with gaps); `islands`
/// names the islands drawn from.
fn penguins(path: &Path, rows: usize, seed: u64, islands: &[&str]) {
    let mut next = draws(seed);
    let mut out = String::from("species,island,bill_length,bill_depth,flipper,body_mass,sex\n");
    for i in 0..rows {
        let s = i % 3;
        let species = ["Adelie", "Chinstrap", "Gentoo"][s];
        // Each species mostly on an island of its own.
        let island = if next() < 0.8 {
            islands[s % islands.len()]
        } else {
            islands[(next() * islands.len() as f64) as usize % islands.len()]
        };
        let bill = 38.0 + 5.0 * s as f64 + 3.0 * next();
        let bill = if next() < 0.05 {
            "NA".to_string()
        } else {
            format!("{bill:.1}")
        };
        let depth = 18.0 - 1.5 * s as f64 + 2.0 * next();
        let flipper = 190.0 + 10.0 * s as f64 + 8.0 * next();
        let mass = 3500.0 + 600.0 * s as f64 + 400.0 * next();
        let sex = match next() {
            x if x < 0.08 => "NA",
            x if x < 0.54 => "female",
            _ => "male",
        };
        out += &format!("{species},{island},{bill},{depth:.1},{flipper:.0},{mass:.0},{sex}\n");
    }
    std::fs::write(path, out).unwrap();
}

const ISLANDS: &[&str] = &["Torgersen", "Dream", "Biscoe"];

const MANIFEST: &str = r#"pipeline "penguins"
seed 5
data "penguins.csv" {
    header #true
    label "species"
    missing "median"
    scale "standard"
    split train=0.6 val=0.2 test=0.2
}
model {
    linear 16
    relu
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=1e-2
train epochs=30 batch-size=32
eval "score" {
    needs "train"
    split "test"
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

/// `pipeline run MANIFEST --json`, which must succeed: its report, and what it said on
/// stderr.
fn run(dir: &Path, manifest: &str) -> (Value, String) {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        text(&out.stderr),
    )
}

#[test]
fn columns_of_text_train_and_predict_as_scikit_learn_encodes_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    penguins(&d.join("penguins.csv"), 300, 1, ISLANDS);
    // New rows: two islands the training never saw.
    penguins(
        &d.join("new.csv"),
        40,
        2,
        &["Torgersen", "Dream", "Biscoe", "Atlantis"],
    );
    std::fs::write(d.join("penguins.kdl"), MANIFEST).unwrap();

    let out = pipeline(d, &["check", "penguins.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "ok: penguins.kdl (4 stages)\n  data: 4 numeric features; categorical: island (one-hot, 3 values), sex (one-hot, 2 values), as the first 100 rows show\n"
    );

    let (report, stderr) = run(d, "penguins.kdl");
    let unseen = stderr
        .lines()
        .find(|l| l.contains("not seen in training"))
        .unwrap_or_else(|| panic!("no warning of unseen values: {stderr}"));
    let atlantis = std::fs::read_to_string(d.join("new.csv"))
        .unwrap()
        .matches(",Atlantis,")
        .count();
    assert!(atlantis > 0);
    assert_eq!(
        unseen,
        format!(
            "warning[pipeline::data::unseen_category]: {atlantis} samples of new.csv had a value of `island` not seen in training"
        )
    );
    let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.9, "{accuracy}");

    let meta = checkpoint_metadata(d, &report, 2);
    assert_eq!(
        meta["feature_columns"],
        serde_json::json!([
            "island",
            "bill_length",
            "bill_depth",
            "flipper",
            "body_mass",
            "sex"
        ])
    );
    assert_eq!(meta["categorical"][0]["column"], "island");
    assert_eq!(meta["categorical"][0]["encoding"], "one-hot");
    assert_eq!(meta["input_shape"], serde_json::json!([9]));

    // scikit-learn, fitted on the same training rows, encodes the new rows; the exported
    // model applied to them gives the predictions the run wrote.
    let export = report["stages"][2]["outputs"][0].as_str().unwrap();
    let metadata = report["stages"][2]["outputs"][1].as_str().unwrap();
    let split = format!("{}/split.json", report["run_dir"].as_str().unwrap());
    let worst = py(
        d,
        &format!(
            r#"
import csv, json, numpy as np, torch
from safetensors.torch import load_file
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
def table(path):
    rows = list(csv.DictReader(open(path)))
    numeric = ["bill_length", "bill_depth", "flipper", "body_mass"]
    X = np.array([[float("nan") if r[c] == "NA" else float(r[c]) for c in numeric] for r in rows])
    C = np.array([[r[c] if r[c] != "NA" else np.nan for c in ["island", "sex"]] for r in rows], dtype=object)
    return np.concatenate([X.astype(object), C], axis=1)
meta = json.load(open({metadata:?}))
train = json.load(open({split:?}))["train"]
encode = ColumnTransformer([
    ("numbers", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), [0, 1, 2, 3]),
    ("categories", make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder(handle_unknown="ignore")), [4, 5]),
])
encode.fit(table("penguins.csv")[train])
categories = encode.named_transformers_["categories"][-1].categories_
names = ["bill_length", "bill_depth", "flipper", "body_mass"] + [f"{{c}}={{v}}" for c, values in zip(["island", "sex"], categories) for v in values]
assert names == meta["input_columns"], (names, meta["input_columns"])
assert [list(c) for c in categories] == [v["values"] for v in meta["categorical"]]
sd = load_file({export:?})
model = torch.nn.Sequential(torch.nn.Linear(9, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
model.load_state_dict({{"0.weight": sd["0.weight"], "0.bias": sd["0.bias"], "2.weight": sd["2.weight"], "2.bias": sd["2.bias"]}})
x = torch.tensor(np.asarray(encode.transform(table("new.csv")), dtype=np.float32))
with torch.no_grad():
    probs = torch.softmax(model(x), 1).numpy()
rows = list(csv.DictReader(open("new-predictions.csv")))
ours = np.array([[float(r["prob_" + c]) for c in meta["classes"]] for r in rows])
print(float(np.abs(ours - probs).max()))
"#
        ),
    );
    let worst: f64 = worst.trim().parse().unwrap();
    eprintln!("test accuracy {accuracy}; predictions against scikit-learn's encoding: {worst:e}");
    assert!(worst < 1e-5, "{worst}");
}

#[test]
fn a_column_of_codes_named_by_index_is_an_input_an_embedding_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Islands as codes (numbers): only `categorical` makes them categories.
    penguins(&d.join("penguins.csv"), 300, 3, &["11", "12", "13"]);
    let manifest = r#"pipeline "codes"
data "penguins.csv" {
    header #true
    label "species"
    features "bill_length" "bill_depth" "flipper" "body_mass" "island"
    missing "drop-row"
    scale "standard"
    categorical "island" encoding="index"
}
model {
    parallel {
        branch {
            linear 8
        }
        branch input="island" {
            embedding 3 4
            flatten
        }
    }
    relu
    linear 3
}
loss "cross-entropy"
optimizer "adam" lr=1e-2
train epochs=20 batch-size=32
checkpoint "export" {
    needs "train"
}
"#;
    std::fs::write(d.join("codes.kdl"), manifest).unwrap();
    // Three codes and the id 0 for none: an embedding of 3 ids is one short.
    let stderr = refused(d, &["run", "codes.kdl"], 1);
    assert!(
        stderr.contains("the input `island` holds token id 3, but `embedding 3` takes ids below 3"),
        "{stderr}"
    );
    std::fs::write(
        d.join("codes.kdl"),
        manifest.replace("embedding 3 4", "embedding 4 4"),
    )
    .unwrap();
    let (report, _) = run(d, "codes.kdl");
    let meta = checkpoint_metadata(d, &report, 1);
    assert_eq!(meta["inputs"], serde_json::json!(["features", "island"]));
    assert_eq!(
        meta["categorical"],
        serde_json::json!([{"column": "island", "encoding": "index", "input": "island", "values": ["11", "12", "13"]}])
    );
    assert_eq!(meta["input_shape"], serde_json::json!([4]));
}

#[test]
fn text_after_numbers_too_many_values_and_an_undeclared_header_are_refused_where_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifest = r#"pipeline "t"
data "t.csv" {
    header #true
    label "y"
}
model {
    linear 2
}
loss "cross-entropy"
optimizer "adam"
train epochs=1
"#;
    std::fs::write(d.join("t.kdl"), manifest).unwrap();
    // A column of numbers with a text further down.
    let mut rows = String::from("a,b,y\n");
    for i in 0..150 {
        let b = if i == 120 {
            "n/a?".to_string()
        } else {
            i.to_string()
        };
        rows += &format!("{i},{b},{}\n", i % 2);
    }
    std::fs::write(d.join("t.csv"), &rows).unwrap();
    // `check` reads 100 rows: line 122 is the run's to find.
    let out = pipeline(d, &["check", "t.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_fixture(
        "categorical-text-after-numbers.run.stderr",
        &refused(d, &["run", "t.kdl"], 1),
    );
    // An id column: as many values as rows.
    let mut rows = String::from("name,b,y\n");
    for i in 0..150 {
        rows += &format!("penguin-{i},{i},{}\n", i % 2);
    }
    std::fs::write(d.join("t.csv"), &rows).unwrap();
    assert_fixture(
        "categorical-too-many.check.stderr",
        &refused(d, &["check", "t.kdl"], 1),
    );
    assert_fixture(
        "categorical-too-many.run.stderr",
        &refused(d, &["run", "t.kdl"], 1),
    );
    // Allowed, it trains.
    std::fs::write(
        d.join("t.kdl"),
        manifest.replace(
            "    label \"y\"\n",
            "    label \"y\"\n    max-categories 200\n",
        ),
    )
    .unwrap();
    run(d, "t.kdl");
    // A header, not declared.
    std::fs::write(
        d.join("t.kdl"),
        manifest.replace(
            "    header #true\n    label \"y\"\n",
            "    label \"last\"\n",
        ),
    )
    .unwrap();
    assert_fixture(
        "categorical-header-not-declared.check.stderr",
        &refused(d, &["check", "t.kdl"], 1),
    );
    // Ids are one column's, each an input of its own.
    std::fs::write(
        d.join("t.kdl"),
        manifest.replace(
            "    label \"y\"\n",
            "    label \"y\"\n    categorical \"0..2\" encoding=\"index\"\n    categorical \"b\" input=\"b\"\n",
        ),
    )
    .unwrap();
    assert_fixture(
        "categorical-bad-nodes.check.stderr",
        &refused(d, &["check", "t.kdl"], 1),
    );
}

/// A weather table as people keep it: a date, a station's name, two measurements (one
/// with gaps) and whether it rained; `days` days from 2023-01-01, `stations` drawn from.
fn weather(path: &Path, days: usize, seed: u64, stations: &[&str]) {
    let mut next = draws(seed);
    let mut out = String::from("date,station,temp,humidity,rain\n");
    for day in 0..days {
        // Days of 2023 and on (every month has 28 days or more).
        let (mut month, mut d, mut year) = (1, day + 1, 2023);
        let lengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        while d > lengths[month - 1] {
            d -= lengths[month - 1];
            month += 1;
            if month > 12 {
                month = 1;
                year += 1;
            }
        }
        let station = stations[(next() * stations.len() as f64) as usize % stations.len()];
        let humidity = 40.0 + 50.0 * next();
        let temp =
            10.0 + 12.0 * ((month as f64 - 1.0) / 11.0 * std::f64::consts::PI).sin() + 4.0 * next();
        let temp = if next() < 0.04 {
            "NA".to_string()
        } else {
            format!("{temp:.1}")
        };
        let rain = if humidity > 70.0 || (month <= 3 && humidity > 55.0) {
            "yes"
        } else {
            "no"
        };
        let date = if day % 2 == 0 {
            format!("{year}-{month:02}-{d:02}")
        } else {
            format!("{year}/{month:02}/{d:02} 06:30:00")
        };
        out += &format!("{date},{station},{temp},{humidity:.1},{rain}\n");
    }
    std::fs::write(path, out).unwrap();
}

const WEATHER: &str = r#"pipeline "weather"
seed 3
data "weather.csv" {
    header #true
    label "rain"
    missing "median"
    scale "standard"
    split train=0.7 test=0.3 stratify=#true
}
model {
    linear 16
    relu
    linear 2
}
loss "cross-entropy"
optimizer "adam" lr=1e-2
train epochs=40 batch-size=32
eval "score" {
    needs "train"
    split "test"
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

#[test]
fn a_column_of_dates_gives_the_parts_python_reads_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    weather(&d.join("weather.csv"), 365, 1, &["north", "east", "south"]);
    weather(&d.join("new.csv"), 60, 2, &["north", "east", "south"]);
    std::fs::write(d.join("weather.kdl"), WEATHER).unwrap();
    let out = pipeline(d, &["check", "weather.kdl"]);
    assert_eq!(
        text(&out.stderr),
        "ok: weather.kdl (4 stages)\n  data: 5 numeric features; dates: date (year, month, day-of-year); categorical: station (one-hot, 3 values), as the first 100 rows show\n"
    );
    let (report, _) = run(d, "weather.kdl");
    let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.8, "{accuracy}");
    let meta = checkpoint_metadata(d, &report, 2);
    assert_eq!(
        meta["dates"],
        serde_json::json!([{"column": "date", "parts": ["year", "month", "day-of-year"]}])
    );
    // Python's datetime gives the parts; scikit-learn fills, scales and encodes as the
    // run did; the exported model on them gives the run's predictions.
    let export = report["stages"][2]["outputs"][0].as_str().unwrap();
    let metadata = report["stages"][2]["outputs"][1].as_str().unwrap();
    let split = format!("{}/split.json", report["run_dir"].as_str().unwrap());
    let worst = py(
        d,
        &format!(
            r#"
import csv, json, numpy as np, torch
from datetime import datetime
from safetensors.torch import load_file
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
def when(text):
    for form in ("%Y-%m-%d", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(text, form)
        except ValueError:
            pass
def table(path):
    rows = list(csv.DictReader(open(path)))
    X = np.array([[when(r["date"]).year, when(r["date"]).month, when(r["date"]).timetuple().tm_yday,
                   float("nan") if r["temp"] == "NA" else float(r["temp"]), float(r["humidity"])] for r in rows])
    return np.concatenate([X.astype(object), np.array([[r["station"]] for r in rows], dtype=object)], axis=1)
meta = json.load(open({metadata:?}))
assert meta["input_columns"][:5] == ["date.year", "date.month", "date.day-of-year", "temp", "humidity"], meta["input_columns"]
train = json.load(open({split:?}))["train"]
encode = ColumnTransformer([
    ("numbers", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), [0, 1, 2, 3, 4]),
    ("categories", OneHotEncoder(handle_unknown="ignore"), [5]),
])
encode.fit(table("weather.csv")[train])
sd = load_file({export:?})
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
model.load_state_dict({{"0.weight": sd["0.weight"], "0.bias": sd["0.bias"], "2.weight": sd["2.weight"], "2.bias": sd["2.bias"]}})
x = torch.tensor(np.asarray(encode.transform(table("new.csv")), dtype=np.float32))
with torch.no_grad():
    probs = torch.softmax(model(x), 1).numpy()
rows = list(csv.DictReader(open("new-predictions.csv")))
ours = np.array([[float(r["prob_" + c]) for c in meta["classes"]] for r in rows])
print(float(np.abs(ours - probs).max()))
"#
        ),
    );
    let worst: f64 = worst.trim().parse().unwrap();
    eprintln!("test accuracy {accuracy}; predictions against Python's dates: {worst:e}");
    assert!(worst < 1e-5, "{worst}");

    // Named parts; a part that is none, and a column of dates with a bad one, refused.
    std::fs::write(
        d.join("weather.kdl"),
        WEATHER.replace(
            "    label \"rain\"\n",
            "    label \"rain\"\n    date \"date\" parts=\"day-of-week weekday\"\n",
        ),
    )
    .unwrap();
    assert_fixture(
        "date-bad-part.check.stderr",
        &refused(d, &["check", "weather.kdl"], 1),
    );
    std::fs::write(d.join("weather.kdl"), WEATHER).unwrap();
    let table = std::fs::read_to_string(d.join("weather.csv")).unwrap();
    std::fs::write(
        d.join("weather.csv"),
        table.replacen("2023-01-05", "2023-01-35", 1),
    )
    .unwrap();
    assert_fixture(
        "date-not-a-date.check.stderr",
        &refused(d, &["check", "weather.kdl"], 1),
    );
}

/// A Parquet file's columns of text are categories as a CSV's are: the species table
/// written by pyarrow (text columns with nulls, a measurement with gaps) trains exactly
/// as the same CSV, with the same vocabularies.
#[test]
fn a_parquet_files_text_columns_are_categories_as_a_csvs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    penguins(&d.join("penguins.csv"), 300, 1, ISLANDS);
    penguins(
        &d.join("new.csv"),
        40,
        2,
        &["Torgersen", "Dream", "Biscoe", "Atlantis"],
    );
    py(
        d,
        "import csv, pyarrow as pa, pyarrow.parquet as pq\n\
         for name in ['penguins', 'new']:\n\
         \x20   rows = list(csv.DictReader(open(name + '.csv')))\n\
         \x20   text = lambda c: [None if r[c] == 'NA' else r[c] for r in rows]\n\
         \x20   number = lambda c: [None if r[c] == 'NA' else float(r[c]) for r in rows]\n\
         \x20   cols = {'species': text('species'), 'island': text('island')}\n\
         \x20   cols.update({c: number(c) for c in ['bill_length', 'bill_depth', 'flipper', 'body_mass']})\n\
         \x20   cols['sex'] = text('sex')\n\
         \x20   pq.write_table(pa.table(cols), name + '.parquet', row_group_size=64)\n",
    );
    std::fs::write(d.join("penguins.kdl"), MANIFEST).unwrap();
    let (csv, _) = run(d, "penguins.kdl");
    let predictions = || std::fs::read_to_string(d.join("new-predictions.csv")).unwrap();
    let csv_predictions = predictions();
    std::fs::write(
        d.join("penguins.kdl"),
        MANIFEST
            .replace("\"penguins.csv\"", "\"penguins.parquet\"")
            .replace("\"new.csv\"", "\"new.parquet\"")
            // A Parquet file's columns are named by its schema.
            .replace("    header #true\n", ""),
    )
    .unwrap();
    // `check` reads the first rows, as a CSV's, to say what the run will do.
    let out = pipeline(d, &["check", "penguins.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "ok: penguins.kdl (4 stages)\n  data: 4 numeric features; categorical: island (one-hot, 3 values), sex (one-hot, 2 values), as the first 100 rows show\n"
    );
    let (parquet, stderr) = run(d, "penguins.kdl");
    assert!(
        stderr.contains("had a value of `island` not seen in training"),
        "{stderr}"
    );
    assert_eq!(
        csv["stages"][1]["metrics"], parquet["stages"][1]["metrics"],
        "the same table trains the same"
    );
    let (a, b) = (
        checkpoint_metadata(d, &csv, 2),
        checkpoint_metadata(d, &parquet, 2),
    );
    assert_eq!(a["categorical"], b["categorical"]);
    assert_eq!(a["input_columns"], b["input_columns"]);
    // The same predictions, `row` for `row`.
    assert_eq!(predictions(), csv_predictions);
}

/// A Parquet file's dates are dates as a CSV's are: the weather table written by pyarrow
/// with its dates as timestamps of nanoseconds (as pandas writes them), the file to
/// predict with dates of days (`date32`), trains and predicts exactly as the CSVs.
#[test]
fn a_parquet_files_dates_and_timestamps_give_the_parts_a_csvs_give() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stations = ["north", "east", "south"];
    weather(&d.join("weather.csv"), 365, 1, &stations);
    weather(&d.join("new.csv"), 60, 2, &stations);
    py(
        d,
        "import csv, datetime, pyarrow as pa, pyarrow.parquet as pq\n\
         def when(text):\n\
         \x20   text = text.replace('/', '-')\n\
         \x20   return datetime.datetime.fromisoformat(text) if ' ' in text else datetime.datetime.fromisoformat(text + ' 00:00:00')\n\
         for name, kind in [('weather', pa.timestamp('ns')), ('new', pa.date32())]:\n\
         \x20   rows = list(csv.DictReader(open(name + '.csv')))\n\
         \x20   dates = [when(r['date']) for r in rows]\n\
         \x20   if kind == pa.date32():\n\
         \x20       dates = [t.date() for t in dates]\n\
         \x20   cols = {\n\
         \x20       'date': pa.array(dates, type=kind),\n\
         \x20       'station': [r['station'] for r in rows],\n\
         \x20       'temp': [None if r['temp'] == 'NA' else float(r['temp']) for r in rows],\n\
         \x20       'humidity': [float(r['humidity']) for r in rows],\n\
         \x20       'rain': [r['rain'] for r in rows],\n\
         \x20   }\n\
         \x20   pq.write_table(pa.table(cols), name + '.parquet', row_group_size=100)\n",
    );
    std::fs::write(d.join("weather.kdl"), WEATHER).unwrap();
    let (csv, _) = run(d, "weather.kdl");
    let predictions = || std::fs::read_to_string(d.join("new-predictions.csv")).unwrap();
    let csv_predictions = predictions();
    std::fs::write(
        d.join("weather.kdl"),
        WEATHER
            .replace("\"weather.csv\"", "\"weather.parquet\"")
            .replace("\"new.csv\"", "\"new.parquet\"")
            .replace("    header #true\n", ""),
    )
    .unwrap();
    let (parquet, _) = run(d, "weather.kdl");
    assert_eq!(csv["stages"][1]["metrics"], parquet["stages"][1]["metrics"]);
    let (a, b) = (
        checkpoint_metadata(d, &csv, 2),
        checkpoint_metadata(d, &parquet, 2),
    );
    assert_eq!(a["dates"], b["dates"]);
    assert_eq!(a["input_columns"], b["input_columns"]);
    assert_eq!(predictions(), csv_predictions);

    // The dates kept as text, as the CSV writes them: found to be dates, as a CSV's are.
    py(
        d,
        "import csv, pyarrow as pa, pyarrow.parquet as pq\n\
         for name in ['weather', 'new']:\n\
         \x20   rows = list(csv.DictReader(open(name + '.csv')))\n\
         \x20   cols = {\n\
         \x20       'date': [r['date'] for r in rows],\n\
         \x20       'station': [r['station'] for r in rows],\n\
         \x20       'temp': [None if r['temp'] == 'NA' else float(r['temp']) for r in rows],\n\
         \x20       'humidity': [float(r['humidity']) for r in rows],\n\
         \x20       'rain': [r['rain'] for r in rows],\n\
         \x20   }\n\
         \x20   pq.write_table(pa.table(cols), name + '.parquet', row_group_size=100)\n",
    );
    let (text, _) = run(d, "weather.kdl");
    assert_eq!(csv["stages"][1]["metrics"], text["stages"][1]["metrics"]);
    let b = checkpoint_metadata(d, &text, 2);
    assert_eq!(a["dates"], b["dates"]);
    assert_eq!(a["input_columns"], b["input_columns"]);
    assert_eq!(predictions(), csv_predictions);
}
