//! `loss "nll"` (`manifests::losses::NLL`).

use super::{LossFunction, Settings};
use manifests::losses::{LossDescription, NLL};
use tch::{Reduction, TchError, Tensor};

pub struct Nll;

impl LossFunction for Nll {
    fn describe(&self) -> &'static LossDescription {
        &NLL
    }

    fn forward(
        &self,
        output: &Tensor,
        target: &Tensor,
        with: &Settings,
    ) -> Result<Tensor, TchError> {
        output.f_nll_loss(target, with.class_weights, Reduction::Mean, -100)
    }

    /// The outputs are log-probabilities.
    fn scores(&self, output: &Tensor) -> Result<Tensor, TchError> {
        output.f_exp()
    }
}
