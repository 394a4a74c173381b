//! Streamed `.npy` and Parquet features (`data.load "stream"`) and shards
//! (`source "x-*.npy"`): training from the files read per batch gives what training from
//! memory gives; shards are one data set; the loader's workers change nothing but the
//! speed; a killed streamed run resumes bit for bit; bad shards are named before training.

use crate::common;

use crate::common::{assert_fixture, kill_after_snapshot, pipeline, py, tensors, text};
use serde_json::Value;
use std::path::Path;

/// The digits as `x.npy` (float32, 1797 × 64), `y.npy` (int64) and the same in three
/// shards each (`x-0.npy` …, `y-0.npy` …), with a missing value in `nan.npy`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = common::root().join("examples/data/digits.csv.gz");
    py(
        dir.path(),
        &format!(
            r#"
import numpy as np
d = np.loadtxt("{}", delimiter=",", dtype=np.float64)
x, y = d[:, :64].astype(np.float32), d[:, 64].astype(np.int64)
np.save("x.npy", x); np.save("y.npy", y)
for k, (a, b) in enumerate([(0, 600), (600, 1201), (1201, 1797)]):
    np.save(f"x-{{k}}.npy", x[a:b]); np.save(f"y-{{k}}.npy", y[a:b])
x16 = x.astype(np.float16); np.save("x16.npy", x16)
bad = x.copy(); bad[700, 5] = np.nan; np.save("nan.npy", bad)
np.save("wide.npy", np.zeros((10, 65), np.float32))
# The digits as Parquet: a column of every numeric type, text labels, row groups of 500
# (64 columns: two groups of columns read apart and interleaved when streamed).
import pyarrow as pa, pyarrow.parquet as pq
types = [np.uint8, np.int64, np.float16, np.float64, np.int16, np.uint32, np.float32, np.int8]
cols = {{f"p{{j}}": pa.array(x[:, j].astype(types[j % 8])) for j in range(64)}}
cols["p9"] = pa.array(x[:, 9] > 0)
cols["digit"] = pa.array([f"d{{c}}" for c in y])
pq.write_table(pa.table(cols), "digits.parquet", row_group_size=500)
cols["p5"] = pa.array([None if i == 700 else v for i, v in enumerate(x[:, 5])])
pq.write_table(pa.table(cols), "nan.parquet", compression="zstd")
"#,
            data.display()
        ),
    );
    dir
}

fn manifest(source: &str, labels: &str, data: &str, epochs: u64) -> String {
    format!(
        r#"pipeline "s"
seed 5
data {{
    source "{source}"
    labels "{labels}"
    split train=0.8 test=0.2
{data}
}}
model {{
    linear 32
    relu
    linear 10
}}
loss "cross-entropy"
optimizer "adam" lr=0.01 weight-decay=0.0
train epochs={epochs} batch-size=64 snapshot-every-steps=5
eval "test" needs="train" split="test"
checkpoint "export" needs="train" path="out/model.safetensors"
"#
    )
}

/// Runs `text` as `name` in `dir` with `--json`; the report.
fn run(dir: &Path, name: &str, text_: &str, args: &[&str]) -> Value {
    std::fs::write(dir.join(name), text_).unwrap();
    let mut all = vec!["run", name, "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn weights(dir: &Path) -> Vec<(String, Vec<f32>)> {
    tensors(&dir.join("out/model.safetensors"))
}

fn accuracy(report: &Value) -> f64 {
    report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap()
}

#[test]
fn streamed_features_train_as_held_ones_and_shards_as_one_file() {
    let dir = project();
    let d = dir.path();
    // Without scaling, streaming changes nothing: the same weights, bit for bit.
    let held = run(
        d,
        "held.kdl",
        &manifest("x.npy", "y.npy", "    load \"memory\"", 3),
        &["--no-cache"],
    );
    let w_held = weights(d);
    assert!(accuracy(&held) > 0.9, "{held}");
    let streamed = run(
        d,
        "stream.kdl",
        &manifest("x.npy", "y.npy", "    load \"stream\"", 3),
        &["--no-cache"],
    );
    assert_eq!(
        weights(d),
        w_held,
        "streamed training differs from training in memory"
    );
    assert_eq!(accuracy(&streamed), accuracy(&held));
    // Shards, streamed or held, are the file they were cut from.
    let shards = manifest("x-[0-9].npy", "y-*.npy", "    load \"stream\"", 3);
    run(d, "shards.kdl", &shards, &["--no-cache"]);
    assert_eq!(
        weights(d),
        w_held,
        "streamed shards differ from the one file"
    );
    let shards_held = manifest("x-[0-9].npy", "y-*.npy", "    load \"memory\"", 3);
    run(d, "shards-held.kdl", &shards_held, &["--no-cache"]);
    assert_eq!(weights(d), w_held, "held shards differ from the one file");
    // float16 shards are converted as torch converts them.
    let half = run(
        d,
        "half.kdl",
        &manifest("x16.npy", "y.npy", "    load \"stream\"", 3),
        &["--no-cache"],
    );
    assert_eq!(weights(d), w_held, "digits are exact in float16");
    assert_eq!(accuracy(&half), accuracy(&held));
}

/// `manifest` for `source` with its labels in column `digit`.
fn parquet_manifest(source: &str, data: &str, epochs: u64) -> String {
    manifest(source, "", data, epochs).replace("    labels \"\"\n", "    label \"digit\"\n")
}

#[test]
fn a_streamed_parquet_file_trains_as_the_held_one() {
    let dir = project();
    let d = dir.path();
    let held = run(
        d,
        "held.kdl",
        &parquet_manifest("digits.parquet", "    load \"memory\"", 3),
        &["--no-cache"],
    );
    let w_held = weights(d);
    assert!(accuracy(&held) > 0.9, "{held}");
    let streamed = run(
        d,
        "stream.kdl",
        &parquet_manifest("digits.parquet", "    load \"stream\"", 3),
        &["--no-cache"],
    );
    assert_eq!(weights(d), w_held, "streamed Parquet differs from held");
    assert_eq!(accuracy(&streamed), accuracy(&held));
    // Nothing is left beside the manifest but the run directories: the decoded copy has
    // no name.
    let left: Vec<_> = std::fs::read_dir(d.join(".pipeline"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["runs"], "{left:?}");
    // A null is a missing value, named by its row, or its row dropped as in memory.
    let nan = |load: &str, missing: &str| {
        parquet_manifest(
            "nan.parquet",
            &format!("    load \"{load}\"\n    missing \"{missing}\""),
            1,
        )
    };
    std::fs::write(d.join("nan.kdl"), nan("stream", "error")).unwrap();
    let out = pipeline(d, &["run", "nan.kdl"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("nan.parquet, sample 700: feature `p5` (column 5) is missing"),
        "{}",
        text(&out.stderr)
    );
    run(
        d,
        "drop-held.kdl",
        &nan("memory", "drop-row"),
        &["--no-cache"],
    );
    let w_dropped = weights(d);
    run(d, "drop.kdl", &nan("stream", "drop-row"), &["--no-cache"]);
    assert_eq!(weights(d), w_dropped, "dropped rows differ");
    // Fitted scaling: another key (float64 sums), the same model within rounding.
    let scaled = |load: &str| {
        parquet_manifest(
            "digits.parquet",
            &format!("    load \"{load}\"\n    scale \"standard\""),
            2,
        )
    };
    let held = run(d, "s.kdl", &scaled("memory"), &[]);
    let streamed = run(d, "s.kdl", &scaled("stream"), &[]);
    assert_eq!(streamed["stages"][0]["status"], "ran", "{streamed}");
    assert!(
        (accuracy(&held) - accuracy(&streamed)).abs() < 0.02,
        "{streamed}"
    );
    // A text column is not a feature: named before training.
    let text_feature = parquet_manifest("digits.parquet", "    load \"stream\"", 1)
        .replace("    label \"digit\"\n", "    labels \"y.npy\"\n");
    std::fs::write(d.join("text.kdl"), text_feature).unwrap();
    let out = pipeline(d, &["run", "text.kdl"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("feature `digit` (column 64) holds text, not numbers"),
        "{}",
        text(&out.stderr)
    );
    // A disk without room for the decoded copy (4 bytes a value: 460 kB here) stops the
    // run before training, saying what it needs; nothing is left of the copy.
    let stream = parquet_manifest("digits.parquet", "    load \"stream\"", 1);
    std::fs::write(d.join("full.kdl"), stream).unwrap();
    let out = crate::common::pipeline_with_files_up_to(d, &["run", "full.kdl"], 64 << 10);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // The diagnostic as one line, without the frame miette wraps it in.
    let stderr = text(&out.stderr);
    let words: Vec<&str> = stderr.split_whitespace().filter(|w| *w != "│").collect();
    let line = words.join(" ");
    assert!(
        line.contains("pipeline::data::decode_failed")
            && line.contains("digits.parquet: cannot write its decoded copy in")
            && line.contains("File too large (os error 27)")
            && line.contains("streaming a table needs 4 bytes of disk per value beside the manifest: free some space, or `load \"memory\"`"),
        "{line}"
    );
    let left: Vec<_> = std::fs::read_dir(d.join(".pipeline"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!left.iter().any(|n| n.contains("stream")), "{left:?}");
}

#[test]
fn workers_and_prefetch_change_the_speed_only() {
    let dir = project();
    let d = dir.path();
    let with = |workers: u64, prefetch: u64| {
        manifest(
            "x.npy",
            "y.npy",
            &format!("    load \"stream\"\n    scale \"standard\"\n    workers {workers}\n    prefetch {prefetch}"),
            2,
        )
    };
    let first = run(d, "w.kdl", &with(0, 1), &[]);
    let w0 = weights(d);
    assert!(accuracy(&first) > 0.9, "{first}");
    // Another worker count is the same key: every stage is cached.
    let again = run(d, "w.kdl", &with(3, 5), &[]);
    for stage in again["stages"].as_array().unwrap() {
        assert_eq!(stage["status"], "cached", "{again}");
    }
    run(d, "w.kdl", &with(3, 5), &["--no-cache"]);
    assert_eq!(weights(d), w0, "3 workers 5 batches ahead differ from none");
    // Streamed scaling is fitted in float64: within float32 rounding of memory's.
    let held = manifest("x.npy", "y.npy", "    scale \"standard\"", 2);
    let report = run(d, "held.kdl", &held, &["--no-cache"]);
    assert!(
        (accuracy(&report) - accuracy(&first)).abs() < 0.02,
        "{report}"
    );
}

#[test]
fn missing_values_are_dropped_filled_or_named_in_their_shard() {
    let dir = project();
    let d = dir.path();
    let with = |missing: &str| {
        manifest(
            "nan.npy",
            "y.npy",
            &format!("    load \"stream\"\n    missing \"{missing}\"\n    scale \"minmax\""),
            1,
        )
    };
    std::fs::write(d.join("nan.kdl"), with("error")).unwrap();
    let out = pipeline(d, &["run", "nan.kdl"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("nan.npy, sample 700: feature `feature 5` (column 5) is missing"),
        "{}",
        text(&out.stderr)
    );
    let dropped = run(d, "drop.kdl", &with("drop-row"), &["--no-cache"]);
    assert!(accuracy(&dropped) > 0.7, "{dropped}");
    let filled = run(d, "fill.kdl", &with("mean"), &["--no-cache"]);
    assert!(accuracy(&filled) > 0.7, "{filled}");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(d.join("out/model.json")).unwrap()).unwrap();
    assert_eq!(meta["missing"]["kind"], "mean", "{meta}");
}

#[test]
fn a_killed_streamed_run_resumes_bit_for_bit() {
    let dir = project();
    let d = dir.path();
    // Small batches, so that the run lasts long enough to be killed mid-epoch.
    let text_ = manifest(
        "x-*.npy",
        "y-*.npy",
        "    load \"stream\"\n    scale \"standard\"\n    workers 2\n    prefetch 3",
        4,
    )
    .replace("batch-size=64", "batch-size=4");
    std::fs::write(d.join("r.kdl"), &text_).unwrap();
    let step = kill_after_snapshot(d, "r.kdl", 100);
    assert!(step >= 100);
    let resumed = pipeline(d, &["run", "r.kdl"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(text(&resumed.stderr).contains("resuming `train` from its snapshot"));
    let w_resumed = weights(d);
    run(d, "r.kdl", &text_, &["--no-cache"]);
    assert_eq!(weights(d), w_resumed, "the resumed run ended elsewhere");
}

#[test]
fn bad_shards_are_named_before_training() {
    let dir = project();
    let d = dir.path();
    // A shard of another shape, named by check.
    std::fs::rename(d.join("wide.npy"), d.join("x-3.npy")).unwrap();
    std::fs::write(d.join("wide.kdl"), manifest("x-?.npy", "y-*.npy", "", 1)).unwrap();
    let out = pipeline(d, &["check", "wide.kdl"]);
    assert!(!out.status.success());
    assert_fixture("streaming-shard-shape.check.stderr", &text(&out.stderr));
    std::fs::remove_file(d.join("x-3.npy")).unwrap();
    // Labels of another length, and a pattern that matches nothing.
    std::fs::write(
        d.join("short.kdl"),
        manifest("x-*.npy", "y-[01].npy", "", 1),
    )
    .unwrap();
    let out = pipeline(d, &["check", "short.kdl"]);
    assert_fixture("streaming-labels-length.check.stderr", &text(&out.stderr));
    std::fs::write(d.join("none.kdl"), manifest("z-*.npy", "y.npy", "", 1)).unwrap();
    let out = pipeline(d, &["check", "none.kdl"]);
    assert_fixture("streaming-no-shards.check.stderr", &text(&out.stderr));
    // Streaming what is not `.npy`.
    std::fs::write(d.join("a.csv"), "1,0\n2,1\n").unwrap();
    let csv = "pipeline \"c\"\ndata {\n    source \"a.csv\"\n    load \"stream\"\n}\nmodel {\n    linear 2\n}\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain epochs=1\n";
    std::fs::write(d.join("csv.kdl"), csv).unwrap();
    let out = pipeline(d, &["check", "csv.kdl"]);
    assert_fixture("streaming-not-npy.check.stderr", &text(&out.stderr));
    // Texts are tokenised into memory, from Parquet too.
    let texts = csv.replace("a.csv", "digits.parquet").replace(
        "    load",
        "    text \"digit\" tokenizer=\"t.json\" max-length=4\n    load",
    );
    std::fs::write(d.join("texts.kdl"), texts).unwrap();
    let out = pipeline(d, &["check", "texts.kdl"]);
    assert_fixture("streaming-texts.check.stderr", &text(&out.stderr));
    // A shard cut short after check: named when the run opens it, before training.
    let bytes = std::fs::read(d.join("x-1.npy")).unwrap();
    std::fs::write(d.join("x-1.npy"), &bytes[..bytes.len() - 100]).unwrap();
    std::fs::write(
        d.join("cut.kdl"),
        manifest("x-*.npy", "y-*.npy", "    load \"stream\"", 1),
    )
    .unwrap();
    let out = pipeline(d, &["run", "cut.kdl"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("x-1.npy: the data ends early"), "{err}");
    assert!(
        !d.join(".pipeline/cache/snapshots").exists() || !err.contains("epoch"),
        "{err}"
    );
}

#[test]
fn two_processes_stream_their_shares_as_they_train_from_memory() {
    let dir = project();
    let d = dir.path();
    let ddp = [
        "--nproc-per-node",
        "2",
        "--set",
        "accelerator.strategy=ddp",
        "--set",
        "accelerator.sampler=bucketed",
        "--set",
        "accelerator.bucket-by=36",
        "--set",
        "accelerator.buckets=3",
        "--no-cache",
    ];
    let held = run(
        d,
        "held.kdl",
        &manifest("x.npy", "y.npy", "    load \"memory\"", 2),
        &ddp,
    );
    let w_held = weights(d);
    assert!(accuracy(&held) > 0.8, "{held}");
    run(
        d,
        "stream.kdl",
        &manifest("x-*.npy", "y-*.npy", "    load \"stream\"", 2),
        &ddp,
    );
    assert_eq!(
        weights(d),
        w_held,
        "two streaming processes differ from two holding ones"
    );
}

#[test]
fn a_project_directory_with_pattern_characters_is_read_literally() {
    let dir = project();
    let inner = dir.path().join("exp[2]");
    std::fs::create_dir(&inner).unwrap();
    for name in [
        "x.npy", "y.npy", "x-0.npy", "x-1.npy", "x-2.npy", "y-0.npy", "y-1.npy", "y-2.npy",
    ] {
        std::fs::copy(dir.path().join(name), inner.join(name)).unwrap();
    }
    // From the parent directory, so that every path goes through `exp[2]/`.
    let held = manifest("exp[2]/x.npy", "exp[2]/y.npy", "    load \"memory\"", 1);
    std::fs::write(
        dir.path().join("a.kdl"),
        held.replace("out/model", "exp[2]/out/model"),
    )
    .unwrap();
    let out = pipeline(dir.path(), &["run", "a.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Inside it, as a manifest there sees it: its own directory is not a pattern.
    let shards = manifest("x-*.npy", "y-*.npy", "    load \"stream\"", 1);
    run(&inner, "s.kdl", &shards, &[]);
    let status = pipeline(&inner, &["status", "s.kdl"]);
    assert!(
        text(&status.stdout).contains("3 of 3 stages fresh"),
        "{}",
        text(&status.stdout)
    );
}
