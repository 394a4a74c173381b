//! `optimizer "adam"`: PyTorch's `Adam` (L2 weight decay, added to the gradient).

use super::{OptimizerDescription, BETA1, BETA2, EPS};

pub static ADAM: OptimizerDescription = OptimizerDescription {
    name: "adam",
    doc: "Adam: per-weight rates from running averages of the gradient and its square; `weight-decay` is L2, added to the gradient (`Adam`)",
    keys: &[&BETA1, &BETA2, &EPS],
};
