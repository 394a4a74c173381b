//! `pipeline`: declarative, cached, accelerated PyTorch training from one KDL manifest.
//!
//! A thin facade that never loads libtorch: `check`, `graph`, `status`, `cache` and
//! `explain` run here, and so does a `run` whose stages are all cached; any other `run`
//! is handed to `pipeline-worker`, installed next to this binary, with the same
//! arguments. The commands are `pipeline_cli`'s ([`pipeline_cli::app`]).

fn main() -> std::process::ExitCode {
    pipeline_cli::app::main()
}
