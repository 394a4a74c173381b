//! `loss "mse"`: PyTorch's `MSELoss`.

use super::{LossDescription, Target};

pub static MSE: LossDescription = LossDescription {
    name: "mse",
    doc: "values against targets: the mean squared error (`MSELoss`)",
    target: Target::Values,
    keys: &[],
};
