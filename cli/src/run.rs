//! `pipeline run` in the libtorch-free binary: when every stage is fresh in the cache, the
//! run is answered here in milliseconds; otherwise it is handed to `pipeline-worker`,
//! installed next to this binary, with the same arguments.

use crate::cli::RunArgs;
use crate::load::Loaded;
use crate::{prepare, summary};
use pipeline_core::freshness::Freshness;
use pipeline_core::launch::Rendezvous;
use pipeline_core::report::{cached_result, RunReport};
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

pub fn run(args: &RunArgs) -> ExitCode {
    // The processes of a run that may span machines (several nodes, or started by
    // torchrun or srun) must agree on what is cached, each reading its own machine's
    // cache: their workers compare, so none answers alone.
    let launched_outside =
        Rendezvous::from_env(|k| std::env::var(k).ok()).is_ok_and(|r| r.is_some());
    let maybe_across_machines = args.nnodes > 1 || launched_outside;
    match (!maybe_across_machines).then(|| answer_from_cache(args)) {
        Some(Some(())) => ExitCode::SUCCESS,
        _ if args.nproc_per_node > 1 || args.nnodes > 1 => crate::launch::launch(args),
        _ if args.max_restarts > 0 && !launched_outside => crate::launch::launch(args),
        _ if args.max_restarts > 0 => {
            eprintln!("warning: --max-restarts is ignored: this process was started by another launcher (srun, torchrun, mpirun), whose restarts apply (SLURM: `sbatch --requeue`; torchrun: `--max-restarts`)");
            hand_over_to_worker()
        }
        _ => hand_over_to_worker(),
    }
}

/// Prints the report of a run whose stages are all fresh; `None` when anything would run,
/// or anything is uncertain (an invalid manifest, `auto` on a machine with a GPU driver),
/// which the worker then handles and reports.
fn answer_from_cache(args: &RunArgs) -> Option<()> {
    if args.no_cache {
        return None;
    }
    let loaded = Loaded::read_to_run(&args.file, &args.set, &args.cache);
    let manifest = loaded.checked.valid()?;
    if !loaded.checked.diagnostics.is_empty() {
        return None; // warnings: the worker shows them
    }
    let device = prepare::device_kind_without_libtorch(&manifest.accelerator)?;
    let mut prepared = prepare::prepare_run(manifest, args, device).ok()?;
    let mut stages = Vec::new();
    for state in &prepared.states {
        let Freshness::Fresh(entry) = &state.freshness else {
            return None;
        };
        stages.push(cached_result(manifest, state.index, entry).ok()?);
    }
    prepared.memo.save();
    let cache = prepared.cache.as_mut()?;
    for (state, stage) in prepared.states.iter().zip(&stages) {
        cache.store.touch(&state.fingerprint.hash);
        if let Freshness::Fresh(entry) = &state.freshness {
            if let Err(e) = cache.store.publish(entry) {
                eprintln!(
                    "warning: stage `{}` is cached here but could not be shared: {e}",
                    stage.name
                );
            }
        }
        let stage = manifest.stages[state.index].name();
        let _ = cache.last.record(
            stage,
            &state.fingerprint.hash,
            &json!(state.fingerprint.key),
        );
    }
    let report = RunReport {
        pipeline: manifest.name.clone(),
        run_dir: None,
        device: device.to_string(),
        stages,
    };
    if args.json {
        println!("{}", summary::json(&report, loaded.source.as_ref()));
    } else {
        for s in &report.stages {
            eprintln!("{}", summary::stage_line(s));
        }
        print!("{}", summary::table(&report));
    }
    Some(())
}

/// Replaces this process with the worker (`pipeline-worker`) and the same arguments;
/// returns only if that fails.
fn hand_over_to_worker() -> ExitCode {
    let error = match crate::app::worker_command() {
        Ok(mut cmd) => cmd.args(std::env::args_os().skip(1)).exec(),
        Err(e) => e,
    };
    let shown = crate::app::worker_program();
    eprintln!("error: cannot start {}: {error}", shown.display());
    eprintln!("  help: `pipeline run` needs pipeline-worker installed next to pipeline");
    ExitCode::FAILURE
}
