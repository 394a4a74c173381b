//! Reading a manifest file and checking it, for every command.

use crate::cli::CacheDir;
use crate::render::{self, Source};
use manifests::{Diagnostic, Manifest, Override};
use pipeline_core::Checked;
use std::path::Path;

/// A manifest file, read and checked.
pub struct Loaded {
    pub source: Option<Source>,
    pub checked: Checked,
}

impl Loaded {
    pub fn read(path: &Path, overrides: &[Override]) -> Loaded {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let checked = pipeline_core::load(&text, path, overrides);
                Loaded {
                    source: Some(Source {
                        name: path.display().to_string(),
                        text,
                    }),
                    checked,
                }
            }
            Err(e) => {
                let diag = Diagnostic::error(
                    "pipeline::manifest::unreadable",
                    format!("cannot read {}: {e}", path.display()),
                )
                .help(if path == Path::new("pipeline.kdl") {
                    "pass the manifest's path: `pipeline run FILE`"
                } else {
                    "check the path"
                });
                Loaded {
                    source: None,
                    checked: Checked {
                        manifest: None,
                        diagnostics: vec![diag],
                    },
                }
            }
        }
    }

    /// [`Loaded::read`] for a command that plans a run (`run`, `status`, `sweep`, `cache
    /// gc`): inputs named by URL fetched into the cache `cache` (`cli/src/fetch.rs`); one that
    /// cannot be is one more error. `check` reads without it: it never goes online.
    pub fn read_to_run(path: &Path, overrides: &[Override], cache: &CacheDir) -> Loaded {
        let mut loaded = Loaded::read(path, overrides);
        if loaded.checked.valid().is_some() {
            if let Some(manifest) = loaded.checked.manifest.as_mut() {
                if let Err(d) = crate::fetch::fetch_inputs(manifest, cache) {
                    loaded.checked.diagnostics.push(d);
                }
            }
        }
        loaded
    }

    /// [`Loaded::read`], with the errors of the manifest's `sweep` block (`pipeline check`
    /// and `pipeline sweep`; a run leaves the block alone).
    pub fn read_with_sweep(path: &Path, overrides: &[Override]) -> Loaded {
        let mut loaded = Loaded::read(path, overrides);
        if let Some(source) = &loaded.source {
            let errors =
                pipeline_core::sweep_block_errors(&loaded.checked, &source.text, path, overrides);
            loaded.checked.diagnostics.extend(errors);
        }
        loaded
    }

    /// Prints the diagnostics to stderr (the first [`render::SHOWN`], then a count);
    /// returns the manifest if it has no errors.
    pub fn report(&self) -> Option<&Manifest> {
        eprint!(
            "{}",
            render::human_report(&self.checked.diagnostics, self.source.as_ref())
        );
        self.checked.valid()
    }
}
