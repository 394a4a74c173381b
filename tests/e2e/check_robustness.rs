//! `pipeline check` (and `status`, `explain`) on what users and scripts throw at them:
//! values from `--set`, huge integers, deep nesting, long lines, thousands of duplicate
//! keys, oversized files, bad command lines under `--json`, and a reader that goes away.
//! Rendered output is compared whole against `tests/fixtures/` (`PIPELINE_BLESS=1`
//! rewrites them; review the diff).

use crate::common;

use crate::common::{assert_fixture, pipeline, root, text};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// The digits example with `edit` applied, written as `name` into a fresh directory.
fn project(name: &str, edit: impl FnOnce(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(root().join("examples/digits.kdl")).unwrap();
    std::fs::write(dir.path().join(name), edit(example)).unwrap();
    dir
}

fn check_fails_with(dir: &Path, args: &[&str], fixture: &str) {
    let out = pipeline(dir, args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_fixture(fixture, &text(&out.stderr));
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {}", text(bytes)))
}

#[test]
fn a_value_from_set_is_named_not_pinned_on_the_text_it_replaced() {
    // The example says `device "auto"` and `precision "32"`; neither is what is wrong.
    let dir = project("m.kdl", |m| m);
    check_fails_with(
        dir.path(),
        &[
            "check",
            "m.kdl",
            "--set",
            "accelerator.device=cpu",
            "--set",
            "accelerator.precision=16-mixed",
        ],
        "set-overrides.check.stderr",
    );
    // One from the file, one from `--set`: the label stays on the file's own entry.
    let dir = project("m.kdl", |m| m.replace("device \"auto\"", "device \"cpu\""));
    check_fails_with(
        dir.path(),
        &["check", "m.kdl", "--set", "accelerator.precision=16-mixed"],
        "set-override-and-file.check.stderr",
    );
}

#[test]
fn integers_out_of_range_stop_at_check_with_their_span() {
    let dir = project("m.kdl", |m| {
        m.replace("linear 10", "linear 18446744073709551619")
            .replace("precision \"32\"", "precision \"32\"\n    threads 100000")
    });
    check_fails_with(
        dir.path(),
        &["check", "m.kdl"],
        "huge-integers.check.stderr",
    );
}

#[test]
fn deep_nesting_is_a_diagnostic_not_a_crash() {
    let dir = project("m.kdl", |m| {
        format!("{m}x {}{}\n", "{ x ".repeat(1300), "}".repeat(1300))
    });
    check_fails_with(dir.path(), &["check", "m.kdl"], "deep-nesting.check.stderr");
    let out = pipeline(dir.path(), &["check", "--json", "m.kdl"]);
    assert_eq!(
        json(&out.stdout)["diagnostics"][0]["code"],
        "pipeline::manifest::too_deep"
    );
}

#[test]
fn a_problem_past_column_65535_is_located_not_drawn() {
    let dir = project("m.kdl", |m| format!("{m}{}bogus 1\n", " ".repeat(70_000)));
    check_fails_with(dir.path(), &["check", "m.kdl"], "long-line.check.stderr");
    let out = pipeline(dir.path(), &["check", "--json", "m.kdl"]);
    let d = &json(&out.stdout)["diagnostics"][0];
    assert_eq!(d["column"], 70_001);
}

#[test]
fn thousands_of_duplicate_keys_show_fifty_and_count_the_rest() {
    let dir = project("m.kdl", |m| {
        m.replace(
            "train {",
            &format!("train {{\n{}", "    epochs 1\n".repeat(10_000)),
        )
    });
    let out = pipeline(dir.path(), &["check", "m.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("pipeline::manifest::duplicate_key").count(),
        50
    );
    assert!(
        stderr.ends_with(
            "… and 9950 more in m.kdl (9950 errors, 0 warnings): fix those above first, or see them all with --json\n\n"
        ),
        "{}",
        &stderr[stderr.len().saturating_sub(300)..]
    );
    let out = pipeline(dir.path(), &["check", "--json", "m.kdl"]);
    let v = json(&out.stdout);
    assert_eq!(v["diagnostics"].as_array().unwrap().len(), 10_000);
    assert_eq!(v["diagnostics"][9999]["line"], 10_037);
}

/// Thousands of stages that need a stage that does not exist: each diagnostic lists at
/// most a few of the other stages and counts the rest, so the output grows with the
/// stages, not with their square (a 119 KB manifest printed 318 MB of JSON in 3.9 s).
#[test]
fn stages_needing_a_missing_stage_each_get_a_bounded_diagnostic() {
    let dir = project("many.kdl", |m| {
        let mut m = m;
        for i in 0..3000 {
            m += &format!("eval \"e{i}\" needs=\"gone\"\n");
        }
        m
    });
    let out = pipeline(dir.path(), &["check", "many.kdl", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.len() < 4 << 20, "{} bytes", out.stdout.len());
    let report = json(&out.stdout);
    let diagnostics = report["diagnostics"].as_array().unwrap();
    let unknown: Vec<&Value> = diagnostics
        .iter()
        .filter(|d| d["code"] == "pipeline::stage::unknown_dependency")
        .collect();
    assert_eq!(unknown.len(), 3000);
    for d in &unknown {
        let help = d["help"].as_str().unwrap();
        assert!(help.len() < 400, "{help}");
        assert!(help.ends_with("and 2982 more"), "{help}");
    }
    let out = pipeline(dir.path(), &["check", "many.kdl"]);
    assert!(out.stderr.len() < 64 << 10, "{} bytes", out.stderr.len());
    let stderr = text(&out.stderr);
    let second = stderr[1..].find("\npipeline::").unwrap();
    assert_fixture("needs-missing-many.stderr", &stderr[..second + 2]);
}

#[test]
fn a_manifest_over_128_kib_is_refused_at_once() {
    let dir = project("m.kdl", |m| {
        format!("{m}{}", "// a comment line\n".repeat(600_000))
    });
    let out = pipeline(dir.path(), &["check", "--json", "m.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out.stdout);
    assert_eq!(v["diagnostics"][0]["code"], "pipeline::manifest::too_large");
    assert_eq!(v["diagnostics"].as_array().unwrap().len(), 1);
}

#[test]
fn every_json_exit_of_check_and_status_prints_one_document() {
    let dir = project("m.kdl", |m| m.replace("linear 10", "linear 0"));
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["check", "--json", "m.kdl", "--set", "optimizer.lr"],
            2,
            "pipeline::cli::usage",
        ),
        (
            &["check", "--json", "m.kdl", "--bogus"],
            2,
            "pipeline::cli::usage",
        ),
        (
            &["check", "--json", "missing.kdl"],
            1,
            "pipeline::manifest::unreadable",
        ),
        (
            &["check", "--json", "m.kdl"],
            1,
            "pipeline::manifest::out_of_range",
        ),
        (
            &["status", "--json", "m.kdl", "--set", "=1"],
            2,
            "pipeline::cli::usage",
        ),
        (
            &["status", "--json", "missing.kdl"],
            1,
            "pipeline::manifest::unreadable",
        ),
        (
            &["status", "--json", "m.kdl"],
            1,
            "pipeline::manifest::out_of_range",
        ),
    ];
    for (args, status, code) in cases {
        let out = pipeline(dir.path(), args);
        assert_eq!(out.status.code(), Some(*status), "{args:?}");
        let v = json(&out.stdout);
        assert_eq!(v["ok"], false, "{args:?}");
        assert_eq!(v["diagnostics"][0]["code"], *code, "{args:?}: {v}");
        assert!(v["diagnostics"][0]["help"].is_string(), "{args:?}: {v}");
    }
    // Help is an answer, not an error, with or without --json.
    let out = pipeline(dir.path(), &["check", "--json", "--help"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("Usage: pipeline check"));
}

/// Runs `pipeline ARGS` with stdout a pipe whose reading end is already closed.
fn with_closed_stdout(dir: &Path, args: &[&str]) -> std::process::Output {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe() fills two fresh descriptors; each is owned once below.
    let (read, write) = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(read);
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .expect("the pipeline binary runs")
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let dir = project("m.kdl", |m| m);
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/digits.csv.gz"), b"").unwrap();
    for args in [
        &["explain"][..],
        &["explain", "model"],
        &["check", "--json", "m.kdl"],
        &["graph", "m.kdl"],
        &["check", "--json", "m.kdl", "--set", "x"],
    ] {
        let out = with_closed_stdout(dir.path(), args);
        assert_eq!(
            out.status.code(),
            Some(pipeline_cli::BROKEN_PIPE_STATUS),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            !text(&out.stderr).contains("internal error"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let digits = common::digits_project();
    let out = with_closed_stdout(digits.path(), &["status", "digits.kdl"]);
    assert_eq!(
        out.status.code(),
        Some(pipeline_cli::BROKEN_PIPE_STATUS),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stderr), "");
}

#[test]
fn explain_documents_every_layer_and_the_split() {
    for (what, fixture) in [
        ("model", "explain-model.stdout"),
        ("model.linear", "explain-model-linear.stdout"),
        ("model.parallel", "explain-model-parallel.stdout"),
        ("block", "explain-block.stdout"),
        ("data.split", "explain-data-split.stdout"),
        ("data.split.seed", "explain-data-split-seed.stdout"),
    ] {
        let out = pipeline(&root(), &["explain", what]);
        assert!(out.status.success(), "{what}: {}", text(&out.stderr));
        assert_fixture(fixture, &text(&out.stdout));
    }
    let schema = manifests::schema::LAYERS
        .iter()
        .chain(manifests::schema::STRUCTURES);
    for layer in schema.copied() {
        let out = pipeline(&root(), &["explain", &format!("model.{}", layer.name)]);
        assert!(out.status.success(), "{}", layer.name);
        for key in layer.keys {
            assert!(
                text(&out.stdout).contains(&format!("\nmodel.{}.{}\n", layer.name, key.name)),
                "model.{}.{}",
                layer.name,
                key.name
            );
        }
    }
    for (what, error) in [
        (
            "model.lnear",
            "error: `model` has no layer `lnear`\n  help: did you mean `linear`?\n",
        ),
        (
            "data.split.sed",
            "error: `data.split` has no key `sed`\n  help: did you mean `seed`?\n",
        ),
    ] {
        let out = pipeline(&root(), &["explain", what]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(text(&out.stderr), error);
    }
}

/// Mistakes `check` finds in files and in a model's shapes, each by its code and
/// message: (the manifest's data and model, a stage, the code, the message's start).
#[test]
fn check_names_what_is_wrong_with_files_and_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("d.csv"), "1,2,0\n3,4,1\n").unwrap();
    std::fs::write(d.join("notes.txt"), "not a module").unwrap();
    let tail = "loss \"cross-entropy\"\noptimizer \"adam\"\n";
    let cases = [
        (
            "data {\n    source \"d.npz\"\n    features \"a\" \"b\"\n}\nmodel { linear 2; }\ntrain\n",
            "pipeline::data::features_not_an_array",
            "for NPZ data, `features` is the name of one array in the file",
        ),
        (
            "data {\n    source \"d.npy\"\n    delimiter \";\"\n}\nmodel { linear 2; }\ntrain\n",
            "pipeline::data::key_not_for_format",
            "`data.delimiter` does not apply to",
        ),
        (
            "data { source \"d.csv\"; }\nmodel {\n    parallel \"add\" {\n        branch { linear 4; }\n        branch { linear 3; }\n    }\n}\ntrain\n",
            "pipeline::model::branch_mismatch",
            "",
        ),
        (
            "data { source \"d.csv\"; }\nmodel { torchscript \"nope.pt\"; }\ntrain\n",
            "pipeline::model::missing_torchscript",
            "the TorchScript model",
        ),
        (
            "data { source \"d.csv\"; }\nmodel { linear 2; }\nmetric \"m\" torchscript=\"notes.txt\" mode=\"min\"\ntrain\neval \"e\" needs=\"train\" { metrics \"m\"; }\n",
            "pipeline::metric::not_torchscript",
            "",
        ),
    ];
    for (text_, code, start) in cases {
        let (head, stages) = text_.split_at(text_.find("train").unwrap());
        std::fs::write(d.join("m.kdl"), format!("{head}{tail}{stages}")).unwrap();
        let out = pipeline(d, &["check", "m.kdl", "--json"]);
        let report = json(&out.stdout);
        let found = report["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["code"] == code && x["message"].as_str().unwrap().starts_with(start));
        assert!(found, "{text_}\n{report:#}");
    }
    std::fs::write(
        d.join("m.kdl"),
        format!("data {{ source \"d.csv\"; }}\nmodel {{ linear 2; }}\n{tail}train\n"),
    )
    .unwrap();
    // Starting weights are looked for when the stage runs.
    let init = format!("data {{ source \"d.csv\"; }}\nmodel {{ linear 2; }}\n{tail}train init=\"nope.safetensors\"\n");
    std::fs::write(d.join("init.kdl"), init).unwrap();
    let out = pipeline(d, &["run", "init.kdl"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("pipeline::train::missing_init"),
        "{}",
        text(&out.stderr)
    );
    let out = pipeline(d, &["run", "m.kdl", "--stage", "trian"]);
    assert!(!out.status.success());
    let shown = text(&out.stderr);
    assert!(
        shown.contains("pipeline::run::unknown_stage")
            && shown.contains("--stage trian: the manifest has no such stage")
            && shown.contains("did you mean `train`?"),
        "{shown}"
    );
}

/// What only the run can find, or `check` finds in the files, fails with its code:
/// (the data and model, what follows `optimizer`, the code).
#[test]
fn failures_found_in_the_files_are_named_by_their_code() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("d.csv"), "1,2,0\n3,4,1\n5,6,0\n").unwrap();
    std::fs::write(d.join("holes.csv"), "1,,0\n,4,1\n5,6,\n").unwrap();
    std::fs::create_dir(d.join("adir")).unwrap();
    let tail = "loss \"cross-entropy\"\noptimizer \"adam\"\n";
    let cases = [
        (
            "data {\n    source \"holes.csv\"\n    missing \"drop-row\"\n}\nmodel { linear 2; }\n",
            "train\n",
            "pipeline::data::nothing_left",
        ),
        (
            "data { source \"d.csv\"; }\nmodel { torchscript \"adir\"; }\n",
            "train\n",
            "pipeline::model::not_a_file",
        ),
        (
            "data { source \"d.csv\"; }\nmodel { linear 2; }\n",
            "train\npredict \"p\" needs=\"train\" source=\"d.csv\" output=\"adir\"\n",
            "pipeline::predictions::not_a_file",
        ),
        (
            "data { source \"shard-*.csv\"; }\nmodel { linear 2; }\n",
            "train\n",
            "pipeline::data::shards_not_npy",
        ),
    ];
    for (head, stages, code) in cases {
        std::fs::write(d.join("m.kdl"), format!("{head}{tail}{stages}")).unwrap();
        let out = pipeline(d, &["run", "m.kdl"]);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains(code),
            "{head}{stages}\n{}",
            text(&out.stderr)
        );
    }
}
