//! `pipeline`: declarative, cached, accelerated PyTorch training from one KDL manifest.
//!
//! A thin facade that never loads libtorch: `check`, `graph`, `status`, `cache` and
//! `explain` run
//! here, and so does a `run` whose stages are all cached; any other `run` is handed to
//! `pipeline-worker`, installed next to this binary, with the same arguments.

mod cache_cmd;
mod check;
mod explain;
mod graph;
mod launch;
mod run;
mod status;

use clap::Parser;
use pipeline_cli::cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    pipeline_cli::install_panic_hook();
    let ok = match Cli::parse().command {
        Command::Check { files, set, json } => check::run(&files, &set, json),
        Command::Graph { file, format, set } => graph::run(&file, &set, format),
        Command::Run(args) => return run::run(&args),
        Command::Status {
            file,
            set,
            json,
            cache,
        } => status::run(&file, &set, json, &cache),
        Command::Cache { command, cache } => cache_cmd::run(&command, &cache),
        Command::Explain { key } => explain::run(key.as_deref()),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
