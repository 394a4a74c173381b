//! The worker, as a library: what executes `pipeline run` with libtorch. The
//! `pipeline-worker` binary is [`worker_main`]; a program built on pipeline that
//! registers its own accelerators, strategies or precisions calls [`main_with_worker`]
//! and is both the command line and its own worker (`examples/extension/`).
//!
//! Everything else about the command line is `pipeline_cli` (the `cli/` crate), which
//! does not link libtorch, so that `pipeline check` starts in milliseconds.

mod execute;
mod progress;
mod requeue;

pub use pipeline_cli;

use clap::Parser;
use pipeline_cli::app::AS_WORKER;
use pipeline_cli::cli::{Cli, Command};
use std::process::ExitCode;

/// `pipeline-worker`: runs `pipeline run`'s arguments (which the facade hands over
/// unchanged).
pub fn worker_main() -> ExitCode {
    pipeline_cli::install_panic_hook();
    // The GPU machine's kit checks a process group without a second process or GPU.
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, backend] = &args[..] {
        if flag == "--self-test-group" {
            return match backends::process_group::self_test(backend) {
                Ok(said) => {
                    println!("{said}");
                    ExitCode::SUCCESS
                }
                Err(why) => {
                    eprintln!("error: {why}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    let ok = match Cli::parse().command {
        Command::Run(args) => {
            if let Err(e) = backends::preemption::install(args.requeue_signal.signals()) {
                eprintln!("warning: cannot handle --requeue-signal: {e}");
            }
            execute::run(&args)
        }
        _ => {
            eprintln!("error: pipeline-worker only runs pipelines; use `pipeline`");
            false
        }
    };
    // A run that finished whatever the signal (it came too late to stop anything) is
    // done: nothing to requeue.
    match (backends::preemption::received(), ok) {
        (_, true) => ExitCode::SUCCESS,
        (Some(signal), false) => requeue::stopped_by(signal),
        (None, false) => ExitCode::FAILURE,
    }
}

/// The whole command line in one program that is also its own worker: call it from the
/// `main` of a program after registering its members
/// (`backends::accelerator::register_strategy`, …), so that both `check` and the
/// workers know them. The program starts itself, marked by `PIPELINE_AS_WORKER`, where
/// `pipeline` would start `pipeline-worker`.
pub fn main_with_worker() -> ExitCode {
    if std::env::var_os(AS_WORKER).is_some() {
        return worker_main();
    }
    pipeline_cli::app::main_as_own_worker()
}
