//! `loss "bce-with-logits"`: PyTorch's `BCEWithLogitsLoss`.

use super::{LossDescription, Target};
use crate::schema::{self, Bound, Key, Ty};

pub static BCE_WITH_LOGITS: LossDescription = LossDescription {
    name: "bce-with-logits",
    doc: "0/1 labels (one or several per sample) against a logit each: sigmoid, then binary cross-entropy (`BCEWithLogitsLoss`)",
    target: Target::Labels,
    keys: &[&POS_WEIGHT],
};

static POS_WEIGHT: Key = schema::key(
    "pos-weight",
    Ty::Floats {
        min: Bound::Exclusive(0.0),
        max: Bound::None,
    },
    None,
    "The weight of positive targets (PyTorch's `pos_weight`): one number for every output, or one per output.",
);
