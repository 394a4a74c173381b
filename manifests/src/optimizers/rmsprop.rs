//! `optimizer "rmsprop"`: PyTorch's `RMSprop`.

use super::{OptimizerDescription, EPS, MOMENTUM};
use crate::schema::{self, Key, Ty, Val, PROBABILITY_BELOW_ONE};

pub static RMSPROP: OptimizerDescription = OptimizerDescription {
    name: "rmsprop",
    doc: "divides each weight's rate by a running average of its squared gradient; `weight-decay` is L2 (`RMSprop`)",
    keys: &[&ALPHA, &EPS, &MOMENTUM, &CENTERED],
};

static ALPHA: Key = schema::key(
    "alpha",
    PROBABILITY_BELOW_ONE,
    Some(Val::Float(0.99)),
    "Smoothing constant of the squared-gradient average.",
);

static CENTERED: Key = schema::key(
    "centered",
    Ty::Bool,
    Some(Val::Bool(false)),
    "Normalise by the estimated gradient variance.",
);
