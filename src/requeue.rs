//! A run a signal stopped (`backends::preemption`): under SLURM (`SLURM_JOB_ID`), rank 0
//! asks SLURM to queue the job again (`scontrol requeue`), which then starts from the
//! snapshots the training wrote; elsewhere the run says how to resume. The exit status is
//! [`STOPPED_STATUS`] either way.

use backends::preemption::name;
use pipeline_core::launch::STOPPED_STATUS;
use std::process::{Command, ExitCode};

/// What the worker does once a signal stopped its run.
pub fn stopped_by(signal: i32) -> ExitCode {
    let rank = std::env::var("RANK").map_or(0, |r| r.parse().unwrap_or(0));
    if rank != 0 {
        return ExitCode::from(STOPPED_STATUS);
    }
    let signal = name(signal);
    match std::env::var("SLURM_JOB_ID") {
        Ok(job) if !job.is_empty() => {
            // A job array's task is requeued by its own id.
            let job = std::env::var("SLURM_ARRAY_JOB_ID")
                .ok()
                .zip(std::env::var("SLURM_ARRAY_TASK_ID").ok())
                .map_or(job, |(array, task)| format!("{array}_{task}"));
            match Command::new("scontrol").args(["requeue", &job]).output() {
                Ok(out) if out.status.success() => eprintln!(
                    "stopped on {signal}: SLURM job {job} is requeued; it resumes where it stopped (the finished stages cached, a stopped training from its snapshot)"
                ),
                Ok(out) => eprintln!(
                    "stopped on {signal}, but `scontrol requeue {job}` failed: {}\n  a job submitted without `sbatch --requeue` is not requeued: submit the same script again to resume where it stopped",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                Err(e) => eprintln!(
                    "stopped on {signal}, but `scontrol` could not run ({e}): submit the same script again to resume where it stopped"
                ),
            }
        }
        _ => eprintln!(
            "stopped on {signal}: the same `pipeline run` command resumes where it stopped (the finished stages cached, a stopped training from its snapshot)"
        ),
    }
    ExitCode::from(STOPPED_STATUS)
}
