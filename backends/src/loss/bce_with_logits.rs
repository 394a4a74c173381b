//! `loss "bce-with-logits"` (`manifests::losses::BCE_WITH_LOGITS`).

use super::{LossFunction, Settings};
use manifests::losses::{LossDescription, BCE_WITH_LOGITS};
use tch::{Reduction, TchError, Tensor};

pub struct BceWithLogits;

impl LossFunction for BceWithLogits {
    fn describe(&self) -> &'static LossDescription {
        &BCE_WITH_LOGITS
    }

    fn forward(
        &self,
        output: &Tensor,
        target: &Tensor,
        with: &Settings,
    ) -> Result<Tensor, TchError> {
        output.f_binary_cross_entropy_with_logits(
            target,
            None::<&Tensor>,
            with.pos_weight,
            Reduction::Mean,
        )
    }
}
