//! End-to-end tests of a run a signal stops (`--requeue-signal`, issue 36): SIGUSR1 or
//! SIGTERM mid-training stops every process at one step with its snapshot written, the
//! run exits with 143, and the same command resumes it to the weights of a run never
//! stopped, bit for bit (one process; two, the signal sent to the launcher). Under SLURM
//! (`SLURM_JOB_ID`) the job is requeued with `scontrol requeue`: here a stand-in
//! `scontrol` on the PATH records what it was asked, and says no as SLURM does to a job
//! submitted without `--requeue`.

use crate::common::{pipeline, root, run_json, statuses, text};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// The wine data, a small MLP trained for 300 short epochs of batches of `batch` (a few
/// seconds), exported.
pub(crate) fn project(strategy: &str, batch: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("examples/data/wine_data.csv"),
        dir.path().join("wine.csv"),
    )
    .unwrap();
    let manifest = format!(
        r#"pipeline "wine"
seed 7
data "wine.csv" {{
    skip-rows 1
    label "last"
    scale "standard"
    split train=0.7 test=0.3 stratify=#true
}}
model {{
    linear 32
    relu
    dropout 0.1
    linear 3
}}
loss "cross-entropy"
optimizer "adamw" lr=0.01 weight-decay=1e-3
accelerator strategy="{strategy}"
train epochs=300 batch-size={batch}
eval "test" needs="train"
checkpoint "export" needs="train" path="model.safetensors"
"#
    );
    std::fs::write(dir.path().join("wine.kdl"), manifest).unwrap();
    dir
}

/// `pipeline run wine.kdl ARGS` in `dir` (with `env`), sent `signal` once its training
/// is past epoch 5: its exit code and stderr.
pub(crate) fn stopped(
    dir: &Path,
    args: &[&str],
    env: &[(&str, String)],
    signal: i32,
) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "wine.kdl"])
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    let mut sent = false;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if !sent && line.contains("epoch 5/") {
            // SAFETY: kill(2) on our child, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            sent = true;
        }
        stderr += &line;
        stderr.push('\n');
    }
    assert!(sent, "the training never reached epoch 5: {stderr}");
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (code, stderr)
}

/// The step each `stopped at step N` line names.
fn steps(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter_map(|l| l.split("stopped at step ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// Stopped, then (after `between`, given the project's directory) run again: the
/// weights of a run that was never stopped, bit for bit; the resumed run's stderr.
fn resumes_bit_for_bit(
    strategy: &str,
    args: &[&str],
    signal: i32,
    processes: usize,
    between: impl Fn(&Path),
) -> String {
    // Two processes ask each other about once a second: fewer, longer steps.
    let batch = 8 * processes as u64 * processes as u64;
    let dir = project(strategy, batch);
    let d = dir.path();
    let (code, stderr) = stopped(d, args, &[], signal);
    assert_eq!(code, 143, "{stderr}");
    assert!(stderr.contains("pipeline::run::preempted"), "{stderr}");
    let at = steps(&stderr);
    assert_eq!(at.len(), processes, "{stderr}");
    assert!(at.iter().all(|&s| s == at[0] && s > 0), "{at:?}");
    assert!(
        stderr.contains("the same `pipeline run` command resumes where it stopped"),
        "{stderr}"
    );
    assert!(
        !d.join("model.safetensors").exists(),
        "nothing was exported"
    );
    between(d);
    let out = pipeline(d, &[&["run", "wine.kdl", "--json"], args].concat());
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    let resumed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ran: Vec<(String, String)> = statuses(&resumed);
    assert_eq!(ran[0], ("train".to_string(), "ran".to_string()));
    let epoch = resumed["stages"][0]["resumed_at_epoch"].as_u64();
    assert!(epoch.is_some_and(|e| e >= 5), "{resumed}");

    as_never_stopped(d, strategy, batch, args);
    log
}

/// Asserts that the weights `dir`'s run exported are, bit for bit, those of the same
/// project (`strategy`, `batch`) run with `args` and never stopped.
pub(crate) fn as_never_stopped(dir: &Path, strategy: &str, batch: u64, args: &[&str]) {
    let never = project(strategy, batch);
    run_json(never.path(), "wine.kdl", args);
    let bytes = |dir: &Path| std::fs::read(dir.join("model.safetensors")).unwrap();
    assert!(
        bytes(dir) == bytes(never.path()),
        "the weights differ from those of a run never stopped"
    );
}

#[test]
fn a_signal_stops_the_training_at_a_step_and_the_same_command_resumes_it_bit_for_bit() {
    resumes_bit_for_bit("none", &[], libc::SIGUSR1, 1, |_| {});
}

#[test]
fn a_signal_to_the_launcher_stops_every_process_at_the_same_step() {
    resumes_bit_for_bit("ddp", &["--nproc-per-node", "2"], libc::SIGTERM, 2, |_| {});
}

/// A process killed between its rename of the last snapshot's index and the writing of
/// the new one holds only the snapshot before: the processes resume from that one, which
/// they all keep.
#[test]
fn processes_a_snapshot_apart_resume_from_the_one_they_all_hold() {
    let log = resumes_bit_for_bit(
        "ddp",
        &["--nproc-per-node", "2"],
        libc::SIGTERM,
        2,
        |d: &Path| {
            let snapshots = d.join(".pipeline/cache/snapshots");
            let stage = std::fs::read_dir(snapshots)
                .unwrap()
                .next()
                .unwrap()
                .unwrap();
            let rank1 = stage.path().join("rank-1-of-2");
            std::fs::rename(
                rank1.join("snapshot.json"),
                rank1.join("snapshot.previous.json"),
            )
            .unwrap();
        },
    );
    assert!(
        log.contains("the processes' last snapshots of `train` differ (step "),
        "{log}"
    );
    assert!(log.contains(", none); resuming from step "), "{log}");
}

#[test]
fn under_slurm_the_job_is_requeued_or_told_why_not() {
    let dir = project("none", 8);
    let d = dir.path();
    let bin = d.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let scontrol = bin.join("scontrol");
    let stand_in = |body: &str| {
        let script = format!(
            "#!/bin/sh\necho \"$@\" >> \"{}/calls\"\n{body}",
            d.display()
        );
        std::fs::write(&scontrol, script).unwrap();
        let mut perms = std::fs::metadata(&scontrol).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&scontrol, perms).unwrap();
    };
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let env = [("PATH", path), ("SLURM_JOB_ID", "4242".to_string())];
    stand_in("exit 0\n");
    let (code, stderr) = stopped(d, &[], &env, libc::SIGUSR1);
    assert_eq!(code, 143, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(d.join("calls")).unwrap(),
        "requeue 4242\n"
    );
    assert!(
        stderr.contains("stopped on SIGUSR1: SLURM job 4242 is requeued"),
        "{stderr}"
    );
    // SLURM refuses to requeue a job submitted without `--requeue`.
    stand_in("echo 'scontrol: error: Requested operation is presently disabled for job 4242' >&2\nexit 1\n");
    std::fs::remove_file(d.join("calls")).unwrap();
    let (code, stderr) = stopped(d, &["--set", "train.batch-size=4"], &env, libc::SIGTERM);
    assert_eq!(code, 143, "{stderr}");
    assert!(
        stderr.contains("`scontrol requeue 4242` failed: scontrol: error: Requested operation is presently disabled for job 4242"),
        "{stderr}"
    );
    assert!(
        stderr.contains("submitted without `sbatch --requeue`"),
        "{stderr}"
    );
}
