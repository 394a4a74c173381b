//! `pipeline`: declarative, cached, accelerated PyTorch training from one KDL manifest.
//!
//! A thin facade that never loads libtorch: `check` and `graph` run here; `run` is handed
//! to `pipeline-worker`, installed next to this binary, with the same arguments.

mod check;
mod graph;

use clap::Parser;
use pipeline_cli::cli::{Cli, Command};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

/// Replaces this process with `pipeline-worker` and the same arguments; returns only if
/// that fails.
fn hand_over_to_worker() -> ExitCode {
    let worker = std::env::current_exe().map(|exe| exe.with_file_name("pipeline-worker"));
    let error = match &worker {
        Ok(path) => std::process::Command::new(path)
            .args(std::env::args_os().skip(1))
            .exec(),
        Err(e) => std::io::Error::new(e.kind(), e.to_string()),
    };
    let shown = worker.map_or_else(|_| "pipeline-worker".into(), |p| p.display().to_string());
    eprintln!("error: cannot start {shown}: {error}");
    eprintln!("  help: `pipeline run` needs pipeline-worker installed next to pipeline");
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    pipeline_cli::install_panic_hook();
    let ok = match Cli::parse().command {
        Command::Check { files, set, json } => check::run(&files, &set, json),
        Command::Graph { file, format, set } => graph::run(&file, &set, format),
        Command::Run { .. } => return hand_over_to_worker(),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
