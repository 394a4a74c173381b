//! `pipeline status FILE`: each stage fresh (in the cache) or stale, with the reasons in
//! words. Never loads libtorch; `auto` devices count as CUDA when an NVIDIA driver is
//! present. With `--json`, one document on stdout whatever happens: the stages with
//! `"ok": true` (and the manifest's warnings), or `render::json_failure`'s
//! `{"ok": false, "diagnostics": [...]}`.

use crate::cli::CacheDir;
use crate::load::Loaded;
use crate::{prepare, render, summary};
use manifests::Override;
use pipeline_core::freshness::Freshness;
use serde_json::json;
use std::path::Path;

pub fn run(file: &Path, overrides: &[Override], json: bool, cache: &CacheDir) -> bool {
    let loaded = Loaded::read_to_run(file, overrides, cache);
    let Some(manifest) = loaded.report() else {
        if json {
            let failure = render::json_failure(&loaded.checked.diagnostics, loaded.source.as_ref());
            println!("{failure}");
        }
        return false;
    };
    let mut prepared = match prepare::prepare_to_look(file, manifest, cache) {
        Ok(p) => p,
        Err(d) => {
            eprintln!("{}", render::human(&d, loaded.source.as_ref()));
            if json {
                let mut diagnostics = loaded.checked.diagnostics.clone();
                diagnostics.push(d);
                println!(
                    "{}",
                    render::json_failure(&diagnostics, loaded.source.as_ref())
                );
            }
            return false;
        }
    };
    prepared.memo.save();
    let root = prepare::cache_root(cache, &manifest.base_dir);
    if json {
        let stages: Vec<_> = prepared
            .states
            .iter()
            .map(|s| {
                let stage = &manifest.stages[s.index];
                let reasons = match &s.freshness {
                    Freshness::Fresh(_) => &[][..],
                    Freshness::Stale(r) => r.as_slice(),
                };
                json!({
                    "name": stage.name(),
                    "kind": stage.kind().as_str(),
                    "status": if s.is_fresh() { "fresh" } else { "stale" },
                    "reasons": reasons,
                    "fingerprint": s.fingerprint.hash,
                })
            })
            .collect();
        let warnings = render::json_all(&loaded.checked.diagnostics, loaded.source.as_ref());
        println!(
            "{}",
            json!({
                "ok": true,
                "pipeline": manifest.name,
                "cache": root,
                "stages": stages,
                "diagnostics": warnings,
            })
        );
    } else {
        let mut rows = vec![["stage", "kind", "status", "why"]
            .map(String::from)
            .to_vec()];
        for s in &prepared.states {
            let stage = &manifest.stages[s.index];
            let (status, why) = match &s.freshness {
                Freshness::Fresh(_) => ("fresh", String::new()),
                Freshness::Stale(reasons) => ("stale", pipeline_core::stale::joined(reasons)),
            };
            rows.push(vec![
                stage.name().into(),
                stage.kind().as_str().into(),
                status.into(),
                why,
            ]);
        }
        let fresh = prepared.states.iter().filter(|s| s.is_fresh()).count();
        let line = format!(
            "{} · {fresh} of {} stages fresh · cache {}",
            manifest.name,
            prepared.states.len(),
            root.display()
        );
        // The name is the user's: its control characters are shown escaped.
        println!("{}", manifests::escape_controls(&line));
        print!("{}", summary::columns(&rows));
    }
    true
}
