//! `checkpoint`: writes the weights of the `train` stage it needs, and their metadata,
//! to its `path` (a file, or an object in storage) or to the run directory.

use super::{
    Delivery, KeyParts, Kind, OwnInput, StageMember, CHECKPOINT_METADATA, CHECKPOINT_OUTPUT,
};
use manifests::{CheckpointSpec, Manifest, StageKind};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(super) const KIND: Kind = Kind {
    kind: StageKind::Checkpoint,
    required_of_key: |_| &[CHECKPOINT_OUTPUT, CHECKPOINT_METADATA],
    dot_shape: "cylinder",
    mermaid_shape: ("[(", ")]"),
};

impl StageMember for CheckpointSpec {
    fn own_input(&self) -> Option<OwnInput<'_>> {
        None
    }

    fn delivery(&self) -> Delivery<'_> {
        Delivery::Checkpoint {
            path: self.path.as_ref(),
        }
    }

    /// It reads only the weights of the stage it needs, which its key holds as that
    /// stage's fingerprint.
    fn key_inputs(&self, _: &Manifest, _: &mut BTreeMap<String, PathBuf>) {}

    fn key_spec(&self, _: &Manifest, parts: KeyParts) -> Value {
        json!({ "stage": parts.stage })
    }

    fn required_outputs(&self) -> &'static [&'static str] {
        &[CHECKPOINT_OUTPUT, CHECKPOINT_METADATA]
    }

    fn main_output(&self) -> Option<&'static str> {
        Some(CHECKPOINT_OUTPUT)
    }

    fn reported_metrics(&self, _: &Manifest, _: bool) -> Vec<String> {
        Vec::new()
    }
}
