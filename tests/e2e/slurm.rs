//! End-to-end tests on a real SLURM cluster (issue 36): the one-node cluster
//! `scripts/slurm-local.sh` starts (scripts/test.sh starts it before the tests). A job
//! submitted with `sbatch --requeue` and preempted with `scancel --signal=USR1 --full`
//! writes its snapshot, requeues itself (`Restarts=1`) and, started again, ends with the
//! weights of a run never stopped, bit for bit; `srun -n 2` starts a `ddp` run whose two
//! processes find each other through SLURM's variables and train as the launcher's two
//! do. Each test waits a bounded time, and they take the cluster's two CPUs in turn.

use crate::common::{pipeline, run_json, snapshot_epoch, statuses, text};
use crate::preemption::{as_never_stopped, project};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The cluster, for one test at a time; a test fails saying how to start it when it is
/// not up.
fn cluster() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let state = Command::new("sinfo").args(["-h", "-o", "%t"]).output();
    let up = state.as_ref().is_ok_and(|out| {
        let state = text(&out.stdout);
        ["idle", "mix", "alloc"].iter().any(|s| state.contains(s))
    });
    assert!(
        up,
        "no SLURM cluster is up ({state:?}): scripts/test.sh starts one with scripts/slurm-local.sh (as root)"
    );
    turn
}

/// A field of `scontrol show job` for `job` (`JobState`, `Restarts`).
fn job_field(job: &str, field: &str) -> String {
    let out = Command::new("scontrol")
        .args(["show", "job", "-o", job])
        .output()
        .unwrap();
    let line = text(&out.stdout);
    let prefix = format!("{field}=");
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {field} in `scontrol show job {job}`: {line}"))
        .to_string()
}

/// Waits until `done` holds, failing with `what` (and the job's log in `dir`) past
/// `deadline`.
fn wait_for(deadline: Instant, what: &str, dir: &Path, mut done: impl FnMut() -> bool) {
    while !done() {
        let log = std::fs::read_to_string(dir.join("err.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "{what}: {log}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A submitted job, cancelled when the test ends however it ends (a failed test leaves
/// no job holding the cluster's CPUs).
struct Job(String);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).output();
    }
}

/// `scancel`, `scontrol`: which must succeed.
fn slurm(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        text(&out.stderr)
    );
}

#[test]
fn a_job_slurm_preempts_is_requeued_and_ends_bit_for_bit() {
    let _cluster = cluster();
    let dir = project("none", 8);
    let d = dir.path();
    let args = ["--set", "train.epochs=2000"];
    let script = format!(
        "#!/bin/bash\nexec {} run wine.kdl --json {}\n",
        env!("CARGO_BIN_EXE_pipeline"),
        args.join(" ")
    );
    std::fs::write(d.join("job.sh"), script).unwrap();
    let out = Command::new("sbatch")
        .args(["--parsable", "--requeue", "--open-mode=append"])
        .args([
            "--output=out.json",
            "--error=err.log",
            "--job-name=preempted",
        ])
        .arg(format!("--chdir={}", d.display()))
        .arg("job.sh")
        .current_dir(d)
        .env_remove("PIPELINE_CACHE_DIR")
        .output()
        .unwrap();
    assert!(out.status.success(), "sbatch: {}", text(&out.stderr));
    let job = Job(text(&out.stdout).trim().to_string());
    let job = &job.0;
    let deadline = Instant::now() + Duration::from_secs(240);
    wait_for(deadline, "the job never reached epoch 5", d, || {
        snapshot_epoch(d).is_some_and(|e| e >= 5)
    });
    slurm("scancel", &["--signal=USR1", "--full", job]);
    wait_for(deadline, "the job was not requeued", d, || {
        job_field(job, "Restarts") == "1" && job_field(job, "JobState") == "PENDING"
    });
    // SLURM holds a requeued job back a while (its BeginTime): not for a test.
    slurm(
        "scontrol",
        &["update", &format!("JobId={job}"), "StartTime=now"],
    );
    wait_for(deadline, "the requeued job did not complete", d, || {
        !matches!(
            job_field(job, "JobState").as_str(),
            "PENDING" | "RUNNING" | "REQUEUED" | "COMPLETING"
        )
    });
    let log = std::fs::read_to_string(d.join("err.log")).unwrap();
    assert_eq!(job_field(job, "JobState"), "COMPLETED", "{log}");
    assert_eq!(job_field(job, "Restarts"), "1");
    assert!(
        log.contains(&format!(
            "stopped on SIGUSR1: SLURM job {job} is requeued; it resumes where it stopped"
        )),
        "{log}"
    );
    // Each start appended its report: the stopped one, then the finished one.
    let reports = std::fs::read_to_string(d.join("out.json")).unwrap();
    let reports: Vec<serde_json::Value> = reports
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert_eq!(statuses(&reports[0])[0], ("train".into(), "failed".into()));
    assert_eq!(statuses(&reports[1])[0], ("train".into(), "ran".into()));
    let epoch = reports[1]["stages"][0]["resumed_at_epoch"].as_u64();
    assert!(epoch.is_some_and(|e| e >= 5), "{}", reports[1]);

    as_never_stopped(d, "none", 8, &args);
}

#[test]
fn srun_starts_the_processes_of_a_ddp_run() {
    let _cluster = cluster();
    let dir = project("ddp", 32);
    let d = dir.path();
    let args = ["--set", "train.epochs=30"];
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut srun = Command::new("srun")
        .args(["-n", "2", "--time=5", "--job-name=ddp"])
        .arg(format!("--chdir={}", d.display()))
        .arg(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "wine.kdl", "--json"])
        .args(args)
        .env("MASTER_PORT", port.to_string())
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    while srun.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = srun.kill();
            panic!("srun did not end in 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = srun.wait_with_output().unwrap();
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    // Rank 0 alone reports: 2 steps an epoch of 125 samples are batches of 32 on each of
    // two processes (one process would take 4).
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(statuses(&report)[0], ("train".into(), "ran".into()));
    assert_eq!(report["stages"][0]["metrics"]["steps"], 60.0, "{report}");

    let launched = project("ddp", 32);
    let run = pipeline(
        launched.path(),
        &[&["run", "wine.kdl", "--nproc-per-node", "2"], &args[..]].concat(),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let bytes = |dir: &Path| std::fs::read(dir.join("model.safetensors")).unwrap();
    assert!(
        bytes(d) == bytes(launched.path()),
        "srun's two processes trained other weights than the launcher's two"
    );
}

/// The points of a sweep's `--json` report by learning rate: their monitored value and
/// SLURM job.
fn by_rate(report: &serde_json::Value) -> Vec<(String, f64, Option<String>)> {
    let mut points: Vec<_> = report["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            assert_eq!(p["ok"], true, "{p}");
            (
                p["overrides"]["optimizer.lr"].as_str().unwrap().to_string(),
                p["monitor"].as_f64().unwrap(),
                p["job"].as_str().map(str::to_string),
            )
        })
        .collect();
    points.sort_by(|a, b| a.0.cmp(&b.0));
    points
}

#[test]
fn a_sweep_submits_its_points_as_slurm_jobs_and_only_those_not_cached() {
    let _cluster = cluster();
    let dir = project("none", 32);
    let d = dir.path();
    let epochs = ["--set", "train.epochs=20"];
    // One point computed already, as by a sweep interrupted after it.
    let first = run_json(
        d,
        "wine.kdl",
        &[&epochs[..], &["--set", "optimizer.lr=0.01"]].concat(),
    );
    assert_eq!(statuses(&first)[0], ("train".into(), "ran".into()));
    let sweep = |dir: &Path, executor: &[&str]| {
        let grid = [
            "sweep",
            "wine.kdl",
            "--grid",
            "optimizer.lr=0.01,0.02,0.05",
            "--json",
        ];
        let out = pipeline(dir, &[&grid[..], &epochs, executor].concat());
        let log = text(&out.stderr);
        assert!(out.status.success(), "{log}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (report, log)
    };
    let slurm = [
        "--executor",
        "slurm",
        "--slurm-args",
        "--time=5 --job-name=sweep-test",
    ];
    let (report, log) = sweep(d, &slurm);
    assert!(log.contains("3 points, 3 at once (slurm)"), "{log}");
    assert_eq!(log.matches(": SLURM job ").count(), 2, "{log}");
    let points = by_rate(&report);
    assert_eq!(points[0].2, None, "the cached point is not submitted");
    assert!(points[1].2.is_some() && points[2].2.is_some(), "{points:?}");
    // The jobs' files are removed once read.
    let files = std::fs::read_dir(d.join(".pipeline/slurm"))
        .unwrap()
        .count();
    assert_eq!(files, 0);

    // As on this machine, point for point.
    let here = project("none", 32);
    let (local, _) = sweep(here.path(), &[]);
    let values = |points: &[(String, f64, Option<String>)]| -> Vec<(String, f64)> {
        points.iter().map(|(r, v, _)| (r.clone(), *v)).collect()
    };
    assert_eq!(values(&points), values(&by_rate(&local)));

    // Every point cached: nothing is submitted.
    let (again, log) = sweep(d, &slurm);
    assert!(!log.contains("SLURM job"), "{log}");
    assert!(by_rate(&again).iter().all(|p| p.2.is_none()));

    // Options SLURM refuses are refused once, before any point.
    let refused = crate::common::refused(
        d,
        &[
            "sweep",
            "wine.kdl",
            "--grid",
            "optimizer.lr=0.1,0.2",
            "--executor",
            "slurm",
            "--slurm-args",
            "--tim=5",
        ],
        1,
    );
    assert_eq!(
        refused,
        "error: sbatch refuses the jobs' options (--tim=5): sbatch: option '--tim=5' is ambiguous; possibilities: '--time' '--time-min' Try \"sbatch --help\" for more information\n"
    );
}
