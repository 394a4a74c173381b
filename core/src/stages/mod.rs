//! Stage kinds, one file each: what a `train`, `eval`, `checkpoint` or `predict` stage
//! reads, what it writes for the user, what its cache entry holds and what its key is
//! made of. Every place that needs one of these answers asks the stage's member
//! ([`member`]) instead of matching on the kind: the checks of inputs and outputs
//! (`outputs.rs`), the key (`fingerprint.rs`), freshness (`freshness.rs`), the sweep's
//! table (`sweep.rs`), and the command line's fetching of inputs named by URL.
//!
//! A stage's settings are lowered data (`manifests::StageConfig`, one spec per kind);
//! its execution, which needs libtorch, is the kind's file in `backends/src/runner/`.
//! Adding a kind is its spec and schema in `manifests`, its file here and in the runner,
//! and a line in [`member`] and [`KINDS`].

mod checkpoint;
mod eval;
mod predict;
mod train;

use crate::fingerprint::input_role;
use manifests::{Manifest, PredictionFormat, Spanned, StageConfig, StageKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A file of the stage's own that it reads: a training's starting weights, the source
/// an evaluation or a prediction reads.
pub struct OwnInput<'a> {
    /// What it is, in words ("the starting weights").
    pub role: &'static str,
    pub path: &'a Spanned<PathBuf>,
    /// Whether it may name an object in storage (`s3://…`), fetched before the run.
    pub may_be_url: bool,
}

/// What a stage writes for the user, outside the cache.
pub enum Delivery<'a> {
    Nothing,
    /// Weights, and their metadata beside them, at `path` (a URL: sent there), or in
    /// the run directory when it has none.
    Checkpoint {
        path: Option<&'a Spanned<PathBuf>>,
    },
    /// Predictions in `format` at `output`, or in the run directory when it has none.
    Predictions {
        output: Option<&'a Spanned<PathBuf>>,
        format: PredictionFormat,
    },
}

impl<'a> Delivery<'a> {
    /// The path the manifest gives for it, and what it is in words.
    pub fn named_path(&self) -> Option<(&'static str, &'a Spanned<PathBuf>)> {
        match self {
            Delivery::Nothing => None,
            Delivery::Checkpoint { path } => path.map(|p| ("the checkpoint", p)),
            Delivery::Predictions { output, .. } => output.map(|p| ("the predictions", p)),
        }
    }
}

/// The parts of a stage's key that every kind draws from (each already stripped of
/// what is not keyed): the stage's own settings, the data section, how steps are taken.
pub struct KeyParts {
    pub stage: Value,
    pub data: Value,
    pub accelerator: Value,
}

/// What one kind of stage is, beside executing it.
pub trait StageMember {
    /// The file of its own it reads, if it has one.
    fn own_input(&self) -> Option<OwnInput<'_>>;
    /// What it writes for the user.
    fn delivery(&self) -> Delivery<'_>;
    /// The files it reads, by role (as in its key), resolved against the manifest's
    /// directory; the scripted metrics it measures are added for every kind.
    fn key_inputs(&self, manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>);
    /// The manifest sections in its key beside its own settings.
    fn key_spec(&self, manifest: &Manifest, parts: KeyParts) -> Value;
    /// The outputs its cache entry must hold to be served.
    fn required_outputs(&self) -> &'static [&'static str];
    /// The output named when an entry with an unchanged key lacks it (`None`: its result
    /// is its metrics).
    fn main_output(&self) -> Option<&'static str>;
    /// The metrics its report holds (per-class metrics by their name).
    fn reported_metrics(&self, manifest: &Manifest, classification: bool) -> Vec<String>;
}

/// The member of a stage's kind.
pub fn member(config: &StageConfig) -> &dyn StageMember {
    match config {
        StageConfig::Train(spec) => spec,
        StageConfig::Eval(spec) => spec,
        StageConfig::Checkpoint(spec) => spec,
        StageConfig::Predict(spec) => spec,
    }
}

/// What is known of a kind without a stage of it: the outputs an entry of its key must
/// hold (read from a stored key's `spec.stage`, for a store that has no manifest), and
/// how `plan --graph` draws it.
pub struct Kind {
    pub kind: StageKind,
    pub required_of_key: fn(&Value) -> &'static [&'static str],
    /// Graphviz's node shape.
    pub dot_shape: &'static str,
    /// Mermaid's brackets around the node's label.
    pub mermaid_shape: (&'static str, &'static str),
}

/// Every kind of stage, in the order of [`StageKind::ALL`].
pub const KINDS: &[Kind] = &[train::KIND, eval::KIND, checkpoint::KIND, predict::KIND];

/// The entry of `kind` in [`KINDS`].
pub fn kind(kind: StageKind) -> &'static Kind {
    // `KINDS` lists every kind in `StageKind::ALL`'s order (tested below).
    let at = StageKind::ALL.iter().position(|k| *k == kind);
    &KINDS[at.unwrap_or_default()]
}

/// The trained weights a `train` stage stores.
pub const MODEL_OUTPUT: &str = "model.safetensors";
/// The weights and metadata a `checkpoint` stage stores.
pub const CHECKPOINT_OUTPUT: &str = "checkpoint.safetensors";
pub const CHECKPOINT_METADATA: &str = "checkpoint.json";
/// A `predict` stage's predictions, as a table or as an array.
pub const PREDICTIONS_CSV: &str = "predictions.csv";
pub const PREDICTIONS_NPY: &str = "predictions.npy";

/// The name of predictions in `format` in the store.
pub fn predictions_output(format: PredictionFormat) -> &'static str {
    match format {
        PredictionFormat::Csv => PREDICTIONS_CSV,
        PredictionFormat::Npy => PREDICTIONS_NPY,
    }
}

fn predictions_required(format: Option<PredictionFormat>) -> &'static [&'static str] {
    match format {
        Some(PredictionFormat::Csv) => &[PREDICTIONS_CSV],
        Some(PredictionFormat::Npy) => &[PREDICTIONS_NPY],
        None => &[],
    }
}

/// The predictions format a stored key's stage names in `field`.
fn format_of_key(stage: &Value, field: &str) -> Option<PredictionFormat> {
    stage[field].as_str().and_then(PredictionFormat::parse)
}

/// The data file and the files read with it: a labels file (`labels`), the inputs of
/// `data.inputs` (`inputs`).
fn data_files(manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>) {
    let data = &manifest.data;
    files.insert("data".into(), manifest.resolve(&data.source.value));
    if let Some(labels) = &data.labels_file {
        files.insert("labels".into(), manifest.resolve(&labels.value));
    }
    for input in &data.extra_inputs {
        files.insert(
            input_role(&input.name),
            manifest.resolve(&input.source.value),
        );
    }
}

/// The tokenizer texts are read through.
fn tokenizer(manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>) {
    if let Some(text) = &manifest.data.text {
        files.insert("tokenizer".into(), manifest.resolve(&text.tokenizer.value));
    }
}

/// A scripted loss, run by a stage that computes the loss.
fn loss_script(manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>) {
    if let Some(script) = manifest.loss.kind.script() {
        files.insert("loss".into(), script.file.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind has its one entry, under the name a manifest and a stored key give it.
    #[test]
    fn every_kind_is_listed_once() {
        let listed: Vec<StageKind> = KINDS.iter().map(|k| k.kind).collect();
        assert_eq!(listed, StageKind::ALL.to_vec());
    }

    /// What a stored key says an entry must hold is what the stage's member says, for
    /// every kind and every way of writing predictions.
    #[test]
    fn a_stored_key_requires_what_the_stage_requires() {
        let text = r#"
            data { source "d.csv"; label "y"; }
            model { linear 2; }
            loss "cross-entropy"
            optimizer "adam"
            train
            eval "quiet" { needs "train"; }
            eval "written" { needs "train"; output "e.npy"; }
            checkpoint { needs "train"; }
            predict "table" { needs "train"; source "new.csv"; }
            predict "array" { needs "train"; source "new.csv"; output "p.npy"; }
        "#;
        let lowered = manifests::lower(text, "m", std::path::Path::new(""), &[]);
        let manifest = lowered.manifest.expect("the manifest lowers");
        let mut seen = Vec::new();
        for stage in &manifest.stages {
            let key = serde_json::json!({ "spec": { "stage": stage.config } });
            let required = member(&stage.config).required_outputs();
            assert_eq!(
                crate::freshness::required_outputs_of_key(&key),
                required,
                "{}",
                stage.name()
            );
            seen.push((stage.kind(), required));
        }
        assert!(seen.contains(&(StageKind::Eval, &[] as &[&str])));
        assert!(seen.contains(&(StageKind::Eval, &[PREDICTIONS_NPY] as &[&str])));
        assert!(seen.contains(&(StageKind::Predict, &[PREDICTIONS_CSV] as &[&str])));
        assert!(seen.contains(&(StageKind::Predict, &[PREDICTIONS_NPY] as &[&str])));
    }
}
