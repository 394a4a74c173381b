//! The worker's `pipeline run FILE`: check, plan, look up the cache, execute what is
//! stale with libtorch, summarise. (`cli/src/run.rs` is the facade's: a run answered from
//! the cache, or handed here.)

use crate::progress;
use backends::process_group::ProcessGroup;
use manifests::Diagnostic;
use pipeline_cli::cli::RunArgs;
use pipeline_cli::load::Loaded;
use pipeline_cli::{prepare, render, summary};
use pipeline_core::launch::Rendezvous;
use serde_json::json;

pub fn run(args: &RunArgs) -> bool {
    let loaded = Loaded::read_to_run(&args.file, &args.set, &args.cache);
    let source = loaded.source.as_ref();
    let Some(manifest) = loaded.report() else {
        if args.json {
            println!(
                "{}",
                render::json_failure(&loaded.checked.diagnostics, source)
            );
        }
        return false;
    };
    // A run that cannot start: the diagnostic, and with `--json` the one document,
    // `{"ok": false, "pipeline", "diagnostics", "stages": []}`.
    let fail = |d: Diagnostic| {
        eprintln!("{}", render::human(&d, source));
        if args.json {
            let mut doc = render::json_failure(std::slice::from_ref(&d), source);
            doc["pipeline"] = json!(manifest.name);
            doc["stages"] = json!([]);
            println!("{doc}");
        }
        false
    };

    let rendezvous = match Rendezvous::from_env(|k| std::env::var(k).ok()) {
        Ok(r) => r,
        Err(why) => {
            return fail(
                Diagnostic::error(
                    "pipeline::launch::bad_environment",
                    format!("the distributed environment is inconsistent: {why}"),
                )
                .help("set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together (or let `pipeline run --nproc-per-node N` do it)"),
            )
        }
    };
    let local_rank = rendezvous.as_ref().map(|r| r.local_rank);
    let device = match backends::accelerator::resolve(&manifest.accelerator, local_rank) {
        Ok(d) => d,
        Err(d) => return fail(d),
    };
    // What can be refused before the processes meet (NCCL without CUDA, a strategy
    // without processes); the rules that need the data are decided once it is loaded.
    let facts = pipeline_core::compat::Facts {
        cuda: Some(device.is_cuda()),
        train_samples: None,
        world: Some(rendezvous.as_ref().map_or(1, |r| r.world)),
        at_run: true,
        told: false,
    };
    if let Some(d) = pipeline_core::compat::check(manifest, &facts)
        .into_iter()
        .find(Diagnostic::is_error)
    {
        return fail(d);
    }
    let kind = backends::accelerator::of(device).map_or("cpu", |a| a.describe().name);
    let mut prepared = match prepare::prepare_run(manifest, args, kind) {
        Ok(p) => p,
        Err(d) => return fail(d),
    };
    let group = match &rendezvous {
        None => None,
        Some(r) => {
            let timeout = std::time::Duration::from_secs_f64(
                manifest.accelerator.distributed.timeout_seconds,
            );
            let backend = backends::accelerator::comm_backend(
                manifest.accelerator.distributed.backend,
                device,
            );
            match ProcessGroup::join(&r.host, r.port, r.rank, r.world, timeout, backend) {
                Ok(g) => Some(g),
                Err(e) => return fail(
                    Diagnostic::error(
                        "pipeline::launch::rendezvous_failed",
                        format!(
                            "rank {} of {} could not join the others at {}:{}: {}",
                            r.rank,
                            r.world,
                            r.host,
                            r.port,
                            backends::error::short_message(&e)
                        ),
                    )
                    .label_opt(manifest.accelerator.span("timeout"), "waited this long")
                    .help("check that every process started and can reach MASTER_ADDR:MASTER_PORT"),
                ),
            }
        }
    };
    let rank = rendezvous.as_ref().map_or(0, |r| r.rank);
    // Only rank 0 shows progress (and writes the cache); the others train silently.
    let mut observer = match rank {
        0 => progress::for_stderr(args.json),
        _ => Box::new(backends::observer::Silent),
    };
    let report = match backends::run(
        manifest,
        &prepared.states,
        prepared.cache.as_mut(),
        device,
        group,
        backends::Options {
            tensorboard_dir: args.tensorboard_dir.as_deref(),
            reshard: args.reshard,
        },
        observer.as_mut(),
    ) {
        Ok(r) => r,
        Err(d) => return fail(d),
    };
    // Every rank shows its own failures (a peer that timed out names itself); only rank 0
    // reports the run.
    for s in &report.stages {
        if let Some(e) = &s.error {
            eprintln!("{}", render::human(e, source));
        }
    }
    if rank != 0 {
        return report.ok();
    }
    prepared.memo.save();
    // The run's record, for `pipeline runs`.
    if let Some(run_dir) = &report.run_dir {
        let record =
            pipeline_core::history::RunRecord::of(&report, &prepared.states, manifest, &args.file);
        if let Err(e) = record.write(run_dir) {
            eprintln!(
                "warning: cannot write {}: {e}",
                run_dir.join(pipeline_core::history::RECORD).display()
            );
        }
    }
    if args.json {
        println!("{}", summary::json(&report, source));
    } else {
        print!("{}", summary::table(&report));
    }
    report.ok()
}
