//! `--executor slurm`: each point a SLURM batch job, `sbatch --wait` of the point's
//! `pipeline run` in the sweep's directory, with `--slurm-args` (`--partition=gpu
//! --gres=gpu:1 --time=1:00:00`) after the sweep's own options (a later option wins); the
//! cluster queues them; SLURM checks the options once first (`sbatch --test-only`). Every
//! point is submitted at once unless `--jobs` says fewer. The
//! sweep reads each run's report from its job's output file, and when it is interrupted
//! (Ctrl-C, SIGTERM) it cancels the jobs it submitted. A point whose stages are all
//! cached is not submitted: the sweep answers it here.
//!
//! The program, the manifest, its data and the cache must be where the jobs run (a shared
//! file system), or the cache an object store (`--cache-dir s3://…`).

use super::{last_lines, Ended, Executor, PointRun};
use crate::cli::SweepArgs;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

pub struct Slurm {
    /// `--slurm-args`, split as a shell splits them.
    args: Vec<String>,
    /// Where the jobs write their output (`.pipeline/slurm/` in the sweep's directory).
    files: PathBuf,
}

pub fn make(args: &SweepArgs) -> Result<Box<dyn Executor>, String> {
    let extra = match &args.slurm_args {
        Some(text) => shlex::split(text).ok_or_else(|| {
            format!("--slurm-args {text:?} is not a list of arguments (an unclosed quote?)")
        })?,
        None => Vec::new(),
    };
    // The options checked once, by SLURM itself, before any point is submitted.
    let tried = Command::new("sbatch")
        .arg("--test-only")
        .args(&extra)
        .args(["--wrap", "true"])
        .stdin(Stdio::null())
        .output();
    match tried {
        Err(_) => return Err("--executor slurm submits jobs with SLURM's `sbatch`, which is not on the PATH: run the sweep on a machine of the cluster (a login node)".into()),
        Ok(out) if !out.status.success() => {
            return Err(format!(
                "sbatch refuses the jobs' options ({}): {}",
                extra.join(" "),
                last_lines(&out.stderr, 2).replace('\n', " ")
            ))
        }
        Ok(_) => {}
    }
    let files = std::env::current_dir()
        .map_err(|e| format!("cannot read the current directory: {e}"))?
        .join(".pipeline/slurm");
    std::fs::create_dir_all(&files)
        .map_err(|e| format!("cannot create {}: {e}", files.display()))?;
    cancel_when_interrupted();
    Ok(Box::new(Slurm { args: extra, files }))
}

/// The jobs submitted and not yet ended, cancelled if the sweep is interrupted.
static SUBMITTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// On SIGINT or SIGTERM, cancels the jobs still queued or running (`sbatch --wait` ends
/// on Ctrl-C without cancelling its job), then ends the sweep as the signal would.
fn cancel_when_interrupted() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(mut signals) =
            signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM])
        else {
            eprintln!("warning: an interrupted sweep will not cancel its SLURM jobs");
            return;
        };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let jobs: Vec<String> = (SUBMITTED.lock().unwrap_or_else(|e| e.into_inner()))
                    .iter()
                    .cloned()
                    .collect();
                if !jobs.is_empty() {
                    let _ = Command::new("scancel").args(&jobs).status();
                    eprintln!(
                        "sweep interrupted: SLURM jobs {} cancelled; the same command submits again only the points not done",
                        jobs.join(", ")
                    );
                }
                std::process::exit(128 + signal);
            }
        });
    });
}

/// `arg` quoted for the shell of the job's script.
fn quoted(arg: &std::ffi::OsStr) -> Result<String, String> {
    let text = arg.to_str().ok_or_else(|| {
        format!("{arg:?} is not UTF-8: a SLURM job's command line cannot hold it")
    })?;
    shlex::try_quote(text)
        .map(|q| q.into_owned())
        .map_err(|e| format!("{text:?} cannot be quoted for the job's shell: {e}"))
}

/// A file's text, or nothing.
fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

impl Executor for Slurm {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn default_jobs(&self, points: usize) -> Option<usize> {
        Some(points)
    }

    fn threads(&self, _jobs: usize) -> Option<usize> {
        None
    }

    fn run(&self, run: &PointRun) -> Result<Ended, String> {
        let command = std::iter::once(run.program.as_os_str())
            .chain(run.args.iter().map(|a| a.as_os_str()))
            .map(quoted)
            .collect::<Result<Vec<_>, _>>()?
            .join(" ");
        let name = format!("sweep-{}-point-{}", std::process::id(), run.point);
        let (out, log) = (
            self.files.join(format!("{name}.json")),
            self.files.join(format!("{name}.log")),
        );
        let mut sbatch = Command::new("sbatch")
            .args(["--wait", "--parsable"])
            .arg(format!("--job-name=pipeline-point-{}", run.point))
            .arg(format!("--chdir={}", run.dir.display()))
            .arg(format!("--output={}", out.display()))
            .arg(format!("--error={}", log.display()))
            .args(&self.args)
            .arg(format!("--wrap=exec {command}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `sbatch`: {e}"))?;
        // `--parsable` prints the job's id (`ID` or `ID;CLUSTER`) as soon as it is queued.
        let mut said = String::new();
        let stdout = sbatch.stdout.take().expect("piped");
        let _ = BufReader::new(stdout).read_line(&mut said);
        let job = said.trim().split(';').next().unwrap_or("").to_string();
        if !job.is_empty() {
            SUBMITTED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(job.clone());
            eprintln!("point {}: SLURM job {job}", run.point);
        }
        let mut sbatch_err = Vec::new();
        if let Some(mut err) = sbatch.stderr.take() {
            let _ = err.read_to_end(&mut sbatch_err);
        }
        let status = sbatch.wait();
        SUBMITTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&job);
        if job.is_empty() {
            return Err(format!(
                "sbatch did not submit the point: {}",
                last_lines(&sbatch_err, 4)
            ));
        }
        let stdout = read(&out);
        let ended = serde_json::from_slice::<serde_json::Value>(&stdout).is_ok();
        let stderr = match ended {
            true => String::new(),
            false => format!(
                "{}\n(SLURM job {job}, {}; its log: {})",
                last_lines(&read(&log), 8),
                match status {
                    Ok(s) => format!("sbatch --wait {s}"),
                    Err(e) => format!("sbatch --wait: {e}"),
                },
                log.display()
            ),
        };
        if ended {
            let _ = std::fs::remove_file(&out);
            let _ = std::fs::remove_file(&log);
        }
        Ok(Ended {
            stdout,
            stderr,
            job: Some(job),
        })
    }
}
