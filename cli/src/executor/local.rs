//! `--executor local` (the default): each point a `pipeline run` process on this machine;
//! with `--jobs J`, J at once, the cores divided between them.

use super::{last_lines, Ended, Executor, PointRun};
use crate::cli::SweepArgs;
use std::process::{Command, Stdio};

pub struct Local;

pub fn make(_: &SweepArgs) -> Result<Box<dyn Executor>, String> {
    Ok(Box::new(Local))
}

impl Executor for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn default_jobs(&self, _points: usize) -> Option<usize> {
        None
    }

    fn threads(&self, jobs: usize) -> Option<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (jobs > 1).then(|| (cores / jobs).max(1))
    }

    fn run(&self, run: &PointRun) -> Result<Ended, String> {
        let out = Command::new(&run.program)
            .args(&run.args)
            .current_dir(&run.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot start `pipeline run`: {e}"))?;
        Ok(Ended {
            stdout: out.stdout,
            stderr: last_lines(&out.stderr, 8),
            job: None,
        })
    }
}
