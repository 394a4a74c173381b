//! Where `pipeline sweep` runs its points (`--executor`): one trait, [`Executor`], and a
//! registry of its members, one file each. A point's run is the same `pipeline run FILE
//! --json --set …` command wherever it runs; an executor only decides where and how, and
//! hands back what the run printed. Every point shares the cache (a shared directory, or
//! `--cache-dir s3://…`), so a stage two points share is computed once (the cache's lock
//! across processes and machines) and a sweep run again computes only what is missing.
//!
//! | member | runs a point | file |
//! |---|---|---|
//! | `local` | as a process on this machine, the cores divided between the points at once | `local.rs` |
//! | `slurm` | as a SLURM job (`sbatch --wait`), queued by the cluster | `slurm.rs` |

mod local;
mod slurm;

use crate::cli::SweepArgs;
use std::ffi::OsString;
use std::path::PathBuf;

/// One point's `pipeline run`, as an executor runs it.
pub struct PointRun {
    /// The `pipeline` program and its arguments (`run FILE --json --set …`).
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The directory the run starts in (the sweep's).
    pub dir: PathBuf,
    /// The point's number, from 1 (for a job's name and files).
    pub point: usize,
}

/// How a point's run ended: what it printed, and where it ran when that is worth saying
/// (a SLURM job's id).
pub struct Ended {
    pub stdout: Vec<u8>,
    /// The end of its stderr, when it failed.
    pub stderr: String,
    pub job: Option<String>,
}

/// A place to run a sweep's points.
pub trait Executor: Send + Sync {
    /// Its name, as `--executor` takes it.
    fn name(&self) -> &'static str;
    /// How many of `points` run at once when `--jobs` does not say; `None`: the `sweep`
    /// block's `jobs`.
    fn default_jobs(&self, points: usize) -> Option<usize>;
    /// The `accelerator.threads` each point's run gets when `jobs` run at once; `None`:
    /// the run's own default.
    fn threads(&self, jobs: usize) -> Option<usize>;
    /// Runs one point to its end (called from several threads at once).
    fn run(&self, run: &PointRun) -> Result<Ended, String>;
}

/// An executor as the command line's arguments configure it; `Err` says why it cannot
/// run here.
type Make = fn(&SweepArgs) -> Result<Box<dyn Executor>, String>;

/// The executors `--executor` knows, by name.
const MEMBERS: &[(&str, Make)] = &[("local", local::make), ("slurm", slurm::make)];

/// The names `--executor` takes.
pub fn names() -> Vec<&'static str> {
    MEMBERS.iter().map(|(name, _)| *name).collect()
}

/// The executor `args` name (`--executor`, default `local`), configured by them.
pub fn of(args: &SweepArgs) -> Result<Box<dyn Executor>, String> {
    let name = args.executor.as_deref().unwrap_or("local");
    let Some((_, make)) = MEMBERS.iter().find(|(n, _)| *n == name) else {
        return Err(format!(
            "there is no executor `{}`: --executor takes {}",
            manifests::escape_controls(name),
            names().join(" or ")
        ));
    };
    if args.slurm_args.is_some() && name != "slurm" {
        return Err(format!(
            "--slurm-args is for --executor slurm, and this sweep runs on `{name}`"
        ));
    }
    make(args)
}

/// The last `lines` lines of a run's stderr, which say why it failed.
pub fn last_lines(stderr: &[u8], lines: usize) -> String {
    let err = String::from_utf8_lossy(stderr);
    let tail: Vec<&str> = err.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The local executor, which the slurm one uses too for points the cache already holds
/// (answered in milliseconds, nothing to submit).
pub fn local() -> Box<dyn Executor> {
    Box::new(local::Local)
}
