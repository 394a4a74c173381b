//! The command line's entry points: [`main`], what the `pipeline` binary runs (it hands
//! `run` to `pipeline-worker`, installed next to it), and [`main_as_own_worker`], for a
//! program built on pipeline that registers its own members (`examples/extension/`) and
//! is its own worker (`pipeline::main_with_worker`): it starts itself, marked by
//! [`AS_WORKER`], where `pipeline` starts `pipeline-worker`.

use crate::cli::{Cli, Command};
use crate::render;
use crate::{cache_cmd, check, explain, graph, plot, report, run, runs, status, sweep};
use clap::error::ErrorKind;
use clap::Parser;
use manifests::Diagnostic;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set in the environment of a worker started by a program that is its own worker.
pub const AS_WORKER: &str = "PIPELINE_AS_WORKER";

/// Whether this program is its own worker ([`main_with_worker`]).
static OWN_WORKER: AtomicBool = AtomicBool::new(false);

/// The command that runs a worker with this process's arguments: `pipeline-worker`
/// beside this binary, or this binary itself marked [`AS_WORKER`].
pub(crate) fn worker_command() -> std::io::Result<std::process::Command> {
    let exe = std::env::current_exe()?;
    Ok(match OWN_WORKER.load(Ordering::Relaxed) {
        true => {
            let mut cmd = std::process::Command::new(exe);
            cmd.env(AS_WORKER, "1");
            cmd
        }
        false => std::process::Command::new(exe.with_file_name("pipeline-worker")),
    })
}

/// The worker's program, for messages.
pub(crate) fn worker_program() -> PathBuf {
    worker_command().map_or_else(
        |_| PathBuf::from("pipeline-worker"),
        |c| PathBuf::from(c.get_program()),
    )
}

/// [`main`] in a program that is its own worker (`pipeline::main_with_worker`): `run`
/// starts this program, marked [`AS_WORKER`], where `pipeline` starts `pipeline-worker`.
pub fn main_as_own_worker() -> ExitCode {
    OWN_WORKER.store(true, Ordering::Relaxed);
    main()
}

pub fn main() -> ExitCode {
    crate::install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let ok = match cli.command {
        Command::Check {
            files,
            set,
            json,
            launch,
        } => check::run(&files, &set, json, &launch),
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
