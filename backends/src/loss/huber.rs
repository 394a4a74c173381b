//! `loss "huber"` (`manifests::losses::HUBER`).

use super::{LossFunction, Settings};
use manifests::losses::{LossDescription, HUBER};
use tch::{Reduction, TchError, Tensor};

pub struct Huber;

impl LossFunction for Huber {
    fn describe(&self) -> &'static LossDescription {
        &HUBER
    }

    fn forward(
        &self,
        output: &Tensor,
        target: &Tensor,
        with: &Settings,
    ) -> Result<Tensor, TchError> {
        // Lowered with its default when not written.
        let delta = with.spec.delta.unwrap_or(1.0);
        output.f_huber_loss(target, Reduction::Mean, delta)
    }
}
