//! `loss "mse"` (`manifests::losses::MSE`).

use super::{LossFunction, Settings};
use manifests::losses::{LossDescription, MSE};
use tch::{Reduction, TchError, Tensor};

pub struct Mse;

impl LossFunction for Mse {
    fn describe(&self) -> &'static LossDescription {
        &MSE
    }

    fn forward(&self, output: &Tensor, target: &Tensor, _: &Settings) -> Result<Tensor, TchError> {
        output.f_mse_loss(target, Reduction::Mean)
    }
}
