//! Running a `checkpoint` stage: the weights exported as safetensors, with the metadata
//! that applying them needs.

use super::{Context, Produced};
use manifests::{CheckpointSpec, Diagnostic, WeightsFrom};
use pipeline_core::freshness::StageState;
use pipeline_core::stages::{CHECKPOINT_METADATA, CHECKPOINT_OUTPUT};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use tch::Kind;

impl Context<'_> {
    /// A `checkpoint` stage: the weights of `train` stage `source` exported where `path`
    /// says, with the metadata that applying them needs.
    pub(super) fn checkpoint(
        &mut self,
        state: &StageState,
        spec: &CheckpointSpec,
        source: Option<usize>,
        scratch: &Path,
    ) -> Result<Produced, Diagnostic> {
        // Rank 0 alone writes files.
        if self.session.rank() != 0 {
            return Ok(Produced::metrics(BTreeMap::new(), Vec::new()));
        }
        let (index, manifest) = (state.index, self.session.manifest);
        let stage = &manifest.stages[index];
        let source = source.expect("check ensures a checkpoint stage needs a train stage");
        // A local `path` is checked first (a refused one costs no work); the files are
        // written in the scratch directory, and copied there once stored.
        if let Some(local) = spec
            .path
            .as_ref()
            .filter(|p| !pipeline_core::outputs::is_url(&p.value))
        {
            self.output_path(index, Some(local), "safetensors")?;
        }
        let path = scratch.join(CHECKPOINT_OUTPUT);
        let (sample_shape, scaling) = (&self.session.data.sample_shape, &self.session.data.scaling);
        let scaling = scaling.as_ref().map(|(shift, divide)| json!({"kind": manifest.data.scale, "subtract": shift, "divide": divide}));
        // The model's outputs are scaled labels: output × multiply + add is the label.
        let label_scaling = self.session.data.label_scaling.as_ref().map(|(shift, divide)| {
            json!({"kind": manifest.data.scale_label.value, "multiply": divide, "add": shift})
        });
        let sample_shape = sample_shape.clone();
        let input_names = self.session.data.input_names.clone();
        let input_scaling: BTreeMap<String, serde_json::Value> = self
            .session
            .data
            .extra_scaling
            .iter()
            .map(|(name, (shift, divide))| {
                (name.clone(), json!({"subtract": shift, "divide": divide}))
            })
            .collect();
        let (classes, filled) = (
            self.session.data.classes.clone(),
            self.session.data.filled.clone(),
        );
        let columns = (
            self.session.data.feature_columns.clone(),
            self.session.data.label_names.clone(),
        );
        let categorical = (
            self.session.data.categorical.clone(),
            self.session.data.input_columns.clone(),
        );
        let dates: Vec<serde_json::Value> = self
            .session
            .data
            .dates
            .iter()
            .map(|(column, parts)| json!({"column": column, "parts": parts}))
            .collect();
        let trained = self.model_of(source, spec.from.value)?;
        let m = &trained.metrics;
        // The metrics of the weights exported (counts and positions aside).
        let source_metrics: BTreeMap<&str, f64> = m
            .iter()
            .filter(|(k, _)| {
                !["epochs", "steps", "skipped_steps", "stopped_epoch"].contains(&k.as_str())
            })
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let mut metadata = json!({
            "pipeline": manifest.name,
            "stage": stage.name(),
            "from_stage": manifest.stages[source].name(),
            "fingerprint": state.fingerprint.hash,
            "epoch": m.get("epochs").map(|e| *e as u64),
            "step": m.get("steps").map(|s| *s as u64),
            "metrics": source_metrics,
            "dtype": format!("{:?}", Kind::Float).to_lowercase(),
            // How the model was evaluated (its autocast), and what its outputs
            // are: logits for a cross-entropy, log-probabilities for nll, values
            // for a regression.
            "precision": manifest.accelerator.precision.as_str(),
            "loss": manifest.loss.kind.as_str(),
            "model": &manifest.model.nodes,
            "input_shape": sample_shape,
            "inputs": input_names,
            "input_scaling": input_scaling,
            "scaling": scaling,
            "tool": concat!("pipeline ", env!("CARGO_PKG_VERSION")),
        });
        if let WeightsFrom::Best(_) = spec.from.value {
            // Which of the kept weights, by what.
            metadata["weights"] = json!(spec.from.value);
        }
        if let Some(script) = &manifest.model.torchscript {
            // The module the weights belong to, as the manifest names it.
            metadata["torchscript"] = json!(script.path.value);
        }
        if let Some(classes) = classes {
            // Output k is the class named `classes[k]`.
            metadata["classes"] = json!(classes);
        }
        if let Some(images) = &manifest.data.images {
            // How an image becomes the input (the transforms' evaluation form).
            metadata["images"] = json!(images);
        }
        if let (Some(features), labels) = columns {
            // A table with a header: the columns the input is made of, in its order, and
            // those the outputs stand for, so that the model is used without its manifest.
            metadata["feature_columns"] = json!(features);
            metadata["label_columns"] = json!(labels);
        }
        if let Some(inputs) = &categorical.1 {
            // The input's features by name: the numeric columns (a date column's parts,
            // `when.year`, in its place), then a `column=value` per one-hot value.
            metadata["input_columns"] = json!(inputs);
        }
        if !categorical.0.is_empty() {
            // Each categorical column's values (the training split's, sorted) and how they
            // were encoded.
            metadata["categorical"] = json!(categorical.0);
        }
        if !dates.is_empty() {
            // Each column of dates and the parts it gives, in order.
            metadata["dates"] = json!(dates);
        }
        if let Some(label_scaling) = label_scaling {
            metadata["label_scaling"] = label_scaling;
        }
        if let Some(filled) = filled {
            // What a missing feature was filled with (before scaling).
            metadata["missing"] = json!({"kind": manifest.data.missing, "fill": filled});
        }
        let written = crate::checkpoint::save(&trained.model, &path, &metadata)?;
        debug_assert_eq!(written[1], scratch.join(CHECKPOINT_METADATA));
        let store = vec![
            (CHECKPOINT_OUTPUT.to_string(), written[0].clone()),
            (CHECKPOINT_METADATA.to_string(), written[1].clone()),
        ];
        Ok(Produced::metrics(BTreeMap::new(), store))
    }
}
