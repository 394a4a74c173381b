//! `loss "cross-entropy"`: PyTorch's `CrossEntropyLoss`.

use super::{LossDescription, Target, CLASS_WEIGHTS};
use crate::schema::{self, Key, Val, PROBABILITY_BELOW_ONE};

pub static CROSS_ENTROPY: LossDescription = LossDescription {
    name: "cross-entropy",
    doc: "class indices against a score (logit) per class: softmax, then the negative log-likelihood (`CrossEntropyLoss`)",
    target: Target::Classes,
    keys: &[&LABEL_SMOOTHING, &CLASS_WEIGHTS],
};

static LABEL_SMOOTHING: Key = schema::key(
    "label-smoothing",
    PROBABILITY_BELOW_ONE,
    Some(Val::Float(0.0)),
    "Label smoothing for cross-entropy.",
);
