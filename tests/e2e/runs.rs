//! `pipeline runs`: every run that ran a stage is recorded; the history lists them, shows
//! one, and says what changed between two in words, with the metrics' deltas.

use crate::common;

use crate::common::{pipeline, text};
use serde_json::Value;

#[test]
fn runs_are_listed_shown_and_compared() {
    let dir = common::digits_project();
    let d = dir.path();
    let quick = ["--set", "train.epochs=2"];
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "digits.kdl"];
        args.extend(quick);
        args.extend(extra);
        let out = pipeline(d, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    let out = pipeline(d, &["runs", "digits.kdl"]);
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("no recorded runs of digits.kdl yet"));
    run(&[]);
    run(&["--set", "optimizer.lr=0.001"]);
    // A run answered whole from the cache ran nothing: nothing to record.
    run(&["--set", "optimizer.lr=0.001"]);
    let out = pipeline(d, &["runs", "digits.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{listed}");
    let (first, second) = (&runs[0], &runs[1]);
    assert_eq!(first["run"]["pipeline"], "digits");
    assert!(first["run"]["ok"].as_bool().unwrap());
    let stages = |r: &Value| -> Vec<String> {
        r["run"]["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s["name"].as_str().unwrap(),
                    s["status"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(stages(first), ["train ran", "test ran", "export ran"]);
    // The table: one line per run, the eval's accuracy among its metrics.
    let out = pipeline(d, &["runs", "digits.kdl"]);
    let table = text(&out.stdout);
    assert_eq!(table.lines().count(), 3, "{table}");
    let accuracy = second["run"]["stages"][1]["metrics"]["accuracy"]
        .as_f64()
        .unwrap();
    assert!(
        table.contains(&format!("test accuracy {accuracy:.4}")),
        "{table}"
    );
    // `show` by id prefix or `last`, the same run. (Two runs in one second may share all
    // but the last digits of their ids: the prefix is the shortest the other lacks.)
    let id = second["id"].as_str().unwrap();
    let other = first["id"].as_str().unwrap();
    let prefix = (1..=id.len())
        .map(|n| &id[..n])
        .find(|p| !other.starts_with(p))
        .unwrap();
    let by_id = pipeline(
        d,
        &["runs", "show", prefix, "--file", "digits.kdl", "--json"],
    );
    let by_last = pipeline(
        d,
        &["runs", "show", "last", "--file", "digits.kdl", "--json"],
    );
    assert!(by_id.status.success(), "{}", text(&by_id.stderr));
    assert_eq!(by_id.stdout, by_last.stdout);
    let shown = pipeline(d, &["runs", "show", "last", "--file", "digits.kdl"]);
    assert!(text(&shown.stdout).starts_with(&format!(
        "run {id} of `digits` (digits.kdl) on cpu: succeeded\n"
    )));
    // `diff`: the setting that changed, in words, and each metric's change.
    let out = pipeline(
        d,
        &["runs", "diff", "last~1", "last", "--file", "digits.kdl"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("train: changed\n  optimizer.lr changed 0.003 → 0.001\n"),
        "{said}"
    );
    assert!(
        said.contains("test: changed\n  a stage it needs changed\n"),
        "{said}"
    );
    let before = first["run"]["stages"][1]["metrics"]["accuracy"]
        .as_f64()
        .unwrap();
    if before != accuracy {
        assert!(
            said.contains(&format!(
                "  accuracy {before:.6} → {accuracy:.6} ({:+.6})",
                accuracy - before
            )),
            "{said}"
        );
    }
    let out = pipeline(
        d,
        &[
            "runs",
            "diff",
            "last~1",
            "last",
            "--file",
            "digits.kdl",
            "--json",
        ],
    );
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        diff["stages"][0]["reasons"][0],
        "optimizer.lr changed 0.003 → 0.001"
    );
    // A run that is not there.
    let out = pipeline(d, &["runs", "show", "last~5", "--file", "digits.kdl"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "error: there are 2 recorded runs: `last~5` is not one\n  help: `pipeline runs digits.kdl` lists them\n"
    );
    // A changed input file is named: an eval stage's own labelled file.
    let holdout = |shift: usize| -> String {
        (0..20)
            .map(|i| {
                let pixels: Vec<String> = (0..64)
                    .map(|j| ((i + j + shift) % 17).to_string())
                    .collect();
                format!("{},{}\n", pixels.join(","), i % 10)
            })
            .collect()
    };
    let manifest = std::fs::read_to_string(d.join("digits.kdl")).unwrap();
    std::fs::write(
        d.join("digits.kdl"),
        manifest + "eval \"holdout\" {\n    needs \"train\"\n    source \"holdout.csv\"\n}\n",
    )
    .unwrap();
    std::fs::write(d.join("holdout.csv"), holdout(0)).unwrap();
    run(&["--set", "optimizer.lr=0.001"]);
    std::fs::write(d.join("holdout.csv"), holdout(1)).unwrap();
    run(&["--set", "optimizer.lr=0.001"]);
    let out = pipeline(
        d,
        &["runs", "diff", "last~1", "last", "--file", "digits.kdl"],
    );
    let said = text(&out.stdout);
    assert!(
        said.contains("holdout: changed\n  source file holdout.csv changed\n"),
        "{said}"
    );
    assert!(said.contains("train: same\n"), "{said}");
}

#[test]
fn the_runs_of_a_manifest_that_does_not_exist_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = pipeline(dir.path(), &["runs", "missing.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "error: cannot read missing.kdl: No such file or directory (os error 2), and no runs of it are recorded\n  help: pass the manifest's path: `pipeline runs FILE`\n"
    );
    assert!(out.stdout.is_empty());
}
