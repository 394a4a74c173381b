//! Which stages of a plan the cache already holds, and why the others must run, in the
//! words `pipeline status` shows: `optimizer.lr changed 0.001 → 0.0003`,
//! `data file digits.csv.gz changed`, `upstream stage train is stale`.
//!
//! A stage is fresh when the store has an intact entry under its fingerprint and it is not
//! forced. The reasons for a stale stage come from comparing its key with the key it had
//! when it last ran (kept per manifest in [`LastKeys`]).

use crate::fingerprint::{explain_change, fingerprints, stage_inputs, Environment, Fingerprint};
use cache::{Entry, HashMemo, LastKeys, Lookup, Store};
use manifests::{Diagnostic, Manifest, StageConfig};
use miette::SourceSpan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The cache as one run or `status` sees it: the store, and what this manifest's stages
/// were when they last ran.
pub struct Cache {
    pub store: Store,
    pub last: LastKeys,
}

#[derive(Debug, Clone)]
pub enum Freshness {
    /// The store holds the stage's outputs: nothing to do.
    Fresh(Entry),
    /// The stage must run, for these reasons.
    Stale(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct StageState {
    pub index: usize,
    pub fingerprint: Fingerprint,
    pub freshness: Freshness,
    /// Rerun by `--force`, whatever the cache holds.
    pub forced: bool,
}

impl StageState {
    pub fn is_fresh(&self) -> bool {
        matches!(self.freshness, Freshness::Fresh(_))
    }
}

/// Fingerprints the stages of `order` (input files hashed through `memo`, which the caller
/// saves once the run has started) and looks each
/// up in `cache` (`None`: the cache is off, every stage is stale). `forced` stages are
/// stale whatever the cache holds. `Err` when an input file cannot be read.
pub fn assess(
    manifest: &Manifest,
    order: &[usize],
    environment: &Environment,
    cache: Option<&Cache>,
    memo: &mut HashMemo,
    forced: &BTreeSet<usize>,
) -> Result<Vec<StageState>, Diagnostic> {
    let all = fingerprints(manifest, order, environment, |path| memo.hash(path))
        .map_err(|(index, role, e)| unreadable_input(manifest, index, &role, e))?;

    let mut states: Vec<StageState> = Vec::with_capacity(order.len());
    for &index in order {
        let fingerprint = all[&index].clone();
        let freshness = match cache {
            None => Freshness::Stale(vec!["the cache is off (--no-cache)".into()]),
            Some(_) if forced.contains(&index) => Freshness::Stale(vec!["forced (--force)".into()]),
            Some(Cache { store, last }) => match store.get(&fingerprint.hash) {
                Lookup::Hit(entry) => Freshness::Fresh(entry),
                Lookup::Corrupt(why) => {
                    Freshness::Stale(vec![format!("the cache entry is unusable: {why}")])
                }
                Lookup::Miss => Freshness::Stale(why_stale(
                    manifest,
                    index,
                    &fingerprint,
                    &states,
                    &all,
                    last,
                )),
            },
        };
        states.push(StageState {
            index,
            fingerprint,
            freshness,
            forced: forced.contains(&index),
        });
    }
    Ok(states)
}

/// The reasons a stage missing from the store must run.
fn why_stale(
    manifest: &Manifest,
    index: usize,
    now: &Fingerprint,
    earlier: &[StageState],
    all: &BTreeMap<usize, Fingerprint>,
    last: &LastKeys,
) -> Vec<String> {
    let stage = &manifest.stages[index];
    let needed: Vec<(&str, Option<&StageState>)> = stage
        .needs
        .iter()
        .map(|n| {
            let state = earlier
                .iter()
                .find(|s| manifest.stages[s.index].name.value == n.value);
            (n.value.as_str(), state)
        })
        .collect();
    let mut reasons: Vec<String> = needed
        .iter()
        .filter(|(_, s)| s.is_some_and(|s| !s.is_fresh()))
        .map(|(name, _)| format!("upstream stage {name} is stale"))
        .collect();
    let previous = last.get(stage.name()).and_then(|(fp, key)| {
        let key: crate::fingerprint::StageKey = serde_json::from_value(key.clone()).ok()?;
        Some((fp.to_string(), key))
    });
    match previous {
        None => reasons.push("never run".into()),
        Some((old_fp, old_key)) => {
            if reasons.is_empty() {
                for (name, state) in &needed {
                    if let Some(s) = state {
                        if !old_key.upstream.contains(&all[&s.index].hash) {
                            reasons.push(format!("upstream stage {name} changed"));
                        }
                    }
                }
            }
            reasons.extend(explain_change(
                &old_key,
                &now.key,
                &stage_inputs(manifest, index),
            ));
            if reasons.is_empty() {
                reasons.push(match (&stage.config, old_fp == now.hash) {
                    (StageConfig::Eval(_), true) => "its result is missing from the cache".into(),
                    (_, true) => format!(
                        "output {} missing from the cache",
                        output_name(&stage.config)
                    ),
                    (_, false) => "not in the cache".into(),
                });
            }
        }
    }
    reasons
}

/// The name a stage's main output has in the store.
pub fn output_name(config: &StageConfig) -> &'static str {
    match config {
        StageConfig::Train(_) => MODEL_OUTPUT,
        StageConfig::Eval(_) => "metrics",
        StageConfig::Checkpoint(_) => CHECKPOINT_OUTPUT,
    }
}

/// The trained weights a `train` stage stores.
pub const MODEL_OUTPUT: &str = "model.safetensors";
/// The weights and metadata a `checkpoint` stage stores.
pub const CHECKPOINT_OUTPUT: &str = "checkpoint.safetensors";
pub const CHECKPOINT_METADATA: &str = "checkpoint.json";

fn unreadable_input(
    manifest: &Manifest,
    index: usize,
    role: &str,
    e: std::io::Error,
) -> Diagnostic {
    let path = &stage_inputs(manifest, index)[role];
    let init_span = match &manifest.stages[index].config {
        StageConfig::Train(t) => t.init.as_ref().and_then(|i| i.span),
        _ => None,
    };
    if e.kind() == std::io::ErrorKind::NotFound {
        return missing_input(manifest, role, path, init_span);
    }
    let span = if role == "init" {
        init_span
    } else {
        manifest.data.source.span
    };
    Diagnostic::error(
        "pipeline::data::unreadable",
        format!("cannot read {}: {e}", path.display()),
    )
    .label_opt(span, "this file")
    .help("check the file's permissions")
}

/// The diagnostic for an input file that does not exist; `role` is as in
/// [`stage_inputs`] (`data`, `labels`, `init`), `init_span` points at a stage's `init`.
pub fn missing_input(
    manifest: &Manifest,
    role: &str,
    path: &Path,
    init_span: Option<SourceSpan>,
) -> Diagnostic {
    let relative = format!(
        "paths are relative to the manifest's directory ({})",
        match manifest.base_dir.to_str() {
            Some("") => ".",
            Some(dir) => dir,
            None => "?",
        }
    );
    let source = manifest.data.source.span;
    match role {
        "labels" => Diagnostic::error(
            "pipeline::data::missing_file",
            format!("the labels file {} does not exist", path.display()),
        )
        .label_opt(source, "data file")
        .help("for .npy data, name the labels file: `labels \"labels.npy\"`"),
        "init" => Diagnostic::error(
            "pipeline::train::missing_init",
            format!("the starting weights {} do not exist", path.display()),
        )
        .label_opt(init_span, "starting weights")
        .help(relative),
        _ => Diagnostic::error(
            "pipeline::data::missing_file",
            format!("the data file {} does not exist", path.display()),
        )
        .label_opt(source, "file not found")
        .help(if manifest.data.source.value.ends_with("digits.csv.gz") {
            format!("{relative}; `scripts/setup.sh` fetches the digits data")
        } else {
            relative
        }),
    }
}
