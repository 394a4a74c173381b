//! `predict`: writes a trained model's predictions for every sample of its `source`.

use super::{
    format_of_key, predictions_output, predictions_required, tokenizer, Delivery, KeyParts, Kind,
    OwnInput, StageMember,
};
use crate::fingerprint::{source_input_role, SOURCE_ROLE};
use manifests::{Manifest, PredictSpec, StageKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) const KIND: Kind = Kind {
    kind: StageKind::Predict,
    required_of_key: |stage| predictions_required(format_of_key(stage, "format")),
    dot_shape: "note",
    mermaid_shape: ("[/", "/]"),
};

impl StageMember for PredictSpec {
    fn own_input(&self) -> Option<OwnInput<'_>> {
        Some(OwnInput {
            role: "the source",
            path: &self.source,
            may_be_url: false,
        })
    }

    fn delivery(&self) -> Delivery<'_> {
        Delivery::Predictions {
            output: self.output.as_ref(),
            format: self.format,
        }
    }

    fn key_inputs(&self, manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>) {
        files.insert(SOURCE_ROLE.into(), manifest.resolve(&self.source.value));
        for input in &self.inputs {
            files.insert(
                source_input_role(&input.name.value),
                manifest.resolve(&input.source.value),
            );
        }
        tokenizer(manifest, files);
    }

    fn key_spec(&self, manifest: &Manifest, parts: KeyParts) -> Value {
        let loss = crate::fingerprint::to_value(&manifest.loss);
        json!({ "stage": parts.stage, "data": parts.data, "loss": loss })
    }

    fn required_outputs(&self) -> &'static [&'static str] {
        predictions_required(Some(self.format))
    }

    fn main_output(&self) -> Option<&'static str> {
        Some(predictions_output(self.format))
    }

    fn reported_metrics(&self, _: &Manifest, _: bool) -> Vec<String> {
        Vec::new()
    }
}
