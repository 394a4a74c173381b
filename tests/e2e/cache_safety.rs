//! End-to-end tests of what the cache must never do: delete a user's files, write into a
//! directory it did not make, serve an entry it cannot vouch for, trust a data file's
//! mtime, or hang on a pipe or a device (issue 11).

use crate::common::{self, small_project, text, SMALL};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Runs the binary in `dir` with `PIPELINE_CACHE_DIR` set to `env` (unset when `None`),
/// failing the test instead of hanging when it does not return within a minute.
fn pipeline_env(dir: &Path, env: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pipeline"));
    command
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(value) = env {
        command.env("PIPELINE_CACHE_DIR", value);
    }
    let mut child = command.spawn().expect("the pipeline binary runs");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("`pipeline {}` did not return", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn pipeline(dir: &Path, args: &[&str]) -> Output {
    pipeline_env(dir, None, args)
}

/// `pipeline run small.kdl ARGS --json`, which must succeed.
fn run(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["run", "small.kdl", "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn statuses(report: &Value) -> Vec<String> {
    report["stages"]
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
}

fn set_mtime(path: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// A directory of a user's files that would look like a cache to a careless tool:
/// `tmp/notes/draft.txt` (two days old) and `entries/photos/x.jpg`.
fn user_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tmp/notes")).unwrap();
    std::fs::create_dir_all(dir.path().join("entries/photos")).unwrap();
    std::fs::write(dir.path().join("tmp/notes/draft.txt"), "my draft").unwrap();
    std::fs::write(dir.path().join("entries/photos/x.jpg"), "a photo").unwrap();
    let old = SystemTime::now() - Duration::from_secs(2 * 86_400);
    set_mtime(&dir.path().join("tmp/notes/draft.txt"), old);
    for d in ["tmp/notes", "tmp", "entries/photos", "entries"] {
        std::fs::File::open(dir.path().join(d))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    dir
}

fn assert_user_files_survive(dir: &Path) {
    assert_eq!(
        std::fs::read_to_string(dir.join("tmp/notes/draft.txt")).unwrap(),
        "my draft"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("entries/photos/x.jpg")).unwrap(),
        "a photo"
    );
    assert!(!dir.join("CACHEDIR.TAG").exists(), "nothing written there");
}

#[test]
fn an_empty_cache_variable_or_option_is_unset_not_the_current_directory() {
    let dir = user_files();
    for (env, args) in [
        (Some(""), &["cache", "gc", "--older-than", "0"][..]),
        (Some(""), &["cache", "verify", "--remove"][..]),
        (Some(""), &["cache", "gc", "--max-size", "0"][..]),
        (
            None,
            &["cache", "gc", "--older-than", "0", "--cache-dir", ""][..],
        ),
        (None, &["cache", "verify", "--remove", "--cache-dir="][..]),
    ] {
        let out = pipeline_env(dir.path(), env, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "./.pipeline/cache: no cache there yet, nothing to do\n",
            "{args:?}"
        );
        assert_user_files_survive(dir.path());
    }
    let out = pipeline_env(dir.path(), Some(""), &["cache", "ls"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "./.pipeline/cache · 0 entries · 0 B\n");
    assert!(!dir.path().join(".pipeline").exists(), "ls creates nothing");
}

#[test]
fn a_directory_pipeline_did_not_make_is_refused_by_every_cache_command() {
    let dir = user_files();
    for (env, args) in [
        (Some("."), &["cache", "gc", "--older-than", "0"][..]),
        (
            None,
            &["cache", "gc", "--max-size", "0", "--cache-dir", "."][..],
        ),
        (
            None,
            &["cache", "verify", "--remove", "--cache-dir", "."][..],
        ),
        (None, &["cache", "ls", "--cache-dir", "."][..]),
    ] {
        let out = pipeline_env(dir.path(), env, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("pipeline::cache::not_a_cache")
                && err.contains(". is not a pipeline cache: it holds ")
                && err.contains("and no CACHEDIR.TAG")
                && err.contains("give a new or empty directory with --cache-dir DIR"),
            "{args:?}: {err}"
        );
        assert_user_files_survive(dir.path());
    }
}

#[test]
fn run_and_status_refuse_a_directory_pipeline_did_not_make() {
    let dir = small_project(SMALL);
    let theirs = user_files();
    let cache = theirs.path().to_str().unwrap();
    for args in [
        &["status", "small.kdl", "--cache-dir", cache][..],
        &["run", "small.kdl", "--cache-dir", cache][..],
    ] {
        let out = pipeline(dir.path(), args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("{cache} is not a pipeline cache")),
            "{args:?}: {err}"
        );
        assert_user_files_survive(theirs.path());
    }
}

#[test]
fn older_than_must_be_a_number_of_days() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["-1", "NaN", "inf", "-inf", "soon"] {
        let out = pipeline(dir.path(), &["cache", "gc", &format!("--older-than={bad}")]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            text(&out.stderr).contains(&format!(
                "`{bad}` is not a number of days: give 0 or more, such as 30 or 0.5"
            )),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
    let out = pipeline(dir.path(), &["cache", "gc", "--older-than", "-1"]);
    assert!(text(&out.stderr).contains("`-1` is not a number of days"));
}

#[test]
fn master_port_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = pipeline(
        dir.path(),
        &[
            "run",
            "small.kdl",
            "--nproc-per-node",
            "2",
            "--master-port",
            "0",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("port 0 cannot be a rendezvous port"),
        "{}",
        text(&out.stderr)
    );
}

#[cfg(unix)]
#[test]
fn pipes_and_devices_as_inputs_are_refused_never_waited_on() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]); // a cache for `gc` to tidy
    let fifo = dir.path().join("data/fifo.csv");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo works");
    for (key, manifest) in [
        (
            "data.source: data/fifo.csv is a FIFO (named pipe)",
            SMALL.replace("data/digits.csv.gz", "data/fifo.csv"),
        ),
        (
            "data.source: /dev/zero is a character device",
            SMALL.replace("data/digits.csv.gz", "/dev/zero").replace(
                "source \"/dev/zero\"",
                "source \"/dev/zero\"\n    format \"csv\"",
            ),
        ),
        (
            "train.init: /dev/urandom is a character device",
            SMALL.replace("batch-size=64", "batch-size=64 init=\"/dev/urandom\""),
        ),
    ] {
        std::fs::write(dir.path().join("small.kdl"), &manifest).unwrap();
        for args in [
            &["status", "small.kdl"][..],
            &["cache", "gc", "small.kdl"][..],
            &["run", "small.kdl"][..],
        ] {
            let out = pipeline(dir.path(), args);
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            let err = text(&out.stderr);
            assert!(
                err.contains(key) && err.contains("not a regular file"),
                "{args:?}: {err}"
            );
            assert!(err.contains("help: name a regular file"), "{err}");
        }
    }
}

#[test]
fn gc_takes_set_like_run() {
    let dir = small_project(SMALL);
    run(dir.path(), &["--set", "optimizer.lr=0.02"]);
    let gc = |args: &[&str]| {
        let mut all = vec!["cache", "gc", "small.kdl", "--dry-run"];
        all.extend(args);
        let out = pipeline(dir.path(), &all);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert!(gc(&["--set", "optimizer.lr=0.02"]).starts_with("would remove 0 entries"));
    assert!(gc(&[]).starts_with("would remove 3 entries"));
}

/// The path of the train stage's entry.
fn train_entry(dir: &Path) -> std::path::PathBuf {
    let out = pipeline(dir, &["cache", "ls", "--json"]);
    let ls: Value = serde_json::from_slice(&out.stdout).unwrap();
    let fp = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "train")
        .unwrap()["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    dir.join(".pipeline/cache/entries").join(fp)
}

#[test]
fn entries_are_checksummed_and_must_hold_what_their_kind_requires() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    let entry = train_entry(dir.path());
    assert!(dir.path().join(".pipeline/cache/CACHEDIR.TAG").is_file());
    let json = entry.join("entry.json");
    let original = std::fs::read_to_string(&json).unwrap();

    // Edited metrics: reported corrupt, rebuilt.
    let mut edited: Value = serde_json::from_str(&original).unwrap();
    edited["metrics"]["loss"] = 0.0.into();
    std::fs::write(&json, serde_json::to_vec_pretty(&edited).unwrap()).unwrap();
    let out = pipeline(dir.path(), &["cache", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("(train): entry.json does not match its checksum"),
        "{}",
        text(&out.stderr)
    );

    // A valid, checksummed entry that lists no outputs: never served as fresh.
    edited = serde_json::from_str(&original).unwrap();
    edited["outputs"] = Value::Array(vec![]);
    let bytes = serde_json::to_vec_pretty(&edited).unwrap();
    std::fs::write(&json, &bytes).unwrap();
    let fp = entry.file_name().unwrap().to_str().unwrap();
    std::fs::write(
        entry.join("entry.tag"),
        format!(
            "pipeline cache entry\nfingerprint {fp}\nentry.json blake3 {}\n",
            cache::hash_bytes(&bytes)
        ),
    )
    .unwrap();
    let out = pipeline(dir.path(), &["cache", "verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("corrupt: {fp} (train): output model.safetensors is not in the entry; the next run that needs it rebuilds it\n")
    );
    let out = pipeline(dir.path(), &["status", "small.kdl"]);
    assert!(
        text(&out.stdout).contains(
            "stale   the cache entry is unusable: output model.safetensors is not in the entry"
        ),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        statuses(&run(dir.path(), &[])),
        ["train ran", "test cached", "export cached"]
    );
    let out = pipeline(dir.path(), &["cache", "verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn gc_and_verify_in_a_real_cache_leave_foreign_names_alone() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    let cache = dir.path().join(".pipeline/cache");
    std::fs::create_dir_all(cache.join("tmp/notes")).unwrap();
    std::fs::write(cache.join("tmp/notes/draft.txt"), "draft").unwrap();
    std::fs::create_dir_all(cache.join("entries/photos")).unwrap();
    std::fs::write(cache.join("entries/photos/x.jpg"), "jpg").unwrap();
    let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
    set_mtime(&cache.join("tmp/notes/draft.txt"), old);
    let out = pipeline(dir.path(), &["cache", "verify", "--remove"]);
    assert_eq!(text(&out.stdout), "3 entries checked, 0 corrupt\n");
    let out = pipeline(dir.path(), &["cache", "gc", "--older-than", "0"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("removed 3 entries"));
    assert!(cache.join("tmp/notes/draft.txt").is_file());
    assert!(cache.join("entries/photos/x.jpg").is_file());
}

#[test]
fn an_edit_hidden_by_touch_r_is_seen() {
    let dir = small_project(SMALL);
    let data = dir.path().join("data/digits.csv.gz");
    // Old enough on every clock that the memo keeps its hash.
    set_mtime(&data, SystemTime::now() - Duration::from_secs(3600));
    std::thread::sleep(Duration::from_millis(2100));
    run(dir.path(), &[]);
    let memo = std::fs::read_to_string(dir.path().join(".pipeline/cache/hashes.json")).unwrap();
    assert!(
        memo.contains("digits.csv.gz"),
        "the hash is memoised: {memo}"
    );

    // Same size, same mtime, other content.
    let mtime = std::fs::metadata(&data).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&data).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    set_mtime(&data, mtime);
    let out = pipeline(dir.path(), &["status", "small.kdl"]);
    let status = text(&out.stdout);
    assert!(
        status.contains("stale   data file digits.csv.gz changed"),
        "{status}"
    );
}

#[test]
fn stale_reasons_name_keys_as_the_manifest_writes_them() {
    let dir = small_project(SMALL);
    run(dir.path(), &[]);
    let out = pipeline(
        dir.path(),
        &[
            "status",
            "small.kdl",
            "--set",
            "accelerator.max-norm=1.0",
            "--set",
            "accelerator.shard-remainder=drop",
        ],
    );
    let status = text(&out.stdout);
    assert!(
        status.contains("accelerator.max-norm changed unset → 1.0")
            && status.contains("accelerator.shard-remainder changed \"pad\" → \"drop\""),
        "{status}"
    );
    assert!(!status.contains("distributed"), "{status}");
}

/// An `.npy` file of `rows` × `cols` float32 values, `value(row, col)`.
fn npy_f32(path: &Path, rows: usize, cols: usize, value: impl Fn(usize, usize) -> f32) {
    let mut bytes = common::npy_header("<f4", &[rows, cols]);
    for r in 0..rows {
        for c in 0..cols {
            bytes.extend_from_slice(&value(r, c).to_le_bytes());
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// Issue 32: an input rewritten while a stage reads it. Before, a streamed `.npy`
/// rewritten in place mid-training ended with exit 0 and the result stored under the
/// key of the bytes the run started with; now the stage fails, naming the file, and
/// nothing is stored.
#[test]
fn an_input_rewritten_during_the_run_is_named_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (rows, cols) = (2000, 16);
    let x = d.join("x.npy");
    npy_f32(&x, rows, cols, |r, c| ((r * 7 + c * 3) % 11) as f32 / 11.0);
    let mut labels = common::npy_header("<i8", &[rows]);
    for r in 0..rows {
        labels.extend_from_slice(&((r % 4) as i64).to_le_bytes());
    }
    std::fs::write(d.join("y.npy"), labels).unwrap();
    std::fs::write(
        d.join("small.kdl"),
        r#"seed 1
data { source "x.npy"; labels "y.npy"; load "stream"; split train=0.8 test=0.2; }
model { linear 8; relu; linear 4; }
loss "cross-entropy"
optimizer "sgd" lr=0.01
train epochs=400 batch-size=16
"#,
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "small.kdl"])
        .current_dir(d)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once an epoch is done, the features are rewritten in place: same size, same inode.
    let deadline = Instant::now() + Duration::from_secs(60);
    let trained_an_epoch = || {
        let runs = d.join(".pipeline/runs");
        std::fs::read_dir(runs)
            .into_iter()
            .flatten()
            .flatten()
            .any(|r| {
                std::fs::read_to_string(r.path().join("metrics.jsonl"))
                    .is_ok_and(|m| m.contains("\"record\":\"epoch\""))
            })
    };
    while !trained_an_epoch() {
        assert!(Instant::now() < deadline, "no epoch was trained");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended too soon"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&x).unwrap());
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::File::options().write(true).open(&x).unwrap();
        file.seek(SeekFrom::Start(128)).unwrap();
        file.write_all(&vec![0u8; rows * cols * 4]).unwrap();
    }
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&x).unwrap()),
        inode
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the rewrite"
    );
    let out = child.wait_with_output().unwrap();
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(
        log.contains("pipeline::data::changed_during_run")
            && log.contains(
                "x.npy changed while the stage ran (it was modified); its result was not stored"
            ),
        "{log}"
    );
    let entries = d.join(".pipeline/cache/entries");
    let stored = std::fs::read_dir(&entries).map_or(0, |e| e.count());
    assert_eq!(stored, 0, "nothing is stored");
    // The next run trains on the file as it is now, and stores that (shorter, to be quick).
    let report = run(d, &["--set", "train.epochs=2"]);
    assert_eq!(statuses(&report), ["train ran"]);
}
