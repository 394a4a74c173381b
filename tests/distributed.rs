//! End-to-end tests of distributed runs: `pipeline run --nproc-per-node 2` on the CPU,
//! through c10d's Gloo process group. (NCCL needs a GPU per process: its collectives are
//! tested in `backends/src/process_group.rs`, skipped without CUDA.)

mod common;

use common::{digits_project, pipeline, text};
use serde_json::Value;
use std::path::Path;

const DDP: &str = r#"seed 3
data {
    source "data/digits.csv.gz"
    scale "minmax"
    split train=0.8 test=0.2
}
model {
    linear 64
    tanh
    linear 10
}
loss "cross-entropy"
optimizer "adamw" lr=0.003
schedule "cosine" warmup-epochs=1
accelerator strategy="ddp" max-norm=1.0
train "pretrain" epochs=3 batch-size=16
train "finetune" needs="pretrain" epochs=2 batch-size=16
eval "test" needs="finetune" split="test"
checkpoint "export" needs="finetune" path="out/model.safetensors"
"#;

/// The float32 tensors of a safetensors file, by name.
fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
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

fn project() -> tempfile::TempDir {
    let dir = digits_project();
    std::fs::write(dir.path().join("ddp.kdl"), DDP).unwrap();
    dir
}

fn run(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["run", "ddp.kdl", "--json", "--no-cache"];
    all.extend(args);
    let out = pipeline(dir, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn two_processes_with_batch_b_train_like_one_with_batch_2b() {
    let dir = project();
    let ddp = run(dir.path(), &["--nproc-per-node", "2"]);
    let ddp_weights = tensors(&dir.path().join("out/model.safetensors"));
    let single = run(
        dir.path(),
        &[
            "--set",
            "accelerator.strategy=none",
            "--set",
            "pretrain.batch-size=32",
            "--set",
            "finetune.batch-size=32",
        ],
    );
    let single_weights = tensors(&dir.path().join("out/model.safetensors"));
    assert_eq!(
        ddp["stages"][0]["metrics"]["steps"],
        single["stages"][0]["metrics"]["steps"]
    );
    for ((name, a), (_, b)) in ddp_weights.iter().zip(&single_weights) {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "{name}: differs by {worst}");
    }
    let (a, b) = (
        &ddp["stages"][2]["metrics"]["accuracy"],
        &single["stages"][2]["metrics"]["accuracy"],
    );
    assert_eq!(a, b, "the same test accuracy");

    // zero1: the optimizer state sharded, the same training.
    run(
        dir.path(),
        &[
            "--nproc-per-node",
            "2",
            "--set",
            "accelerator.strategy=zero1",
        ],
    );
    let zero1_weights = tensors(&dir.path().join("out/model.safetensors"));
    for ((name, a), (_, b)) in zero1_weights.iter().zip(&single_weights) {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "zero1 {name}: differs by {worst}");
    }
    // Its checkpoint starts a single-process run like any other.
    std::fs::rename(
        dir.path().join("out/model.safetensors"),
        dir.path().join("zero1.safetensors"),
    )
    .unwrap();
    let started = run(
        dir.path(),
        &[
            "--set",
            "accelerator.strategy=none",
            "--set",
            "pretrain.init=zero1.safetensors",
        ],
    );
    assert_eq!(started["stages"][0]["status"], "ran");
}

#[test]
fn a_strategy_without_processes_processes_without_a_strategy_and_nccl_on_the_cpu_are_refused() {
    let dir = project();
    let out = pipeline(dir.path(), &["run", "ddp.kdl", "--no-cache"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("pipeline::accelerator::strategy_with_one_process"),
        "{}",
        text(&out.stderr)
    );
    let out = pipeline(
        dir.path(),
        &[
            "run",
            "ddp.kdl",
            "--no-cache",
            "--nproc-per-node",
            "2",
            "--set",
            "accelerator.strategy=none",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let log = text(&out.stderr);
    assert!(log.contains("[rank 1]"), "{log}");
    assert!(
        log.contains("2 processes, but no distributed strategy"),
        "{log}"
    );
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipped the NCCL case: `auto` may find a GPU here");
        return;
    }
    // `auto` chooses the CPU here, where NCCL cannot run: refused before the processes
    // meet, by every rank.
    let out = pipeline(
        dir.path(),
        &[
            "run",
            "ddp.kdl",
            "--no-cache",
            "--nproc-per-node",
            "2",
            "--set",
            "accelerator.backend=nccl",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let log = text(&out.stderr);
    assert!(
        log.contains("pipeline::accelerator::nccl_without_cuda")
            && log.contains("`auto` found no GPU and chose the CPU"),
        "{log}"
    );
}

/// The pid of the worker with `RANK=rank` started in `dir`, if running.
fn worker_pid(dir: &Path, rank: u32) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
        let env = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cwd.as_deref() == Some(dir)
            && String::from_utf8_lossy(&cmd).contains("pipeline-worker")
            && env
                .split(|b| *b == 0)
                .any(|v| v == format!("RANK={rank}").as_bytes())
        {
            return Some(pid);
        }
    }
    None
}

#[test]
fn a_killed_worker_fails_the_job_quickly_and_the_rerun_resumes_from_the_cache() {
    let dir = project();
    let text_slow = DDP.replace("epochs=2 batch-size=16", "epochs=40 batch-size=16");
    std::fs::write(dir.path().join("ddp.kdl"), text_slow).unwrap();
    let mut job = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "ddp.kdl", "--nproc-per-node", "2"])
        .current_dir(dir.path())
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until `pretrain` is in the cache and `finetune` is running, then kill rank 1.
    let entries = dir.path().join(".pipeline/cache/entries");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let pid = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "pretrain never finished"
        );
        assert!(
            job.try_wait().unwrap().is_none(),
            "the job ended before the kill"
        );
        let stored = std::fs::read_dir(&entries).map_or(0, |d| d.count());
        if let (1.., Some(pid)) = (stored, worker_pid(dir.path(), 1)) {
            break pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let killed = std::time::Instant::now();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let out = job.wait_with_output().unwrap();
    let stopped = killed.elapsed();
    assert!(!out.status.success());
    assert!(
        stopped < std::time::Duration::from_secs(30),
        "stopped after {stopped:?}"
    );
    let log = text(&out.stderr);
    assert!(
        log.contains("error: worker rank 1 was killed by a signal; stopping the others"),
        "{log}"
    );

    std::fs::write(dir.path().join("ddp.kdl"), DDP).unwrap();
    let out = pipeline(dir.path(), &["status", "ddp.kdl"]);
    assert!(
        text(&out.stdout).contains("pretrain  train       fresh"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn digits_on_two_processes_reaches_the_accuracy_of_one() {
    let dir = digits_project();
    let accuracy = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "digits.kdl",
            "--json",
            "--no-cache",
            "--set",
            "train.epochs=8",
        ];
        args.extend(extra);
        let out = pipeline(dir.path(), &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap()
    };
    let one = accuracy(&[]);
    let two = accuracy(&["--nproc-per-node", "2", "--set", "accelerator.strategy=ddp"]);
    assert!(
        one > 0.9 && (one - two).abs() <= 0.03,
        "one process {one}, two {two}"
    );
}

#[test]
fn the_bucketed_sampler_trains_on_two_processes() {
    let dir = project();
    let report = run(
        dir.path(),
        &[
            "--nproc-per-node",
            "2",
            "--set",
            "accelerator.sampler=bucketed",
            "--set",
            "accelerator.bucket-by=36",
            "--set",
            "accelerator.buckets=3",
        ],
    );
    let accuracy = report["stages"][2]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy > 0.8, "{accuracy}");
    let out = pipeline(
        dir.path(),
        &[
            "run",
            "ddp.kdl",
            "--no-cache",
            "--nproc-per-node",
            "2",
            "--set",
            "accelerator.sampler=bucketed",
            "--set",
            "accelerator.bucket-by=64",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("`bucket-by 64`: a sample has 64 features"),
        "{}",
        text(&out.stderr)
    );
}
