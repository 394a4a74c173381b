//! End-to-end tests of `pipeline run --max-restarts N` (issue 36): a worker killed
//! mid-training (SIGKILL: no chance to clean up) makes the launcher stop the others and
//! start the group again; every worker resumes from its latest snapshot, and the run ends
//! with the weights of a run never interrupted, bit for bit. A run whose manifest is
//! refused is not restarted: it would fail the same way every time.

use crate::common::{refused, small_project, snapshot_epoch, statuses};
use crate::preemption::{as_never_stopped, project};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

/// The worker of rank `rank` among the children of the launcher `launcher`.
fn worker(launcher: u32, rank: u32) -> libc::pid_t {
    let children =
        std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children")).unwrap();
    let pids: Vec<u32> = children
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let of_rank = |pid: &&u32| {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let rank_is = format!("RANK={rank}");
        environ
            .split(|&b| b == 0)
            .any(|var| var == rank_is.as_bytes())
    };
    // One worker alone is started without a rank.
    let pid = match pids.len() {
        1 => pids[0],
        _ => *pids.iter().find(of_rank).expect("a worker of that rank"),
    };
    pid as libc::pid_t
}

/// `pipeline run wine.kdl --json ARGS` in `dir`, the worker of rank `rank` killed once the
/// training has a snapshot in epoch 6: the exit code, stderr and the report.
fn killed_once(dir: &Path, args: &[&str], rank: u32) -> (i32, String, serde_json::Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "wine.kdl", "--json"])
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        err.read_to_string(&mut text).unwrap();
        text
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while snapshot_epoch(dir).is_none_or(|e| e < 6) {
        assert!(
            std::time::Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "the training never took a snapshot in epoch 6"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: kill(2) on a worker of the launcher this test started, still running.
    unsafe { libc::kill(worker(child.id(), rank), libc::SIGKILL) };
    let stderr = stderr.join().unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let code = child.wait().unwrap().code().unwrap_or(-1);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    (code, stderr, report)
}

fn restarts_bit_for_bit(strategy: &str, args: &[&str], rank: u32, workers: &str) {
    let dir = project(strategy, 32);
    let d = dir.path();
    let args: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--max-restarts", "2"])
        .collect();
    let (code, stderr, report) = killed_once(d, &args, rank);
    assert_eq!(code, 0, "{stderr}");
    let death = match workers {
        "worker" => "warning: the worker was killed by SIGKILL\n".to_string(),
        _ => format!("warning: worker rank {rank} was killed by SIGKILL; stopping the others\n"),
    };
    assert!(stderr.contains(&death), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "restarting the {workers} from the latest snapshot (restart 1 of 2)\n"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("restarting").count(), 1, "{stderr}");
    assert_eq!(statuses(&report)[0], ("train".into(), "ran".into()));
    let epoch = report["stages"][0]["resumed_at_epoch"].as_u64();
    assert!(epoch.is_some_and(|e| e >= 5), "{report}");

    as_never_stopped(d, strategy, 32, &args);
}

#[test]
fn a_killed_worker_is_restarted_and_the_run_ends_bit_for_bit() {
    restarts_bit_for_bit("none", &[], 0, "worker");
}

#[test]
fn a_killed_worker_of_two_restarts_both_and_the_run_ends_bit_for_bit() {
    restarts_bit_for_bit("ddp", &["--nproc-per-node", "2"], 1, "2 workers");
}

#[test]
fn a_refused_manifest_is_not_restarted() {
    let dir = small_project("pipeline \"p\"\nmodel { linear 2 }\ntrain epochs=0\n");
    let stderr = refused(dir.path(), &["run", "small.kdl", "--max-restarts", "3"], 1);
    // Said once, by the one worker, as a plain run says it.
    assert_eq!(
        stderr
            .matches("pipeline::manifest::missing_section")
            .count(),
        3,
        "{stderr}"
    );
    assert!(!stderr.contains("restarting"), "{stderr}");
    assert!(!stderr.contains("[rank 0]"), "{stderr}");
    let stderr = refused(
        dir.path(),
        &["run", "small.kdl", "--max-restarts", "1", "--nnodes", "2"],
        2,
    );
    assert_eq!(
        stderr,
        "error: --max-restarts restarts the processes of one machine, and this run spans 2 (--nnodes)\n  help: restart a job of several machines with its scheduler (SLURM: `sbatch --requeue`, which resumes from the snapshot)\n"
    );
}
