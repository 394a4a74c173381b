//! `pipeline check FILE...`: every problem in every file, exit 1 if any is an error.
//! With `--json`, one document `{"ok", "diagnostics": [...]}` on stdout whatever happens
//! (an unreadable file is a diagnostic like any other; a bad command line: `main.rs`).

use crate::load::Loaded;
use crate::render;
use manifests::{has_errors, Override};
use rayon::prelude::*;
use serde_json::json;
use std::path::PathBuf;

pub fn run(files: &[PathBuf], overrides: &[Override], json: bool) -> bool {
    let loaded: Vec<Loaded> = files
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
            l
        })
        .collect();
    let ok = loaded.iter().all(|l| !has_errors(&l.checked.diagnostics));
    if json {
        let diagnostics: Vec<_> = loaded
            .iter()
            .flat_map(|l| render::json_all(&l.checked.diagnostics, l.source.as_ref()))
            .collect();
        println!("{}", json!({ "ok": ok, "diagnostics": diagnostics }));
    } else {
        for (file, l) in files.iter().zip(&loaded) {
            if l.report().is_some() {
                let stages = l.checked.manifest.as_ref().map_or(0, |m| m.stages.len());
                let line = format!(
                    "ok: {} ({stages} stage{})",
                    file.display(),
                    if stages == 1 { "" } else { "s" }
                );
                eprintln!("{}", manifests::escape_controls(&line));
            }
        }
    }
    ok
}
