//! `pipeline`: declarative, cached, accelerated PyTorch training from one KDL manifest.
//!
//! A thin facade: argument parsing here, one file per command, and the work in the
//! `manifests`, `core` and `backends` crates.

mod check;
mod graph;
mod load;
mod progress;
mod render;
mod run;

use clap::{Parser, Subcommand};
use manifests::Override;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "pipeline",
    version,
    about = "Declarative, cached, accelerated PyTorch training from one KDL manifest"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check manifests without running them: every problem, with where it is.
    Check {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Override a manifest value, e.g. `--set optimizer.lr=3e-4` (repeatable).
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
        /// Print `{"ok", "diagnostics": [...]}` on stdout instead of reports on stderr.
        #[arg(long)]
        json: bool,
    },
    /// Print the stage DAG.
    Graph {
        #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = graph::Format::Dot)]
        format: graph::Format,
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
    },
    /// Run the pipeline's stages.
    Run {
        #[arg(default_value = "pipeline.kdl", value_name = "FILE")]
        file: PathBuf,
        /// Run only this stage and the stages it needs.
        #[arg(long, value_name = "NAME")]
        stage: Option<String>,
        /// Override a manifest value, e.g. `--set train.epochs=2` (repeatable).
        #[arg(long = "set", value_name = "PATH=VALUE", value_parser = Override::parse)]
        set: Vec<Override>,
        /// Print one JSON object with every stage's status and metrics on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Panics are bugs; show one line, never a libtorch C++ backtrace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        let cut = text.find("Exception raised from").unwrap_or(text.len());
        let first = text[..cut]
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(text)
            .trim();
        eprintln!("error: internal error: {first}");
        if let Some(at) = info.location() {
            eprintln!("  at {}:{}", at.file(), at.line());
        }
        eprintln!("  this is a bug in pipeline; please report it with the manifest that caused it");
    }));
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    let ok = match cli.command {
        Command::Check { files, set, json } => check::run(&files, &set, json),
        Command::Graph { file, format, set } => graph::run(&file, &set, format),
        Command::Run {
            file,
            stage,
            set,
            json,
        } => run::run(&file, stage.as_deref(), &set, json),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
