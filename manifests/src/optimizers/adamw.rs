//! `optimizer "adamw"`: PyTorch's `AdamW` (decoupled weight decay).

use super::{OptimizerDescription, BETA1, BETA2, EPS};

pub static ADAMW: OptimizerDescription = OptimizerDescription {
    name: "adamw",
    doc: "Adam with decoupled weight decay: the weights shrink by `lr × weight-decay` each step, apart from the gradient (`AdamW`)",
    keys: &[&BETA1, &BETA2, &EPS],
};
