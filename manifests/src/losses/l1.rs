//! `loss "l1"`: PyTorch's `L1Loss`.

use super::{LossDescription, Target};

pub static L1: LossDescription = LossDescription {
    name: "l1",
    doc: "values against targets: the mean absolute error (`L1Loss`)",
    target: Target::Values,
    keys: &[],
};
