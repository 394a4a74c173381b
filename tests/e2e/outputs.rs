//! Outputs never replace what is not theirs: a checkpoint `path` that would overwrite an
//! input, another stage's output or a device is refused by `check`; at run time a file
//! already at the path is replaced only if `pipeline` wrote it, and the cache puts a
//! cached checkpoint back only under the same rule.

use crate::common::{assert_fixture, pipeline, root, text};
use std::path::Path;

#[test]
fn check_refuses_paths_that_overwrite_inputs_each_other_or_devices() {
    let dir = root().join("tests/fixtures/outputs");
    let out = pipeline(&dir, &["check", "overwrites.kdl"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fixture("outputs/overwrites.check.stderr", &text(&out.stderr));
    // The manifest itself, under the path the user gave.
    let out = pipeline(
        &dir,
        &[
            "check",
            "overwrites.kdl",
            "--set",
            "over-manifest.path=overwrites.kdl",
        ],
    );
    assert!(
        text(&out.stderr).contains("stage `over-manifest` would overwrite the manifest itself with its weights: overwrites.kdl"),
        "{}",
        text(&out.stderr)
    );
}

const TINY: &str = r#"data { source "tiny.csv"; }
model { linear 3; }
loss "cross-entropy"
optimizer "sgd" lr=0.1
train epochs=1
checkpoint "export" needs="train" path="model.safetensors"
"#;

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("tests/fixtures/data/tiny.csv"),
        dir.path().join("tiny.csv"),
    )
    .unwrap();
    std::fs::write(dir.path().join("p.kdl"), TINY).unwrap();
    dir
}

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["run", "p.kdl"];
    all.extend(args);
    pipeline(dir, &all)
}

#[test]
fn a_file_pipeline_did_not_write_is_never_replaced() {
    let dir = project();
    let mine = dir.path().join("model.safetensors");
    std::fs::write(&mine, b"my own weights, from elsewhere").unwrap();
    let out = run(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let log = text(&out.stderr);
    assert!(
        log.contains(
            "× stage `export`: will not replace model.safetensors: pipeline did not write it"
        ),
        "{log}"
    );
    assert_eq!(
        std::fs::read(&mine).unwrap(),
        b"my own weights, from elsewhere"
    );

    // Its metadata's place is guarded too.
    std::fs::remove_file(&mine).unwrap();
    let notes = dir.path().join("model.json");
    std::fs::write(&notes, b"{\"my\": \"notes\"}").unwrap();
    let out = run(dir.path(), &["--force"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("will not replace model.json: pipeline did not write it"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&notes).unwrap(), b"{\"my\": \"notes\"}");
    std::fs::remove_file(&notes).unwrap();

    // What pipeline wrote, it may write again (a forced rerun, or a cached restore).
    let out = run(dir.path(), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(dir.path(), &["--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A user's file put in its place after the run is not overwritten by the cache.
    std::fs::write(&mine, b"edited by hand").unwrap();
    let out = run(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("will not replace model.safetensors: pipeline did not write it"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&mine).unwrap(), b"edited by hand");
    // Once it is gone, the cache puts the checkpoint back without training.
    std::fs::remove_file(&mine).unwrap();
    let out = run(dir.path(), &["--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["status"] == "cached"));
    assert!(mine.is_file());
}

#[test]
fn a_link_from_the_path_to_an_input_is_refused() {
    let dir = project();
    // A link to the data at the checkpoint's path: the rules follow it to the data.
    std::os::unix::fs::symlink(
        dir.path().join("tiny.csv"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let before = std::fs::read(dir.path().join("tiny.csv")).unwrap();
    let out = run(dir.path(), &["--no-cache"]);
    assert_eq!(out.status.code(), Some(1));
    let log = text(&out.stderr);
    assert!(log.contains("overwrite the data file"), "{log}");
    assert_eq!(std::fs::read(dir.path().join("tiny.csv")).unwrap(), before);
    assert!(
        std::fs::symlink_metadata(dir.path().join("model.safetensors"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Every cache entry of a checkpoint stage in `dir`'s cache holds the checkpoint that
/// stage computed: its metadata names the entry's own fingerprint. How many there are.
fn checkpoint_entries_are_their_own(dir: &Path) -> usize {
    let entries = dir.join(".pipeline/cache/entries");
    let mut checked = 0;
    for entry in std::fs::read_dir(&entries).unwrap() {
        let entry = entry.unwrap().path();
        let metadata = entry.join("outputs/checkpoint.json");
        if !metadata.exists() {
            continue;
        }
        let metadata: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&metadata).unwrap()).unwrap();
        let fingerprint = entry.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            metadata["fingerprint"], fingerprint,
            "the entry {fingerprint} holds another stage's checkpoint"
        );
        checked += 1;
    }
    checked
}

/// Issue 32: a stage stores what it produced, never what it later finds at its path.
/// Before, every point of a sweep wrote the same checkpoint `path` and then stored the
/// file found there: with two points at once, one point's entry held the other's
/// weights, and a later run of its settings was answered with them. 40 points, two at a
/// time, each pair finishing together.
#[test]
fn points_run_at_once_store_their_own_checkpoints() {
    let dir = project();
    let d = dir.path();
    let seeds: Vec<String> = (1..=20).map(|s| s.to_string()).collect();
    let out = pipeline(
        d,
        &[
            "sweep",
            "p.kdl",
            "--grid",
            &format!("seed={}", seeds.join(",")),
            "--grid",
            "optimizer.lr=0.1,0.2",
            "--jobs",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(checkpoint_entries_are_their_own(d), 40);
    // And what the path holds is one of them, whole: weights and metadata of one stage.
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("model.json")).unwrap()).unwrap();
    let stored = d
        .join(".pipeline/cache/entries")
        .join(metadata["fingerprint"].as_str().unwrap())
        .join("outputs/checkpoint.safetensors");
    assert_eq!(
        std::fs::read(d.join("model.safetensors")).unwrap(),
        std::fs::read(stored).unwrap()
    );
}
