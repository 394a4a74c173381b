//! `optimizer "adamw"`: Adam's fused kernel with decoupled weight decay.

use super::{adam, OptimizerAlgorithm, Update};
use manifests::optimizers::{OptimizerDescription, ADAMW};
use manifests::OptimizerSpec;
use tch::TchError;

pub(super) struct AdamW;

impl OptimizerAlgorithm for AdamW {
    fn describe(&self) -> &'static OptimizerDescription {
        &ADAMW
    }

    fn slots(&self, _: &OptimizerSpec) -> Vec<&'static str> {
        vec!["exp_avg", "exp_avg_sq"]
    }

    fn update(&self, u: &mut Update) -> Result<(), TchError> {
        adam::fused(u, true)
    }
}
