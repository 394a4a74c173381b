//! `loss "cross-entropy"` (`manifests::losses::CROSS_ENTROPY`).

use super::{LossFunction, Settings};
use manifests::losses::{LossDescription, CROSS_ENTROPY};
use tch::{Reduction, TchError, Tensor};

pub struct CrossEntropy;

impl LossFunction for CrossEntropy {
    fn describe(&self) -> &'static LossDescription {
        &CROSS_ENTROPY
    }

    fn forward(
        &self,
        output: &Tensor,
        target: &Tensor,
        with: &Settings,
    ) -> Result<Tensor, TchError> {
        output.f_cross_entropy_loss(
            target,
            with.class_weights,
            Reduction::Mean,
            -100,
            with.spec.label_smoothing,
        )
    }
}
