//! End-to-end tests of tabular data as files really are, with the real binary: the
//! scikit-learn wheel's CSVs as shipped (a metadata line, spaces, features and target in
//! two files), text labels, missing values, stratified splits, the split written to the
//! run directory; and the metrics recomputed by scikit-learn from the checkpoint and
//! that split (in the project's torch venv), so that anyone can rebuild them.

use crate::common;

use crate::common::{assert_fixture, pipeline, py, root, text};
use serde_json::Value;
use std::path::Path;

/// A directory with `example`'s manifest and the data files it reads.
fn example(example: &str, files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    for file in files {
        let from = root().join("examples/data").join(file);
        std::fs::copy(&from, dir.path().join("data").join(file))
            .unwrap_or_else(|_| panic!("{}: run scripts/setup.sh", from.display()));
    }
    std::fs::copy(
        root().join("examples").join(format!("{example}.kdl")),
        dir.path().join(format!("{example}.kdl")),
    )
    .unwrap();
    dir
}

/// `pipeline run MANIFEST --json`, which must succeed: its report.
fn run(dir: &Path, manifest: &str) -> Value {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Python that rebuilds a `linear H; relu; (dropout;) linear K` model from the exported
/// checkpoint and its metadata, and predicts the test rows of the run's `split.json`
/// from `X` (the file's rows as numpy loads them).
fn rebuild(report: &Value) -> String {
    let export = report["stages"][2]["outputs"][0].as_str().unwrap();
    let metadata = report["stages"][2]["outputs"][1].as_str().unwrap();
    let run_dir = report["run_dir"].as_str().unwrap();
    format!(
        r#"
import json, numpy as np, torch
from safetensors.torch import load_file
meta = json.load(open({meta:?}))
split = json.load(open({split:?}))
sd = load_file({export:?})
keys = sorted(k for k in sd if k.endswith(".weight"))
layers = []
for k in keys:
    w = sd[k]
    lin = torch.nn.Linear(w.shape[1], w.shape[0])
    lin.weight.data, lin.bias.data = w, sd[k[:-6] + "bias"]
    layers += [lin, torch.nn.ReLU()]
model = torch.nn.Sequential(*layers[:-1]).eval()
def predict(X):
    s = meta["scaling"]
    x = (X - np.array(s["subtract"])) / np.array(s["divide"])
    with torch.no_grad():
        return model(torch.tensor(x, dtype=torch.float32)).numpy()
test = np.array(split["test"])
"#,
        meta = metadata,
        split = format!("{run_dir}/split.json"),
    )
}

#[test]
fn wine_and_breast_cancer_train_from_the_wheels_csvs_as_shipped() {
    for (name, file, more, classes) in [
        ("wine", "wine_data.csv", None, 3),
        (
            "breast-cancer",
            "breast_cancer.csv",
            // What its `predict` stage reads.
            Some("breast_cancer_unlabelled.csv"),
            2,
        ),
    ] {
        let dir = example(
            name,
            &[Some(file), more].into_iter().flatten().collect::<Vec<_>>(),
        );
        let report = run(dir.path(), &format!("{name}.kdl"));
        let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
        assert!(accuracy >= 0.94, "{name}: {accuracy}");
        // scikit-learn agrees on the same test rows, from the checkpoint alone; and the
        // stratified split keeps each class's share (to one sample).
        let out = py(
            dir.path(),
            &format!(
                "{}\nfrom sklearn.metrics import accuracy_score\n\
                 data = np.loadtxt('data/{file}', delimiter=',', skiprows=1)\n\
                 X, y = data[:, :-1], data[:, -1].astype(int)\n\
                 print(accuracy_score(y[test], predict(X[test]).argmax(1)))\n\
                 print(max(abs((y[test] == c).sum() - (y == c).mean() * len(test)) for c in range({classes})))\n",
                rebuild(&report)
            ),
        );
        let lines: Vec<f64> = out.lines().map(|l| l.parse().unwrap()).collect();
        assert!(
            (lines[0] - accuracy).abs() < 1e-9,
            "{name}: scikit-learn says {}, pipeline {accuracy}",
            lines[0]
        );
        assert!(
            lines[1] <= 1.0,
            "{name}: a class is off by {} samples",
            lines[1]
        );
    }
}

#[test]
fn diabetes_trains_from_space_separated_features_and_a_target_file_and_sklearn_agrees_on_r2() {
    let dir = example(
        "diabetes",
        &["diabetes_data_raw.csv.gz", "diabetes_target.csv.gz"],
    );
    let report = run(dir.path(), "diabetes.kdl");
    let r2 = report["stages"][1]["metrics"]["r2"].as_f64().unwrap();
    assert!(r2 >= 0.4, "R² {r2}");
    let out = py(
        dir.path(),
        &format!(
            "{}\nfrom sklearn.metrics import r2_score\n\
             X = np.loadtxt('data/diabetes_data_raw.csv.gz')\n\
             y = np.loadtxt('data/diabetes_target.csv.gz')\n\
             print(r2_score(y[test], predict(X[test])[:, 0]))\n",
            rebuild(&report)
        ),
    );
    let sklearn: f64 = out.trim().parse().unwrap();
    assert!(
        (sklearn - r2).abs() < 1e-5,
        "scikit-learn says {sklearn}, pipeline {r2}"
    );
}

/// The table example reads words, dates and gaps as the file has them, and its metrics
/// are in rentals, not in the scaled units the loss trains on.
#[test]
fn the_rentals_example_reads_words_dates_and_gaps_as_shipped() {
    let dir = example("rentals", &["rentals.csv"]);
    let out = pipeline(dir.path(), &["check", "rentals.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "ok: rentals.kdl (3 stages)\n  data: 6 numeric features; dates: date (month, day-of-week, days); categorical: weather (one-hot, 4 values), holiday (one-hot, 2 values), as the first 100 rows show\n"
    );
    let report = run(dir.path(), "rentals.kdl");
    let metrics = &report["stages"][1]["metrics"];
    let (r2, mae) = (
        metrics["r2"].as_f64().unwrap(),
        metrics["mae"].as_f64().unwrap(),
    );
    // Daily rentals of about 1,000 to 7,000, with a noise of 250.
    assert!(r2 > 0.85, "{metrics}");
    assert!((200.0..700.0).contains(&mae), "{metrics}");
}

/// A project with `data.csv` holding `csv` and `t.kdl` training on it with `data`'s body.
fn project(csv: &str, data: &str, loss: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.csv"), csv).unwrap();
    std::fs::write(
        dir.path().join("t.kdl"),
        format!(
            "pipeline \"t\"\nseed 1\ndata {{\n    source \"data.csv\"\n{data}\n}}\n\
             model {{\n    linear 8\n    relu\n    linear 2\n}}\nloss \"{loss}\"\n\
             optimizer \"adam\" lr=0.05\ntrain epochs=20 batch-size=8\n\
             eval \"test\" needs=\"train\" split=\"test\"\n\
             checkpoint \"export\" needs=\"train\" path=\"out/model.safetensors\"\n"
        ),
    )
    .unwrap();
    dir
}

/// Semicolons, quotes, a comment, text classes and missing values ("?", empty, NA).
fn animals() -> String {
    let mut csv = String::from("# measured in 2026\nweight;\"height, cm\";legs;kind\n");
    for i in 0..60 {
        let (w, h, kind) = if i % 2 == 0 {
            (2.0 + (i % 7) as f64 * 0.1, 20.0 + (i % 5) as f64, "\"cat\"")
        } else {
            (30.0 + (i % 7) as f64, 60.0 + (i % 5) as f64, "dog")
        };
        let weight = if i == 5 {
            "?".to_string()
        } else {
            w.to_string()
        };
        let height = if i == 8 { String::new() } else { h.to_string() };
        let legs = if i == 13 { "NA" } else { "4" };
        csv += &format!("{weight};{height};{legs};{kind}\n");
    }
    csv
}

#[test]
fn text_classes_quotes_comments_and_missing_values_as_users_write_them() {
    let data = "    header #true\n    comment \"#\"\n    label \"kind\"\n    scale \"standard\"\n    split train=0.75 test=0.25 stratify=#true";
    // By default a missing value stops the run, naming the line and the column.
    let dir = project(&animals(), data, "cross-entropy");
    let out = pipeline(dir.path(), &["run", "t.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fixture("missing-value.run.stderr", &text(&out.stderr));

    for (missing, samples) in [("median", 60), ("mean", 60), ("drop-row", 57)] {
        let dir = project(
            &animals(),
            &format!("{data}\n    missing \"{missing}\""),
            "cross-entropy",
        );
        let report = run(dir.path(), "t.kdl");
        let test = &report["stages"][1]["metrics"];
        assert_eq!(test["accuracy"], 1.0, "{missing}: {report}");
        let run_dir = dir.path().join(report["run_dir"].as_str().unwrap());
        let split: Value =
            serde_json::from_slice(&std::fs::read(run_dir.join("split.json")).unwrap()).unwrap();
        let rows = |s: &str| split[s].as_array().unwrap().len();
        assert_eq!(rows("train") + rows("test"), samples, "{missing}");
        if missing == "drop-row" {
            let all: Vec<u64> = ["train", "test"]
                .iter()
                .flat_map(|s| {
                    split[s]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap())
                })
                .collect();
            for dropped in [5, 8, 13] {
                assert!(!all.contains(&dropped), "row {dropped} was dropped");
            }
        }
        let metadata = report["stages"][2]["outputs"][1].as_str().unwrap();
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(metadata)).unwrap()).unwrap();
        assert_eq!(meta["classes"], serde_json::json!(["cat", "dog"]), "{meta}");
        if missing != "drop-row" {
            assert_eq!(meta["missing"]["kind"], missing);
            assert_eq!(meta["missing"]["fill"].as_array().unwrap().len(), 3);
        }
    }
}

#[test]
fn labels_files_and_column_selections_are_checked_against_the_files() {
    // A labels file for CSV features; its length must match.
    let features: String = (0..40)
        .map(|i| format!("{},{}\n", i % 2, (i % 3) as f64 * 0.5))
        .collect();
    let labels: String = (0..40)
        .map(|i| format!("{}\n", if i % 2 == 0 { "no" } else { "yes" }))
        .collect();
    let dir = project(&features, "    labels \"y.csv\"", "cross-entropy");
    std::fs::write(dir.path().join("y.csv"), &labels).unwrap();
    let report = run(dir.path(), "t.kdl");
    assert_eq!(report["stages"][1]["metrics"]["accuracy"], 1.0, "{report}");
    // A label that is no class index is named in the labels file.
    let numbers = labels.replace("no", "-1").replace("yes", "1");
    std::fs::write(dir.path().join("y.csv"), numbers).unwrap();
    let err = text(&pipeline(dir.path(), &["run", "t.kdl"]).stderr);
    assert!(
        err.contains("y.csv, sample 0: label -1 is not a class index"),
        "{err}"
    );
    std::fs::write(dir.path().join("y.csv"), &labels[..labels.len() - 7]).unwrap();
    let out = pipeline(dir.path(), &["run", "t.kdl"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("40 samples of features but 38 rows of labels in"),
        "{err}"
    );

    // Text in a regression target, and in a feature column.
    let dir = project("1,2,high\n3,4,low\n", "", "mse");
    let err = text(&pipeline(dir.path(), &["run", "t.kdl"]).stderr);
    assert!(
        err.contains("data.csv:1: label `column 2` is not a number: `high`"),
        "{err}"
    );
    let dir = project("1,2,0\n3,x,1\n", "", "cross-entropy");
    let err = text(&pipeline(dir.path(), &["run", "t.kdl"]).stderr);
    assert!(
        err.contains("feature `column 1` (column 1) is not a number: `x`, and the rows above hold"),
        "{err}"
    );

    // `check` reads the header and counts the selected features; a stratified regression
    // and two class columns are refused before any run.
    let dir = project(
        "a,b,c,y\n1,2,3,0\n",
        "    header #true\n    features \"a\" \"c\"\n    label \"y\"",
        "cross-entropy",
    );
    let manifest = std::fs::read_to_string(dir.path().join("t.kdl"))
        .unwrap()
        .replace("linear 8", "reshape 3");
    std::fs::write(dir.path().join("t.kdl"), manifest).unwrap();
    let err = text(&pipeline(dir.path(), &["check", "t.kdl"]).stderr);
    assert!(
        err.contains("cannot reshape 2 values"),
        "the two selected columns: {err}"
    );
    let dir = project("1,0\n", "    split stratify=#true", "mse");
    let err = text(&pipeline(dir.path(), &["check", "t.kdl"]).stderr);
    assert!(
        err.contains("pipeline::data::stratify_without_classes"),
        "{err}"
    );
    let dir = project("1,0,1\n", "    label 1 2", "cross-entropy");
    let err = text(&pipeline(dir.path(), &["check", "t.kdl"]).stderr);
    assert!(
        err.contains("pipeline::data::several_class_labels"),
        "{err}"
    );
}

#[test]
fn a_parquet_file_trains_exactly_as_the_same_csv() {
    let dir = example("wine", &["wine_data.csv"]);
    let csv = run(dir.path(), "wine.kdl");
    // The same table written by pyarrow (snappy, several row groups), the classes as text.
    py(
        dir.path(),
        "import numpy as np, pyarrow as pa, pyarrow.parquet as pq\n\
         data = np.loadtxt('data/wine_data.csv', delimiter=',', skiprows=1)\n\
         cols = {f'm{j}': data[:, j] for j in range(13)}\n\
         cols['cultivar'] = [f'class_{int(c)}' for c in data[:, 13]]\n\
         pq.write_table(pa.table(cols), 'data/wine.parquet', row_group_size=50)\n\
         # zstd, a null in a feature, an integer column, and the labels in a file of their own\n\
         cols['m0'] = [None if i == 3 else v for i, v in enumerate(data[:, 0])]\n\
         cols['m1'] = data[:, 1].round().astype('int64')\n\
         labels = cols.pop('cultivar')\n\
         pq.write_table(pa.table(cols), 'data/features.parquet', compression='zstd')\n\
         pq.write_table(pa.table({'cultivar': labels}), 'data/labels.parquet')\n",
    );
    let manifest = std::fs::read_to_string(dir.path().join("wine.kdl")).unwrap();
    let parquet = manifest
        .replace(
            "source \"data/wine_data.csv\"",
            "source \"data/wine.parquet\"",
        )
        .replace("    skip-rows 1\n", "")
        .replace("label \"last\"", "label \"cultivar\"")
        .replace(
            "checkpoint \"export\" {",
            "checkpoint \"export\" {\n    path \"out/parquet.safetensors\"",
        );
    std::fs::write(dir.path().join("parquet.kdl"), &parquet).unwrap();
    let from_parquet = run(dir.path(), "parquet.kdl");
    assert_eq!(
        from_parquet["stages"][1]["metrics"], csv["stages"][1]["metrics"],
        "the same split, the same scores"
    );
    let weights = |report: &Value| {
        let path = report["stages"][2]["outputs"][0].as_str().unwrap();
        common::tensors(&dir.path().join(path))
    };
    assert!(
        weights(&from_parquet) == weights(&csv),
        "bit for bit the same weights"
    );

    // Features and labels in two files, a null filled by the median.
    let split = parquet
        .replace("source \"data/wine.parquet\"", "source \"data/features.parquet\"\n    labels \"data/labels.parquet\"\n    missing \"median\"")
        .replace("    label \"cultivar\"\n", "");
    std::fs::write(dir.path().join("split.kdl"), &split).unwrap();
    let report = run(dir.path(), "split.kdl");
    assert!(
        report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap() >= 0.94,
        "{report}"
    );

    // A pandas index column (written after a filter: `__index_level_0__`, last) is not
    // data: with `label "last"` it would have been the label.
    py(
        dir.path(),
        "import json, numpy as np, pyarrow as pa, pyarrow.parquet as pq\n\
         t = pq.read_table('data/wine.parquet')\n\
         t = t.append_column('__index_level_0__', pa.array(np.arange(t.num_rows) * 7))\n\
         meta = {'index_columns': ['__index_level_0__'], 'columns': []}\n\
         t = t.replace_schema_metadata({'pandas': json.dumps(meta)})\n\
         pq.write_table(t, 'data/indexed.parquet')\n",
    );
    let indexed = parquet
        .replace("data/wine.parquet", "data/indexed.parquet")
        .replace("label \"cultivar\"", "label \"last\"");
    std::fs::write(dir.path().join("indexed.kdl"), indexed).unwrap();
    let report = run(dir.path(), "indexed.kdl");
    assert_eq!(
        report["stages"][1]["metrics"], csv["stages"][1]["metrics"],
        "the index is neither the label nor a feature"
    );

    // `check` reads the schema for shapes, and CSV keys do not apply.
    let wrong = parquet.replace("linear 32", "reshape 3 5\n    flatten\n    linear 32");
    std::fs::write(dir.path().join("wrong.kdl"), wrong).unwrap();
    let err = text(&pipeline(dir.path(), &["check", "wrong.kdl"]).stderr);
    assert!(err.contains("cannot reshape 13 values"), "{err}");
    let dialect = parquet.replace("label \"cultivar\"", "label \"cultivar\"\n    skip-rows 1");
    std::fs::write(dir.path().join("dialect.kdl"), dialect).unwrap();
    let err = text(&pipeline(dir.path(), &["check", "dialect.kdl"]).stderr);
    assert!(
        err.contains("`data.skip-rows` does not apply to Parquet data"),
        "{err}"
    );
}

#[test]
fn parquet_features_are_the_values_pyarrow_reads() {
    use pipeline_core::parquet;
    use pipeline_core::table::{Layout, TableError};
    let dir = tempfile::tempdir().unwrap();
    // Every numeric type (unsigned ones past the signed range), nulls, dictionary and
    // plain pages, several row groups and pages; the expected values are pyarrow's,
    // through float64 to float32 (what `torch.tensor(x).float()` gives), as their bits
    // (NaN for null).
    let expected = py(
        dir.path(),
        "import json, numpy as np, pyarrow as pa, pyarrow.parquet as pq\n\
         n = 1000\n\
         r = np.random.default_rng(0)\n\
         cols = {\n\
           'i8': pa.array(r.integers(-128, 128, n).astype(np.int8)),\n\
           'i16': pa.array(r.integers(-30000, 30000, n).astype(np.int16)),\n\
           'i32': pa.array(r.integers(-2**31, 2**31, n).astype(np.int32)),\n\
           'i64': pa.array(r.integers(-2**62, 2**62, n)),\n\
           'u8': pa.array(r.integers(0, 256, n).astype(np.uint8)),\n\
           'u16': pa.array(r.integers(0, 2**16, n).astype(np.uint16)),\n\
           'u32': pa.array(r.integers(2**31, 2**32, n).astype(np.uint32)),\n\
           'u64': pa.array(r.integers(2**63, 2**64 - 1, n, dtype=np.uint64)),\n\
           'f16': pa.array(r.standard_normal(n).astype(np.float16)),\n\
           'f32': pa.array(r.standard_normal(n).astype(np.float32)),\n\
           'f64': pa.array(r.standard_normal(n) * 1e40),\n\
           'b': pa.array(r.integers(0, 2, n).astype(bool)),\n\
           'few': pa.array(r.integers(0, 3, n).astype(np.float64)),\n\
           'nulls': pa.array([None if i % 7 == 0 else float(i) for i in range(n)]),\n\
         }\n\
         # More columns than are read at once: groups of columns read apart, then placed.\n\
         cols.update({f'e{j}': pa.array(r.standard_normal(n)) for j in range(40)})\n\
         t = pa.table(cols)\n\
         pq.write_table(t, 'types.parquet', row_group_size=300, data_page_size=512)\n\
         cols = [c.to_numpy(zero_copy_only=False) for c in t.columns]\n\
         x = np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1).astype(np.float32)\n\
         print(json.dumps({'names': t.column_names, 'bits': x.view(np.uint32).ravel().tolist()}))\n\
         pq.write_table(pa.table({'a': [1.0, 2.0], 's': ['x', 'y']}), 'text.parquet')\n\
         import datetime\n\
         pq.write_table(pa.table({'d': [datetime.date(2020, 1, 1)] * 2}), 'date.parquet')\n",
    );
    let expected: Value = serde_json::from_str(&expected).unwrap();
    let table = parquet::read(&dir.path().join("types.parquet"), Layout::Features(&[])).unwrap();
    let names: Vec<String> = serde_json::from_value(expected["names"].clone()).unwrap();
    assert_eq!(table.feature_names, names);
    let bits: Vec<u32> = serde_json::from_value(expected["bits"].clone()).unwrap();
    assert_eq!(table.features.len(), bits.len());
    for (i, (&v, &b)) in table.features.iter().zip(&bits).enumerate() {
        let want = f32::from_bits(b);
        assert!(
            v.to_bits() == b || (v.is_nan() && want.is_nan()),
            "row {}, column `{}`: {v} where pyarrow reads {want}",
            i / names.len(),
            names[i % names.len()]
        );
    }
    // Read as features alone (a labels file, an input), columns that are not numbers are
    // named as such before anything is read.
    let err = parquet::read(&dir.path().join("text.parquet"), Layout::Features(&[]));
    assert_eq!(
        err.unwrap_err(),
        TableError::Columns("feature `s` (column 1) holds text, not numbers: leave it out of `features`, or convert it before saving".into())
    );
    let err = parquet::read(&dir.path().join("date.parquet"), Layout::Features(&[]));
    assert_eq!(
        err.unwrap_err(),
        TableError::Columns("feature `d` (column 0) holds dates, not numbers: leave it out of `features`, or convert it before saving".into())
    );
}

/// Whether `s` holds a control character other than a line break: what would reach a
/// terminal raw.
fn has_controls(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n')
}

/// A data error names the file's own line in a file with CRLF line endings (what
/// Python's csv module and spreadsheets write; it was one too low); a header that names a
/// column twice is refused on its line (the name chose the first silently); a field's
/// escape and bell characters are shown escaped, never sent to the terminal.
#[test]
fn crlf_files_twice_named_columns_and_control_characters_are_reported_right() {
    let data = "    header #true\n    label \"y\"";
    let rows: String = (0..20)
        .map(|i| format!("{i},{},{}\r\n", i % 3, i % 2))
        .collect();
    // Line 24: the header, 20 rows, a blank line, a comment-free row, then `x`.
    let crlf = format!("a,b,y\r\n{rows}\r\n7,1,0\r\n8,x,1\r\n");
    let dir = project(&crlf, data, "cross-entropy");
    let out = pipeline(dir.path(), &["run", "t.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fixture("crlf-line.run.stderr", &text(&out.stderr));

    let twice = format!("a,b,a,y\n{}", rows.replace("\r\n", ",1\n"));
    let dir = project(&twice, data, "cross-entropy");
    let out = pipeline(dir.path(), &["run", "t.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fixture("header-twice.run.stderr", &text(&out.stderr));

    let controls = format!(
        "a,b,y\n{}9,\x1b]0;owned\x07\x1b[2J,1\n",
        rows.replace("\r\n", "\n")
    );
    let dir = project(&controls, data, "cross-entropy");
    let out = pipeline(dir.path(), &["run", "t.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(!has_controls(&stderr), "{stderr:?}");
    assert_fixture("control-characters.run.stderr", &stderr);
}

/// A pipeline's name is the user's: `status` and `graph` show its control characters
/// escaped, and so does the refusal of a stage name that holds some.
#[test]
fn names_with_control_characters_are_shown_escaped() {
    let dir = project("1,0\n2,1\n", "", "cross-entropy");
    let manifest = std::fs::read_to_string(dir.path().join("t.kdl"))
        .unwrap()
        .replace("pipeline \"t\"", "pipeline \"t\\u{1b}]0;owned\\u{7}\"");
    std::fs::write(dir.path().join("t.kdl"), &manifest).unwrap();
    for args in [&["status", "t.kdl"][..], &["graph", "t.kdl"]] {
        let out = pipeline(dir.path(), args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(!has_controls(&stdout), "{args:?}: {stdout:?}");
        assert!(
            stdout.contains("t\\u{1b}]0;owned\\u{7}"),
            "{args:?}: {stdout}"
        );
    }
    let status = text(&pipeline(dir.path(), &["status", "t.kdl"]).stdout);
    assert!(status.starts_with("t\\u{1b}]0;owned\\u{7} · "), "{status}");
    // A file name and a topic are the user's too: `sweep` and `explain` quote them escaped.
    std::fs::write(dir.path().join("t\x1b[2J.kdl"), &manifest).unwrap();
    let out = pipeline(
        dir.path(),
        &["sweep", "t\x1b[2J.kdl", "--grid", "optimizer.lr=0.1,0.2"],
    );
    // Two rows leave the test split empty: each point fails, saying so.
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(!has_controls(&stderr), "{stderr:?}");
    assert!(
        stderr.contains("sweep of t\\u{1b}[2J.kdl: 2 points"),
        "{stderr}"
    );
    let out = pipeline(dir.path(), &["explain", "lo\x1b[2Jss"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(!has_controls(&stderr), "{stderr:?}");
    assert!(stderr.contains("`lo\\u{1b}[2Jss`"), "{stderr}");
    let bad = manifest.replace("eval \"test\"", "eval \"te\\u{1b}[2Jst\"");
    std::fs::write(dir.path().join("t.kdl"), bad).unwrap();
    let out = pipeline(dir.path(), &["check", "t.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(!has_controls(&stderr), "{stderr:?}");
    assert!(
        stderr.contains("`te\\u{1b}[2Jst` is not a valid stage name"),
        "{stderr}"
    );
}

/// `check` refuses the Parquet files `run` refuses from their footers alone: an empty
/// file, one cut short (no footer), one whose column data is gone (a footer pointing past
/// the end), a nested column, a name given to two columns. It passed them all.
#[test]
fn check_refuses_the_parquet_files_the_run_refuses() {
    let dir = tempfile::tempdir().unwrap();
    py(
        dir.path(),
        "import pyarrow as pa, pyarrow.parquet as pq\n\
         pq.write_table(pa.table({'a': [float(i) for i in range(20000)], 'y': [i % 2 for i in range(20000)]}), 'good.parquet', compression='none')\n\
         good = open('good.parquet', 'rb').read()\n\
         open('empty.parquet', 'wb').close()\n\
         open('cut.parquet', 'wb').write(good[:len(good) // 2])\n\
         open('holed.parquet', 'wb').write(good[:4] + good[100004:])\n\
         pq.write_table(pa.table({'a': [[1.0], [2.0]], 'y': [0, 1]}), 'nested.parquet')\n\
         pq.write_table(pa.Table.from_arrays([pa.array([1.0, 2.0]), pa.array([0, 1]), pa.array([3.0, 4.0])], names=['a', 'y', 'a']), 'twice.parquet')\n",
    );
    let manifest = |source: &str| {
        format!(
            "pipeline \"t\"\ndata {{\n    source \"{source}\"\n    label \"y\"\n}}\n\
             model {{\n    linear 2\n}}\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain epochs=1\n"
        )
    };
    std::fs::write(dir.path().join("good.kdl"), manifest("good.parquet")).unwrap();
    let out = pipeline(dir.path(), &["check", "good.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut refusals = String::new();
    for name in ["empty", "cut", "holed", "nested", "twice"] {
        let file = format!("{name}.kdl");
        std::fs::write(dir.path().join(&file), manifest(&format!("{name}.parquet"))).unwrap();
        let out = pipeline(dir.path(), &["check", &file]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stderr));
        refusals += &text(&out.stderr);
    }
    assert_fixture("parquet-refused.check.stderr", &refusals);
}

#[test]
fn json_records_and_json_lines_train_exactly_as_the_same_csv() {
    let dir = example("wine", &["wine_data.csv"]);
    let csv = run(dir.path(), "wine.kdl");
    // The same table as Python's json module writes records (an array; the keys in the
    // columns' order, the classes as text), and as gzip JSON Lines with a key left out
    // of one record and a null in another (missing both, filled by the median).
    py(
        dir.path(),
        "import gzip, json, numpy as np\n\
         data = np.loadtxt('data/wine_data.csv', delimiter=',', skiprows=1)\n\
         rows = [dict({f'm{j}': float(r[j]) for j in range(13)}, cultivar=f'class_{int(r[13])}') for r in data]\n\
         json.dump(rows, open('data/wine.json', 'w'), indent=1)\n\
         del rows[3]['m0']\n\
         rows[5]['m2'] = None\n\
         with gzip.open('data/wine.jsonl.gz', 'wt') as f:\n\
         \x20   f.writelines(json.dumps(r) + '\\n' for r in rows)\n\
         json.dump([{'m0': 1.0, 'cultivar': 'class_1'}, {'m0': [2.0], 'cultivar': 'class_2'}], open('data/nested.json', 'w'))\n",
    );
    let manifest = std::fs::read_to_string(dir.path().join("wine.kdl")).unwrap();
    let json = manifest
        .replace("source \"data/wine_data.csv\"", "source \"data/wine.json\"")
        .replace("    skip-rows 1\n", "")
        .replace("label \"last\"", "label \"cultivar\"")
        .replace(
            "checkpoint \"export\" {",
            "checkpoint \"export\" {\n    path \"out/json.safetensors\"",
        );
    std::fs::write(dir.path().join("json.kdl"), &json).unwrap();
    let check = pipeline(dir.path(), &["check", "json.kdl"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let from_json = run(dir.path(), "json.kdl");
    assert_eq!(
        from_json["stages"][1]["metrics"], csv["stages"][1]["metrics"],
        "the same split, the same scores"
    );
    let weights = |report: &Value| {
        let path = report["stages"][2]["outputs"][0].as_str().unwrap();
        common::tensors(&dir.path().join(path))
    };
    assert!(
        weights(&from_json) == weights(&csv),
        "bit for bit the same weights"
    );

    let lines = json
        .replace("data/wine.json", "data/wine.jsonl.gz")
        .replace(
            "label \"cultivar\"",
            "label \"cultivar\"\n    missing \"median\"",
        )
        .replace("out/json.safetensors", "out/lines.safetensors");
    std::fs::write(dir.path().join("lines.kdl"), &lines).unwrap();
    let from_lines = run(dir.path(), "lines.kdl");
    let accuracy = |r: &Value| r["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy(&from_lines) > 0.9, "{from_lines}");

    // A table's cell is never an array: the run says which record and which key.
    let nested = json.replace("data/wine.json", "data/nested.json");
    std::fs::write(dir.path().join("nested.kdl"), &nested).unwrap();
    let out = pipeline(dir.path(), &["run", "nested.kdl"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("data/nested.json, row 1: `m0` holds an array: a table's cell"),
        "{stderr}"
    );
}

/// A table with a column of text: categorical, which `check` says (it used to say `ok`
/// and leave the text to the run, which refused it); a named column without `header`
/// says the first row is read as data (it said "the file has no header" of a file that
/// has one); leaving the text out with `features` trains.
#[test]
fn a_column_of_text_is_named_by_check_as_by_the_run() {
    let mut csv = String::from("species,island,bill,flipper\n");
    for (i, (species, island)) in [("Adelie", "Torgersen"), ("Gentoo", "Biscoe")]
        .iter()
        .cycle()
        .take(24)
        .enumerate()
    {
        csv += &format!("{species},{island},{},{}\n", 38 + i % 10, 180 + 2 * i);
    }
    let dir = project(
        &csv,
        "    header #true\n    label \"species\"",
        "cross-entropy",
    );
    let check = pipeline(dir.path(), &["check", "t.kdl"]);
    assert_eq!(
        text(&check.stderr),
        "ok: t.kdl (3 stages)\n  data: 2 numeric features; categorical: island (one-hot, 2 values)\n"
    );
    let run = pipeline(dir.path(), &["run", "t.kdl"]);
    assert!(run.status.success(), "{}", text(&run.stderr));

    let dir = project(&csv, "    label \"species\"", "cross-entropy");
    let check = pipeline(dir.path(), &["check", "t.kdl"]);
    assert_eq!(check.status.code(), Some(1));
    assert!(
        text(&check.stderr).contains("is named, but `header` is not set"),
        "{}",
        text(&check.stderr)
    );

    let data = "    header #true\n    label \"species\"\n    features \"bill\" \"flipper\"";
    let dir = project(&csv, data, "cross-entropy");
    let run = pipeline(dir.path(), &["run", "t.kdl"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
}
