//! `pipeline check FILE...`: every problem in every file, exit 1 if any is an error.
//! With `--json`, one document `{"ok", "diagnostics": [...]}` on stdout whatever happens
//! (an unreadable file is a diagnostic like any other; a bad command line: `main.rs`).

use crate::cli::{JobDevice, LaunchContext};
use crate::load::Loaded;
use crate::render;
use manifests::{has_errors, Override};
use pipeline_core::categorical;
use rayon::prelude::*;
use serde_json::json;
use std::path::PathBuf;

pub fn run(files: &[PathBuf], overrides: &[Override], json: bool, launch: &LaunchContext) -> bool {
    let loaded: Vec<(Loaded, Option<String>)> = files
        .par_iter()
        .map(|f| {
            let mut l = Loaded::read_with_sweep(f, overrides);
            if launch.is_given() {
                launched(&mut l, launch);
            }
            // Inputs that are pipes or devices (found by file type; nothing is opened),
            // and Parquet files whose footers the run would refuse.
            let problems = l
                .checked
                .valid()
                .map(|m| {
                    let mut problems = pipeline_core::freshness::input_file_problems(m);
                    problems.extend(pipeline_core::formats::check(m));
                    problems
                })
                .unwrap_or_default();
            l.checked.diagnostics.extend(problems);
            // What the run will make of the table's columns, when some are categorical.
            let columns = l.checked.valid().and_then(|m| {
                let (table, rows) = categorical::glance(m)?;
                categorical::describe(&m.data, &table, rows)
            });
            (l, columns)
        })
        .collect();
    let ok = loaded
        .iter()
        .all(|(l, _)| !has_errors(&l.checked.diagnostics));
    if json {
        let diagnostics: Vec<_> = loaded
            .iter()
            .flat_map(|(l, _)| render::json_all(&l.checked.diagnostics, l.source.as_ref()))
            .collect();
        println!("{}", json!({ "ok": ok, "diagnostics": diagnostics }));
    } else {
        for (file, (l, columns)) in files.iter().zip(&loaded) {
            if l.report().is_some() {
                let stages = l.checked.manifest.as_ref().map_or(0, |m| m.stages.len());
                let line = format!(
                    "ok: {} ({stages} stage{})",
                    file.display(),
                    if stages == 1 { "" } else { "s" }
                );
                eprintln!("{}", manifests::escape_controls(&line));
                if let Some(columns) = columns {
                    eprintln!("  data: {}", manifests::escape_controls(columns));
                }
            }
        }
    }
    ok
}

/// The accelerator's rules decided again for the job `launch` describes (its processes,
/// its device) instead of for this machine: a rule that waits for `run` (a strategy of
/// several processes run as one, NCCL without CUDA, float16 on the CPU) is decided now,
/// located in the file, before the job is queued.
fn launched(loaded: &mut Loaded, launch: &LaunchContext) {
    let Some(manifest) = loaded.checked.manifest.as_ref() else {
        return;
    };
    let cuda = launch.device.map(|d| d == JobDevice::Cuda);
    let facts = pipeline_core::compat::Facts::launched(launch.processes(), cuda);
    let rule_codes: Vec<&str> = pipeline_core::compat::RULES
        .iter()
        .map(|r| r.code)
        .collect();
    let diagnostics = &mut loaded.checked.diagnostics;
    diagnostics.retain(|d| !rule_codes.contains(&d.code));
    diagnostics.extend(pipeline_core::compat::check(manifest, &facts));
}
