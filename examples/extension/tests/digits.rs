//! The extension trains digits with its own strategy and precision on two processes, and
//! `check` holds them to the compatibility rules by what their descriptions say.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A copy of the example beside a copy of the digits data, as `../data/` it expects.
fn project() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::create_dir_all(dir.path().join("ext")).unwrap();
    std::fs::copy(
        root.join("examples/data/digits.csv.gz"),
        dir.path().join("data/digits.csv.gz"),
    )
    .expect("the digits data (scripts/setup.sh puts it in examples/data/)");
    std::fs::copy(
        root.join("examples/extension/digits.kdl"),
        dir.path().join("ext/digits.kdl"),
    )
    .unwrap();
    dir
}

fn program(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_digits-compressed"))
        .args(args)
        .current_dir(dir.join("ext"))
        .env("PIPELINE_CACHE_DIR", dir.join("cache"))
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_custom_strategy_and_precision_train_digits_on_two_processes() {
    let dir = project();
    let checked = program(dir.path(), &["check", "digits.kdl"]);
    assert!(checked.status.success(), "{}", stderr(&checked));

    let out = program(
        dir.path(),
        &["run", "digits.kdl", "--nproc-per-node", "2", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let test = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "test")
        .unwrap();
    let accuracy = test["metrics"]["accuracy"].as_f64().unwrap();
    eprintln!("digits with ddp-bf16 and bf16-inputs on 2 processes: {accuracy}");
    assert!(accuracy >= 0.95, "test accuracy {accuracy}");
}

/// The exported weights of a run on two processes with `--set`s, from the report.
fn exported(dir: &Path, sets: &[&str]) -> Vec<u8> {
    let mut args = vec![
        "run",
        "digits.kdl",
        "--nproc-per-node",
        "2",
        "--json",
        "--no-cache",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = program(dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = &report["stages"][2]["outputs"][0];
    std::fs::read(dir.join("ext").join(export.as_str().unwrap())).unwrap()
}

/// What ran is the registered strategy, not `ddp` under another name: with the same
/// precision, its bfloat16 gradients end in other weights than `ddp`'s float32 ones,
/// while a rerun of `ddp` ends in the same bytes.
#[test]
fn the_compressed_all_reduce_is_what_runs() {
    let dir = project();
    // One epoch tells the three apart as well as thirty.
    let (fp32, one) = ("accelerator.precision=32", "train.epochs=1");
    let ddp = exported(dir.path(), &[fp32, one, "accelerator.strategy=ddp"]);
    let again = exported(dir.path(), &[fp32, one, "accelerator.strategy=ddp"]);
    let compressed = exported(dir.path(), &[fp32, one]);
    assert!(ddp == again, "ddp is deterministic");
    assert!(compressed != ddp, "ddp-bf16 trained exactly as ddp");
}

#[test]
fn the_rules_ask_the_custom_members_what_they_are() {
    let dir = project();
    // `ddp-bf16` says it needs several processes: one is refused, as `ddp` would be.
    let out = program(dir.path(), &["run", "digits.kdl", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pipeline::accelerator::strategy_with_one_process")
            && stderr(&out).contains("`strategy \"ddp-bf16\"` in a run of one process"),
        "{}",
        stderr(&out)
    );
    // `explain` documents the members this program registered beside the built-ins.
    let out = program(dir.path(), &["explain", "accelerator.strategy"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("`ddp-bf16`: data parallel; gradients sent as bfloat16")
            && text.contains("value: one of \"none\", \"ddp\", \"zero1\", \"ddp-bf16\""),
        "{text}"
    );
    // An unknown name lists what this program registered, its own members with the rest.
    let text = std::fs::read_to_string(dir.path().join("ext/digits.kdl")).unwrap();
    let typo: PathBuf = dir.path().join("ext/typo.kdl");
    std::fs::write(&typo, text.replace("\"ddp-bf16\"", "\"ddp-bf61\"")).unwrap();
    let out = program(dir.path(), &["check", "typo.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("did you mean `ddp-bf16`?")
            && stderr(&out).contains("\"none\", \"ddp\", \"zero1\", \"ddp-bf16\""),
        "{}",
        stderr(&out)
    );
}
