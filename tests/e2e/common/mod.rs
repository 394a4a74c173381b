//! What the end-to-end tests share: running the binary, fixtures, a project directory.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn pipeline(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .output()
        .expect("the pipeline binary runs")
}

/// `pipeline` with every file it writes limited to `bytes` (`RLIMIT_FSIZE`, with
/// `SIGXFSZ` ignored): a write past the limit fails with `EFBIG`, as one on a full disk
/// fails with `ENOSPC`, at the same call, and a root process cannot ignore it.
pub fn pipeline_with_files_up_to(dir: &Path, args: &[&str], bytes: u64) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"));
    command
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR");
    // SAFETY: between fork and exec only async-signal-safe calls are made.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            match libc::setrlimit(libc::RLIMIT_FSIZE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    command.output().expect("the pipeline binary runs")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Compares `actual` with the fixture file, or rewrites it under PIPELINE_BLESS=1.
pub fn assert_fixture(name: &str, actual: &str) {
    let path = root().join("tests/fixtures").join(name);
    if std::env::var_os("PIPELINE_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing; run with PIPELINE_BLESS=1", path.display()));
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

/// `text` with every stage's elapsed time ("FAILED after 0.01s") written as "…s", for
/// fixtures of runs whose times vary from one machine to the next.
pub fn without_elapsed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" after ") {
        let (head, tail) = rest.split_at(at + " after ".len());
        out.push_str(head);
        let digits = tail
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(tail.len());
        if digits > 0 && tail[digits..].starts_with('s') {
            out.push('…');
            rest = &tail[digits..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The digits example in a fresh directory (so runs write there, not into examples/).
pub fn digits_project() -> tempfile::TempDir {
    let data = root().join("examples/data/digits.csv.gz");
    assert!(
        data.is_file(),
        "{} is missing: run scripts/setup.sh (scripts/test.sh does)",
        data.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::copy(&data, dir.path().join("data/digits.csv.gz")).unwrap();
    std::fs::copy(
        root().join("examples/digits.kdl"),
        dir.path().join("digits.kdl"),
    )
    .unwrap();
    dir
}

/// A small digits MLP with an eval and a checkpoint stage, for the cache's tests.
pub const SMALL: &str = r#"pipeline "small"
seed 3
data {
    source "data/digits.csv.gz"
    scale "minmax"
    split train=0.8 test=0.2
}
model {
    linear 32
    relu
    linear 10
}
loss "cross-entropy"
optimizer "adam" lr=0.01 weight-decay=0.0
train epochs=3 batch-size=64
eval "test" needs="train" split="test"
checkpoint "export" needs="train" path="out/model.safetensors"
"#;

/// A project with the digits data and `small.kdl` (`manifest`).
pub fn small_project(manifest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::copy(
        root().join("examples/data/digits.csv.gz"),
        dir.path().join("data/digits.csv.gz"),
    )
    .unwrap();
    std::fs::write(dir.path().join("small.kdl"), manifest).unwrap();
    dir
}

/// The float32 tensors of a safetensors file, by name.
pub fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut out: Vec<(String, Vec<f32>)> = header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let (s, e) = (
                v["data_offsets"][0].as_u64().unwrap() as usize,
                v["data_offsets"][1].as_u64().unwrap() as usize,
            );
            let data = bytes[8 + n + s..8 + n + e]
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (k.clone(), data)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The metadata JSON beside the checkpoint of `pipeline run --json`'s stage `stage`
/// (run in `dir`).
pub fn checkpoint_metadata(dir: &Path, report: &Value, stage: usize) -> Value {
    let path = report["stages"][stage]["outputs"][1]
        .as_str()
        .expect("a checkpoint stage's outputs: the weights, then the metadata");
    serde_json::from_slice(&std::fs::read(dir.join(path)).unwrap()).unwrap()
}

/// The largest difference between two sets of tensors (the same names, in order).
pub fn worst_difference(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|((_, x), (_, y))| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0f32, f32::max)
}

/// The step of the last snapshot in `dir`'s cache, if any.
pub fn snapshot_step(dir: &Path) -> Option<u64> {
    let snapshots = std::fs::read_dir(dir.join(".pipeline/cache/snapshots")).ok()?;
    let stage = snapshots.flatten().next()?.path();
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stage.join("snapshot.json")).ok()?).ok()?;
    index["position"]["step"].as_u64()
}

/// The epoch of the latest snapshot in `dir`'s cache (rank 0's when there are several).
pub fn snapshot_epoch(dir: &Path) -> Option<u64> {
    let stages = std::fs::read_dir(dir.join(".pipeline/cache/snapshots")).ok()?;
    let stage = stages.flatten().next()?.path();
    let rank0 = stage.join("rank-0-of-2");
    let index = match rank0.exists() {
        true => rank0.join("snapshot.json"),
        false => stage.join("snapshot.json"),
    };
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(index).ok()?).ok()?;
    index["position"]["epoch"].as_u64()
}

/// The project's torch venv's python (`$PIPELINE_VENV`, made by `scripts/setup.sh`).
pub fn venv_python() -> PathBuf {
    let venv = std::env::var_os("PIPELINE_VENV").expect("PIPELINE_VENV: run scripts/test.sh");
    Path::new(&venv).join("bin/python")
}

/// Runs `code` with the venv's python in `dir`, which must succeed; its stdout. (From a
/// file: TorchScript reads a class's source, which `python -c` does not keep.)
pub fn py(dir: &Path, code: &str) -> String {
    let file = dir.join("make.py");
    std::fs::write(&file, code).unwrap();
    let out = Command::new(venv_python())
        .arg(&file)
        .current_dir(dir)
        .output()
        .expect("the venv's python runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// Starts `pipeline run MANIFEST` in `dir` and kills it (SIGKILL: no chance to clean
/// up) once a snapshot is past `step`; the step of the last snapshot.
pub fn kill_after_snapshot(dir: &Path, manifest: &str, step: u64) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", manifest])
        .current_dir(dir)
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while snapshot_step(dir).is_none_or(|s| s < step) {
        assert!(std::time::Instant::now() < deadline, "no snapshot appeared");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it could be killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    snapshot_step(dir).unwrap()
}

/// The lines of the run directory's `metrics.jsonl` whose `record` is `kind` (`epoch`,
/// `step`, `validation`, `eval`, `predict`), in order.
pub fn records(run_dir: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["record"] == kind)
        .collect()
}

/// `pipeline run MANIFEST --json ARGS` in `dir`, which must succeed: its report.
pub fn run_json(dir: &Path, manifest: &str, args: &[&str]) -> Value {
    let mut all = vec!["run", manifest, "--json"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Each stage's name and status in a `--json` report.
pub fn statuses(report: &Value) -> Vec<(String, String)> {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Runs the digits example in `dir` for `epochs` epochs with `--set`s `set`; the run's id.
pub fn run_digits(dir: &Path, epochs: u64, set: &[&str]) -> String {
    let epochs = format!("train.epochs={epochs}");
    let mut args = vec!["run", "digits.kdl", "--json", "--set", &epochs];
    for s in set {
        args.extend(["--set", s]);
    }
    let out = pipeline(dir, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let run_dir = report["run_dir"].as_str().unwrap();
    Path::new(run_dir)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The stderr of `pipeline ARGS` in `dir`, which must exit with `code`.
pub fn refused(dir: &Path, args: &[&str], code: i32) -> String {
    let out = pipeline(dir, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// The header of an `.npy` file (format 1.0) of `dtype` (`<f4`, `<i8`) and `shape`.
pub fn npy_header(dtype: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| format!("{d},")).collect();
    let mut header = format!(
        "{{'descr': '{dtype}', 'fortran_order': False, 'shape': ({}), }}",
        dims.join(" ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    bytes
}

/// Numbers in [0, 1) drawn from `seed` (a linear congruential generator: the same data on
/// every machine, without a crate for it).
pub fn draws(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as f64 / (1u64 << 31) as f64
    }
}

/// The run's `split.json` (the data rows of each split), from its `--json` report.
pub fn split_json(dir: &Path, report: &serde_json::Value) -> serde_json::Value {
    let run_dir = dir.join(
        report["run_dir"]
            .as_str()
            .expect("the report names its run"),
    );
    serde_json::from_slice(&std::fs::read(run_dir.join("split.json")).unwrap()).unwrap()
}
