//! The command line, shared by `pipeline` and `pipeline-worker` (which parses the same
//! arguments for the `run` that `pipeline` hands it).

use clap::{Parser, Subcommand};
use manifests::Override;
use std::path::PathBuf;

/// Output formats of `pipeline graph`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Dot,
    Mermaid,
}

#[derive(Parser)]
#[command(
    name = "pipeline",
    version,
    about = "Declarative, cached, accelerated PyTorch training from one KDL manifest"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
        #[arg(long, value_enum, default_value_t = Format::Dot)]
        format: Format,
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
