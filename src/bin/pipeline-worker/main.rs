//! `pipeline-worker`: executes `pipeline run` (which hands its arguments over unchanged).
//! The only binary that loads libtorch.

mod progress;
mod run;

use clap::Parser;
use pipeline_cli::cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    pipeline_cli::install_panic_hook();
    let ok = match Cli::parse().command {
        Command::Run(args) => run::run(&args),
        _ => {
            eprintln!("error: pipeline-worker only runs pipelines; use `pipeline`");
            false
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
