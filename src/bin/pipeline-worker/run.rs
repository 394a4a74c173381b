//! `pipeline run FILE`: check, plan, look up the cache, execute what is stale, summarise.

use crate::progress;
use manifests::Diagnostic;
use pipeline_cli::cli::RunArgs;
use pipeline_cli::load::Loaded;
use pipeline_cli::{prepare, render, summary};
use serde_json::json;

pub fn run(args: &RunArgs) -> bool {
    let loaded = Loaded::read(&args.file, &args.set);
    let Some(manifest) = loaded.report() else {
        return false;
    };
    let source = loaded.source.as_ref();
    let fail = |d: Diagnostic| {
        eprintln!("{}", render::human(&d, source));
        if args.json {
            println!(
                "{}",
                json!({ "pipeline": manifest.name, "error": render::json(&d, source), "stages": [] })
            );
        }
        false
    };

    let device = match backends::device::resolve(&manifest.accelerator) {
        Ok(d) => d,
        Err(d) => return fail(d),
    };
    let kind = if device.is_cuda() { "cuda" } else { "cpu" };
    let mut prepared = match prepare::prepare_run(manifest, args, kind) {
        Ok(p) => p,
        Err(d) => return fail(d),
    };
    let mut observer = progress::for_stderr(args.json);
    let report = match backends::run(
        manifest,
        &prepared.states,
        prepared.cache.as_mut(),
        device,
        observer.as_mut(),
    ) {
        Ok(r) => r,
        Err(d) => return fail(d),
    };
    prepared.memo.save();
    for s in &report.stages {
        if let Some(e) = &s.error {
            eprintln!("{}", render::human(e, source));
        }
    }
    if args.json {
        println!("{}", summary::json(&report, source));
    } else {
        print!("{}", summary::table(&report));
    }
    report.ok()
}
