//! `loss "huber"`: PyTorch's `HuberLoss`.

use super::{LossDescription, Target};
use crate::schema::{self, Key, Val, POSITIVE};

pub static HUBER: LossDescription = LossDescription {
    name: "huber",
    doc: "values against targets: quadratic below `delta`, linear above (`HuberLoss`)",
    target: Target::Values,
    keys: &[&DELTA],
};

static DELTA: Key = schema::key(
    "delta",
    POSITIVE,
    Some(Val::Float(1.0)),
    "Where the Huber loss turns from quadratic to linear.",
);
