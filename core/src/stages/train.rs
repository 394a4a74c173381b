//! `train`: trains the model from the data, from its `init` weights or the last weights
//! of the `train` stage it needs; stores the weights (and those kept as best).

use super::{
    data_files, loss_script, tokenizer, Delivery, KeyParts, Kind, OwnInput, StageMember,
    MODEL_OUTPUT,
};
use manifests::{Manifest, StageKind, TrainSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) const KIND: Kind = Kind {
    kind: StageKind::Train,
    required_of_key: |_| &[MODEL_OUTPUT],
    dot_shape: "box",
    mermaid_shape: ("[", "]"),
};

impl StageMember for TrainSpec {
    fn own_input(&self) -> Option<OwnInput<'_>> {
        self.init.as_ref().map(|path| OwnInput {
            role: "the starting weights",
            path,
            may_be_url: true,
        })
    }

    fn delivery(&self) -> Delivery<'_> {
        Delivery::Nothing
    }

    fn key_inputs(&self, manifest: &Manifest, files: &mut BTreeMap<String, PathBuf>) {
        data_files(manifest, files);
        tokenizer(manifest, files);
        if let Some(init) = &self.init {
            files.insert("init".into(), manifest.resolve(&init.value));
        }
        if let Some(script) = &manifest.model.torchscript {
            files.insert("model".into(), script.file.clone());
        }
        loss_script(manifest, files);
        // Its rates come from a scripted schedule.
        if let Some(script) = &manifest.schedule.script {
            files.insert("schedule".into(), script.file.clone());
        }
    }

    fn key_spec(&self, manifest: &Manifest, parts: KeyParts) -> Value {
        use crate::fingerprint::to_value as value;
        json!({
            "stage": parts.stage,
            "data": parts.data,
            "model": value(&manifest.model),
            "loss": value(&manifest.loss),
            "optimizer": value(&manifest.optimizer),
            "schedule": value(&manifest.schedule),
            "accelerator": parts.accelerator,
        })
    }

    fn required_outputs(&self) -> &'static [&'static str] {
        &[MODEL_OUTPUT]
    }

    fn main_output(&self) -> Option<&'static str> {
        Some(MODEL_OUTPUT)
    }

    fn reported_metrics(&self, manifest: &Manifest, classification: bool) -> Vec<String> {
        let mut names = vec!["loss", "epochs", "steps"];
        if classification {
            names.push("accuracy");
        }
        if manifest.data.split.validates() {
            names.push("val_loss");
            if classification {
                names.push("val_accuracy");
            }
        }
        names.into_iter().map(String::from).collect()
    }
}
