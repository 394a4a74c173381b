//! `pipeline check FILE...`: every problem in every file, exit 1 if any is an error.
//! With `--json`, one document `{"ok", "diagnostics": [...]}` on stdout whatever happens
//! (an unreadable file is a diagnostic like any other; a bad command line: `main.rs`).

use crate::load::Loaded;
use crate::render;
use manifests::{has_errors, Override};
use pipeline_core::categorical;
use rayon::prelude::*;
use serde_json::json;
use std::path::PathBuf;

pub fn run(files: &[PathBuf], overrides: &[Override], json: bool) -> bool {
    let loaded: Vec<(Loaded, Option<String>)> = files
        .par_iter()
        .map(|f| {
            let mut l = Loaded::read_with_sweep(f, overrides);
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
