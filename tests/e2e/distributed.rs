//! End-to-end tests of distributed runs: `pipeline run --nproc-per-node 2` on the CPU,
//! through c10d's Gloo process group. (NCCL needs a GPU per process: its collectives are
//! tested in `backends/src/process_group.rs`, skipped without CUDA.)

use crate::common;

use crate::common::{digits_project, pipeline, tensors, text, worst_difference};
use serde_json::Value;
use std::path::Path;

/// A port no process listens on now (the system's choice of a free one).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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
    // Refused by every process (each prints its own diagnostic), before they meet.
    let refused_on_two = |set: &str| {
        let args = [
            "run",
            "ddp.kdl",
            "--no-cache",
            "--nproc-per-node",
            "2",
            "--set",
            set,
        ];
        let out = pipeline(dir.path(), &args);
        assert_eq!(out.status.code(), Some(1));
        text(&out.stderr)
    };
    let log = refused_on_two("accelerator.strategy=none");
    assert!(log.contains("[rank 1]"), "{log}");
    assert!(
        log.contains("2 processes, but no distributed strategy"),
        "{log}"
    );
    if Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipped the NCCL case: `auto` may find a GPU here");
        return;
    }
    // `auto` chooses the CPU here, where NCCL cannot run.
    let log = refused_on_two("accelerator.backend=nccl");
    assert!(
        log.contains("pipeline::accelerator::nccl_without_cuda")
            && log.contains("`auto` found no GPU and chose the CPU"),
        "{log}"
    );
}

/// `freeze` under `ddp` and `zero1`: the frozen layer takes no part (no gradient to
/// average, no optimizer shard) and ends as the stage started it, bit for bit, while the
/// rest trains as one process with the whole batch does.
#[test]
fn frozen_layers_stay_as_they_started_on_two_processes() {
    let dir = project();
    let manifest = DDP.replace(
        "train \"finetune\" needs=\"pretrain\" epochs=2 batch-size=16\n",
        "checkpoint \"pretrained\" needs=\"pretrain\" path=\"out/pretrained.safetensors\"\n\
         train \"finetune\" needs=\"pretrain\" epochs=2 batch-size=16 freeze=\"0.*\"\n",
    );
    assert_ne!(manifest, DDP);
    std::fs::write(dir.path().join("ddp.kdl"), manifest).unwrap();
    // Each run's final weights, checked against the weights its `finetune` started from.
    let trained = |args: &[&str]| {
        run(dir.path(), args);
        let start = tensors(&dir.path().join("out/pretrained.safetensors"));
        let end = tensors(&dir.path().join("out/model.safetensors"));
        for ((name, a), (_, b)) in start.iter().zip(&end) {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert_eq!(same, name.starts_with("0."), "{name} in {args:?}");
        }
        end
    };
    let ddp = trained(&["--nproc-per-node", "2"]);
    let zero1 = trained(&[
        "--nproc-per-node",
        "2",
        "--set",
        "accelerator.strategy=zero1",
    ]);
    let single = trained(&[
        "--set",
        "accelerator.strategy=none",
        "--set",
        "pretrain.batch-size=32",
        "--set",
        "finetune.batch-size=32",
    ]);
    assert!(worst_difference(&ddp, &single) < 1e-5);
    assert!(worst_difference(&zero1, &single) < 1e-5);
}

/// With `sync-batch-norm`, batch-norm layers normalise over the whole batch across the
/// processes, so two processes with batch b train a batch-norm model (weights and running
/// statistics) like one with batch 2b; without it they do not. (Batch-norm follows `tanh`:
/// right after a linear layer it would leave that layer's bias a gradient of pure
/// rounding noise, which Adam blows up differently in each run.)
#[test]
fn synchronised_batch_norm_trains_two_processes_like_one() {
    let dir = project();
    let bn = DDP
        .replace("tanh", "tanh\n    batch-norm")
        .replace("epochs=2 batch-size=16", "epochs=1 batch-size=16");
    assert!(bn.contains("batch-norm"));
    std::fs::write(dir.path().join("ddp.kdl"), bn).unwrap();
    let trained = |args: &[&str]| {
        run(dir.path(), args);
        tensors(&dir.path().join("out/model.safetensors"))
    };
    let single = trained(&[
        "--set",
        "accelerator.strategy=none",
        "--set",
        "pretrain.batch-size=32",
        "--set",
        "finetune.batch-size=32",
    ]);
    assert!(single.iter().any(|(name, _)| name.ends_with("running_var")));
    let synced = trained(&[
        "--nproc-per-node",
        "2",
        "--set",
        "accelerator.sync-batch-norm=true",
    ]);
    let apart = trained(&["--nproc-per-node", "2"]);
    let (with, without) = (
        worst_difference(&synced, &single),
        worst_difference(&apart, &single),
    );
    eprintln!("largest difference from one process: synchronised {with}, per process {without}");
    assert!(with < 1e-4, "synchronised: differs by {with}");
    assert!(
        without > 100.0 * with,
        "per-process batch-norm should differ: {without} (synchronised: {with})"
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

/// The step of the newest snapshot rank 1 saved for a stage not in the store yet.
fn unfinished_snapshot_step(dir: &Path) -> Option<u64> {
    let cache = dir.join(".pipeline/cache");
    let stored: Vec<_> = std::fs::read_dir(cache.join("entries"))
        .ok()?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    std::fs::read_dir(cache.join("snapshots"))
        .ok()?
        .flatten()
        .filter(|e| !stored.contains(&e.file_name()))
        .filter_map(|e| std::fs::read(e.path().join("rank-1-of-2/snapshot.json")).ok())
        .filter_map(|text| serde_json::from_slice::<Value>(&text).ok())
        .filter_map(|index| index["position"]["step"].as_u64())
        .max()
}

#[test]
fn a_killed_worker_fails_the_job_quickly_and_the_rerun_resumes_mid_stage() {
    let dir = project();
    let slow = DDP.replace(
        "epochs=2 batch-size=16",
        "epochs=8 batch-size=16 snapshot-every-steps=25",
    );
    std::fs::write(dir.path().join("ddp.kdl"), &slow).unwrap();
    let mut job = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "ddp.kdl", "--nproc-per-node", "2", "--json"])
        .current_dir(dir.path())
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until `pretrain` is in the cache and `finetune` has snapshots past step 100,
    // then kill rank 1.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let pid = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "finetune never got far enough"
        );
        assert!(
            job.try_wait().unwrap().is_none(),
            "the job ended before the kill"
        );
        if let Some(100..) = unfinished_snapshot_step(dir.path()) {
            if let Some(pid) = worker_pid(dir.path(), 1) {
                break pid;
            }
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
        log.contains("error: worker rank 1 was killed by SIGKILL; stopping the others"),
        "{log}"
    );
    // `--json` still gives a report: that a worker failed before rank 0 could give its own.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["diagnostics"][0]["code"], "pipeline::launch::worker_failed",
        "{report}"
    );
    let out = pipeline(dir.path(), &["status", "ddp.kdl"]);
    assert!(
        text(&out.stdout).contains("pretrain  train       fresh"),
        "{}",
        text(&out.stdout)
    );

    // The rerun takes `pretrain` from the cache and every process resumes `finetune`
    // from its own snapshot, ending with the weights of a run never interrupted.
    let out = pipeline(dir.path(), &["run", "ddp.kdl", "--nproc-per-node", "2"]);
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("resuming `finetune` from its snapshot"),
        "{log}"
    );
    assert!(
        log.contains("effective batch 32 (16 × 1 accumulated × 2 processes)"),
        "{log}"
    );
    let whole = project();
    std::fs::write(whole.path().join("ddp.kdl"), &slow).unwrap();
    let out = pipeline(whole.path(), &["run", "ddp.kdl", "--nproc-per-node", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let weights = |d: &Path| tensors(&d.join("out/model.safetensors"));
    let (resumed, uninterrupted) = (weights(dir.path()), weights(whole.path()));
    let most = resumed
        .iter()
        .zip(&uninterrupted)
        .flat_map(|(a, b)| a.1.iter().zip(&b.1).map(|(x, y)| (x - y).abs()))
        .fold(0.0f32, f32::max);
    assert!(
        resumed == uninterrupted,
        "the resumed weights differ from an uninterrupted run's by up to {most}"
    );
    // Finished stages leave no snapshots behind.
    let left =
        std::fs::read_dir(dir.path().join(".pipeline/cache/snapshots")).map_or(0, |d| d.count());
    assert_eq!(left, 0);
}

#[test]
fn a_worker_that_hangs_is_named_when_the_others_time_out() {
    let dir = project();
    let slow = DDP
        .replace("max-norm=1.0", "max-norm=1.0 timeout=3")
        .replace("epochs=3 batch-size=16", "epochs=50 batch-size=16");
    std::fs::write(dir.path().join("ddp.kdl"), &slow).unwrap();
    let job = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "ddp.kdl", "--nproc-per-node", "2", "--no-cache"])
        .current_dir(dir.path())
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once training has started (its metrics file exists), stop rank 1 as SIGSTOP does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let pid = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "training never started"
        );
        let started = std::fs::read_dir(dir.path().join(".pipeline/runs"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|r| r.path().join("metrics.jsonl").is_file());
        if let (true, Some(pid)) = (started, worker_pid(dir.path(), 1)) {
            break pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    let out = job.wait_with_output().unwrap();
    assert!(!out.status.success());
    let log = text(&out.stderr);
    assert!(
        log.contains("error: worker rank 0 exited with code 1; stopping the others\n  worker rank 1 was stopped by a signal (SIGSTOP or Ctrl-Z): the others timed out waiting for it"),
        "{log}"
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

/// Processes started by another launcher (torchrun's environment), each with its own
/// cache, as on machines that share no disk: rank 0's cache holds every stage, rank 1's
/// none. They agree that nothing is cached for all, train together and end with the
/// weights the first run stored.
#[test]
fn processes_whose_caches_differ_train_together() {
    let dir = project();
    let stored = launched(dir.path());
    let (out0, out1) = started_by_a_scheduler(dir.path(), ["cache-a", "cache-b"], |rank, port| {
        vec![
            ("RANK", rank.to_string()),
            ("LOCAL_RANK", rank.to_string()),
            ("WORLD_SIZE", "2".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.to_string()),
        ]
    });
    assert!(out1.status.success(), "{}", text(&out1.stderr));
    assert!(out0.status.success(), "{}", text(&out0.stderr));
    let report: Value = serde_json::from_slice(&out0.stdout).unwrap();
    let statuses: Vec<&str> = report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ran"; 4]);
    assert!(
        stored == tensors(&dir.path().join("out/model.safetensors")),
        "the processes did not train as one"
    );
}

/// The weights `pipeline run ddp.kdl --nproc-per-node 2` exports in `dir`, its cache
/// `cache-a`.
fn launched(dir: &Path) -> Vec<(String, Vec<f32>)> {
    let first = pipeline(
        dir,
        &[
            "run",
            "ddp.kdl",
            "--nproc-per-node",
            "2",
            "--cache-dir",
            "cache-a",
        ],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    tensors(&dir.join("out/model.safetensors"))
}

/// `pipeline run ddp.kdl --json` started twice in `dir`, as a scheduler starts the
/// processes of a job: rank R with the cache `caches[R]` and the variables `vars(R, port)`
/// (a free rendezvous port). Both outputs.
fn started_by_a_scheduler(
    dir: &Path,
    caches: [&str; 2],
    vars: impl Fn(usize, u16) -> Vec<(&'static str, String)>,
) -> (std::process::Output, std::process::Output) {
    let port = free_port();
    let start = |rank: usize| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["run", "ddp.kdl", "--json", "--cache-dir", caches[rank]])
            .current_dir(dir)
            .env_remove("PIPELINE_CACHE_DIR")
            .envs(vars(rank, port))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (rank0, rank1) = (start(0), start(1));
    (
        rank0.wait_with_output().unwrap(),
        rank1.wait_with_output().unwrap(),
    )
}

/// Open MPI's `mpirun` starts the processes (its variables, as it sets them on one
/// machine): they find each other and train as the launcher's do.
#[test]
fn processes_started_by_open_mpi_train_as_the_launchers_do() {
    let dir = project();
    let stored = launched(dir.path());
    let (out0, out1) = started_by_a_scheduler(dir.path(), ["cache-b", "cache-c"], |rank, port| {
        vec![
            ("OMPI_COMM_WORLD_RANK", rank.to_string()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "2".into()),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2".into()),
            ("MASTER_PORT", port.to_string()),
        ]
    });
    assert!(out0.status.success(), "{}", text(&out0.stderr));
    assert!(out1.status.success(), "{}", text(&out1.stderr));
    let report: Value = serde_json::from_slice(&out0.stdout).unwrap();
    assert_eq!(report["stages"][0]["status"], "ran");
    assert_eq!(
        report["stages"][0]["metrics"]["steps"], 135.0,
        "each process took half of the epoch's 90 batches"
    );
    // Not bit for bit: with Open MPI's variables in the environment the weights differ
    // in their last bits, also when torchrun's are set beside them (and decide the
    // rendezvous), so something below pipeline reads them.
    let worst = worst_difference(&stored, &tensors(&dir.path().join("out/model.safetensors")));
    assert!(
        worst < 1e-5,
        "the processes did not train as the launcher's: {worst}"
    );
}

/// Two processes share an eval stage's samples: each evaluates its part, and the metrics
/// come from every process's predictions gathered, equal to scikit-learn's on the
/// predictions written (which are the whole split's, in its order); a `predict` stage
/// writes once.
#[test]
fn eval_metrics_on_two_processes_are_the_whole_splits_and_match_scikit_learn() {
    let dir = digits_project();
    let d = dir.path();
    let manifest = r#"seed 3
data {
    source "data/digits.csv.gz"
    label "last"
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
accelerator strategy="ddp"
train epochs=2 batch-size=16
eval "test" {
    needs "train"
    batch-size 50
    metrics "accuracy" "f1-macro" "log-loss" "auroc" "top-3-accuracy"
    output "test.csv"
}
predict "all" {
    needs "train"
    source "data/digits.csv.gz"
    output "all.csv"
}
"#;
    std::fs::write(d.join("shared.kdl"), manifest).unwrap();
    let out = pipeline(
        d,
        &[
            "run",
            "shared.kdl",
            "--json",
            "--no-cache",
            "--nproc-per-node",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let metrics = &report["stages"][1]["metrics"];
    let run_dir = report["run_dir"].as_str().unwrap();
    let checked = common::py(
        d,
        &format!(
            r#"
import csv, json, numpy as np
from sklearn import metrics as m
data = np.loadtxt("data/digits.csv.gz", delimiter=",")
split = json.load(open("{run_dir}/split.json"))
rows = list(csv.DictReader(open("test.csv")))
assert [int(r["row"]) for r in rows] == split["test"], "not the test split's rows in order"
y = data[[int(r["row"]) for r in rows], -1].astype(int)
p = np.array([[float(r[f"prob_{{k}}"]) for k in range(10)] for r in rows])
pred = np.array([int(r["class"]) for r in rows])
assert (pred == p.argmax(1)).all()
mine = json.loads('{metrics}')
expected = {{
    "accuracy": m.accuracy_score(y, pred),
    "f1-macro": m.f1_score(y, pred, average="macro", zero_division=0),
    "log-loss": m.log_loss(y, p, labels=list(range(10))),
    "auroc": m.roc_auc_score(y, p, multi_class="ovr"),
    "top-3-accuracy": m.top_k_accuracy_score(y, p, k=3, labels=list(range(10))),
}}
worst = max(abs(mine[k] - v) for k, v in expected.items())
# The loss, summed over both processes' shares: the mean cross-entropy of the split.
assert abs(mine["loss"] - m.log_loss(y, p, labels=list(range(10)))) < 1e-5, mine["loss"]
assert worst < 1e-6, (worst, mine, expected)
assert mine["samples"] == len(rows) == len(split["test"])
everything = list(csv.DictReader(open("all.csv")))
assert len(everything) == len(data)
for r in rows:
    a = everything[int(r["row"])]
    assert a["class"] == r["class"]
    assert max(abs(float(a[f"prob_{{k}}"]) - float(r[f"prob_{{k}}"])) for k in range(10)) < 1e-6
print(worst)
"#,
            metrics = metrics
        ),
    );
    assert!(!checked.is_empty());
}

#[test]
fn a_stopped_worker_is_named_when_a_scheduler_started_the_processes() {
    // As SLURM or torchrun start them: each process on its own, told its place in the
    // group by the environment, with no launcher of ours to look at the others.
    let dir = project();
    let slow = DDP
        .replace("max-norm=1.0", "max-norm=1.0 timeout=3")
        .replace("epochs=3 batch-size=16", "epochs=50 batch-size=16");
    std::fs::write(dir.path().join("ddp.kdl"), &slow).unwrap();
    let port = free_port().to_string();
    let start = |rank: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["run", "ddp.kdl", "--no-cache"])
            .current_dir(dir.path())
            .env_remove("PIPELINE_CACHE_DIR")
            .envs([
                ("RANK", rank),
                ("LOCAL_RANK", rank),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", &port),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (start("0"), start("1"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let pid = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "training never started"
        );
        let started = std::fs::read_dir(dir.path().join(".pipeline/runs"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|r| r.path().join("metrics.jsonl").is_file());
        if let (true, Some(pid)) = (started, worker_pid(dir.path(), 1)) {
            break pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let signal = |name: &str| {
        std::process::Command::new("kill")
            .args([name, &pid.to_string()])
            .status()
            .unwrap()
    };
    signal("-STOP");
    let out = first.wait_with_output().unwrap();
    signal("-KILL");
    drop(second.wait_with_output());
    assert!(!out.status.success());
    let log = text(&out.stderr);
    // The diagnostic as one line, without the frame miette wraps it in.
    let words: Vec<&str> = log.split_whitespace().filter(|w| *w != "│").collect();
    // Where in the training it was stopped (an epoch's step, the snapshots' comparison)
    // depends on the machine's speed.
    let line = words.join(" ");
    assert!(
        line.contains("× stage `pretrain`: ")
            && line.contains(": rank 1 of the group has stopped answering (no heartbeat for 2.5 s: stopped by a signal such as SIGSTOP or Ctrl-Z, frozen, or gone); "),
        "{log}"
    );
}

/// The GPU machine's kit checks a process group through the worker alone
/// (`pipeline-worker --self-test-group nccl` there); on the CPU, Gloo.
#[test]
fn the_worker_checks_a_group_of_one_and_names_a_backend_it_does_not_know() {
    let worker = |backend: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline-worker"))
            .args(["--self-test-group", backend])
            .output()
            .expect("the worker runs")
    };
    let gloo = worker("gloo");
    assert!(gloo.status.success(), "{}", text(&gloo.stderr));
    assert_eq!(
        text(&gloo.stdout),
        "a group of one on the CPU (Gloo): all-reduce, broadcast, all-gather, reduce-scatter and barrier gave the right values\n"
    );
    let mpi = worker("mpi");
    assert_eq!(mpi.status.code(), Some(1));
    assert_eq!(
        text(&mpi.stderr),
        "error: `mpi` is not a backend (gloo, nccl)\n"
    );
}

#[test]
fn a_process_whose_group_never_forms_says_where_it_waited() {
    // Rank 1 started as a scheduler starts it, and no rank 0 ever listening: it waits
    // `timeout` seconds for the group, then says where it looked and for how long.
    let dir = project();
    let impatient = DDP.replace("max-norm=1.0", "max-norm=1.0 timeout=1");
    std::fs::write(dir.path().join("ddp.kdl"), &impatient).unwrap();
    let port = free_port().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "ddp.kdl", "--no-cache"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .envs([
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", &port),
        ])
        .output()
        .unwrap();
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{log}");
    let words: Vec<&str> = log.split_whitespace().filter(|w| *w != "│").collect();
    let line = words.join(" ");
    assert!(
        line.starts_with("pipeline::launch::rendezvous_failed × rank 1 of 2 could not join the others at 127.0.0.1:")
            && line.contains(&format!("127.0.0.1:{port}: "))
            && line.contains("timeout=1")
            && line.contains("waited this long")
            && line.contains("help: check that every process started and can reach MASTER_ADDR:MASTER_PORT"),
        "{log}"
    );
}
