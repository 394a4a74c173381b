//! `loss "l1"` (`manifests::losses::L1`).

use super::{LossFunction, Settings};
use manifests::losses::{LossDescription, L1 as DESCRIPTION};
use tch::{Reduction, TchError, Tensor};

pub struct L1;

impl LossFunction for L1 {
    fn describe(&self) -> &'static LossDescription {
        &DESCRIPTION
    }

    fn forward(&self, output: &Tensor, target: &Tensor, _: &Settings) -> Result<Tensor, TchError> {
        output.f_l1_loss(target, Reduction::Mean)
    }
}
