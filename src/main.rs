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
mod plot;
mod report;
mod run;
mod runs;
mod shown_runs;
mod status;
mod sweep;

use clap::error::ErrorKind;
use clap::Parser;
use manifests::Diagnostic;
use pipeline_cli::cli::{Cli, Command};
use pipeline_cli::render;
use std::process::ExitCode;

fn main() -> ExitCode {
    pipeline_cli::install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let ok = match cli.command {
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
        Command::Runs(args) => runs::run(&args),
        Command::Plot(args) => plot::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Sweep(args) => sweep::run(&args),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A command line clap refuses (a malformed `--set`, an unknown flag): clap's message on
/// stderr, and with `--json` also the one JSON document every `--json` command prints,
/// `{"ok": false, "diagnostics": [{"code": "pipeline::cli::usage", …}]}`. Exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    let answer = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    let json = std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    if answer || !json {
        e.exit();
    }
    let _ = e.print();
    println!("{}", render::json_failure(&[usage_diagnostic(&e)], None));
    ExitCode::from(2)
}

/// clap's error as a diagnostic: its first line the message, the rest the help.
fn usage_diagnostic(e: &clap::Error) -> Diagnostic {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines
        .next()
        .map_or("invalid command line", |l| {
            l.trim_start_matches("error:").trim()
        })
        .to_string();
    let rest: Vec<&str> = lines.collect();
    let help = if rest.is_empty() {
        "see `pipeline help`".to_string()
    } else {
        rest.join(" ")
    };
    Diagnostic::error("pipeline::cli::usage", message).help(help)
}
