//! The core of `pipeline`: from a typed manifest to a checked plan of stages.
//!
//! The data flow, one module per arrow:
//!
//! ```text
//! text ──parse──▶ RawManifest (spanned KDL nodes)          kdl, in manifests::lower
//!      ──lower──▶ Manifest (typed specs, defaults, spans)  manifests::lower
//!      ──check──▶ Vec<Diagnostic> (every rule, collected)  check.rs, compat.rs, outputs.rs
//!      ──plan───▶ Plan (StageGraph, run order)             plan.rs
//!                 + a fingerprint per stage                fingerprint.rs
//!                 + fresh (cached) or stale, and why       freshness.rs, stale.rs
//!                 + a cached shorter training it extends   extend.rs
//!      ──run────▶ RunReport (ran | cached | failed, …)    backends::runner
//! ```
//!
//! What each kind of stage reads, writes for the user, stores and keys, which those
//! arrows ask of it, is its file in `stages/` (one per kind, the `StageMember` trait).
//!
//! Besides the arrows, this crate holds what backends need but that does not touch
//! libtorch, so it is tested in milliseconds: learning-rate schedules (`schedule.rs`),
//! the model as a network of steps with its shapes inferred and checked (`network.rs`),
//! the seeded shuffling and splitting of samples (`rng.rs`, `split.rs`), the readers of
//! tables (`table.rs`, `parquet.rs`) and their categorical columns (`categorical.rs`),
//! the data formats a program registers (`formats.rs`), and images: decoding and the pixel operations of
//! the transforms (`image.rs`), which images a data set holds (`image_listing.rs`), and
//! texts tokenised (`text.rs`); and sweeps: their points, the metric that ranks them,
//! successive halving's rungs and the `sweep` block's checks (`sweep.rs`); and where a
//! worker stands in a distributed run, by the cluster environment that started it
//! (`launch/`: torchrun, SLURM, Open MPI, one file each, and a registry).

pub mod categorical;
pub mod check;
pub mod compat;
pub mod dates;
pub mod extend;
pub mod finetune;
pub mod fingerprint;
pub mod formats;
pub mod freshness;
pub mod history;
pub mod image;
pub mod image_listing;
#[cfg(test)]
mod key_coverage;
pub mod launch;
pub mod load;
pub mod metrics;
pub mod network;
pub mod npy;
pub mod outputs;
pub mod param_groups;
pub mod parquet;
pub mod plan;
pub mod records;
pub mod report;
pub mod reshard;
pub mod rng;
pub mod sample_shape;
pub mod sampler;
pub mod schedule;
pub mod shards;
pub mod split;
pub mod stages;
pub mod stale;
pub mod stats;
pub mod sweep;
pub mod table;
pub mod text;
pub mod tfevents;
pub mod torchscript;

pub use check::check;
pub use manifests;
pub use plan::Plan;

use manifests::{Diagnostic, Manifest, Override};
use std::path::Path;

/// A manifest read from text and checked: the manifest (absent on a syntax error) and
/// every diagnostic, in the order they were found.
#[derive(Debug)]
pub struct Checked {
    pub manifest: Option<Manifest>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    /// The manifest, if it has no errors.
    pub fn valid(&self) -> Option<&Manifest> {
        if manifests::has_errors(&self.diagnostics) {
            None
        } else {
            self.manifest.as_ref()
        }
    }
}

/// The errors of the `sweep` block of `checked` (manifest `text` read from `path` with
/// `overrides`), its keys and values checked as its points would be
/// ([`sweep::check_block`]). For `pipeline check` and `pipeline sweep`: `run` and the
/// others leave the block alone (a sweep's point sets what the block sweeps).
pub fn sweep_block_errors(
    checked: &Checked,
    text: &str,
    path: &Path,
    overrides: &[Override],
) -> Vec<Diagnostic> {
    let Some((manifest, spec)) = checked.valid().and_then(|m| Some((m, m.sweep.as_ref()?))) else {
        return Vec::new();
    };
    // Each point read without the block (linear in the points, however large the block).
    // (Their messages are kept, their places are the block's values: not relocated.)
    let text = sweep::PointText::of(text, Some(spec));
    let overrides = sweep::point_overrides(overrides);
    let point = |set: &[Override]| {
        let all: Vec<Override> = overrides.iter().chain(set).cloned().collect();
        load(&text.text, path, &all).diagnostics
    };
    sweep::check_block(manifest, spec, point)
}

/// Lowers and checks manifest `text` read from `path`, with `--set` overrides applied.
pub fn load(text: &str, path: &Path, overrides: &[Override]) -> Checked {
    let default_name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("pipeline")
        .to_string();
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let lowered = manifests::lower(text, &default_name, &base_dir, overrides);
    let mut diagnostics = lowered.diagnostics;
    if let Some(manifest) = &lowered.manifest {
        diagnostics.extend(check(manifest));
        diagnostics.extend(outputs::check(manifest, Some(path)));
        diagnostics.extend(torchscript::check(manifest));
        diagnostics.extend(shards::check(manifest));
        // The model's shapes, when the rest is sound and the data's shape can be known
        // without loading it (a model that does not lower would only add noise).
        if !manifests::has_errors(&diagnostics) && manifest.model.torchscript.is_none() {
            match sample_shape::inputs(manifest) {
                Ok(Some(inputs)) => {
                    if let Err(d) = network::Network::compile(&manifest.model, &inputs) {
                        diagnostics.push(d);
                    }
                    let first = inputs.first().map_or(&[][..], |i| &i.shape[..]);
                    diagnostics.extend(check::bucket_key(manifest, first));
                }
                Ok(None) => {}
                Err(d) => diagnostics.push(d),
            }
        }
    }
    Checked {
        manifest: lowered.manifest,
        diagnostics,
    }
}
