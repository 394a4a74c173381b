//! `optimizer "sgd"`: PyTorch's `SGD` (no dampening).

use super::{OptimizerDescription, MOMENTUM};
use crate::schema::{self, Key, Ty, Val};

pub static SGD: OptimizerDescription = OptimizerDescription {
    name: "sgd",
    doc: "stochastic gradient descent, with momentum and Nesterov momentum if asked; `weight-decay` is L2 (`SGD`)",
    keys: &[&MOMENTUM, &NESTEROV],
};

static NESTEROV: Key = schema::key(
    "nesterov",
    Ty::Bool,
    Some(Val::Bool(false)),
    "Nesterov momentum (needs momentum > 0).",
);
