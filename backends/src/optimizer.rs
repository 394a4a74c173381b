//! Building libtorch's optimizers from the manifest.

use manifests::{OptimizerKind, OptimizerSpec};
use tch::nn::{self, OptimizerConfig};
use tch::TchError;

pub fn build(spec: &OptimizerSpec, vs: &nn::VarStore) -> Result<nn::Optimizer, TchError> {
    match spec.kind {
        OptimizerKind::Sgd => nn::Sgd {
            momentum: spec.momentum,
            dampening: 0.0,
            wd: spec.weight_decay,
            nesterov: spec.nesterov,
        }
        .build(vs, spec.lr),
        OptimizerKind::Adam => nn::Adam {
            beta1: spec.beta1,
            beta2: spec.beta2,
            wd: spec.weight_decay,
            eps: spec.eps,
            amsgrad: false,
        }
        .build(vs, spec.lr),
        OptimizerKind::AdamW => nn::AdamW {
            beta1: spec.beta1,
            beta2: spec.beta2,
            wd: spec.weight_decay,
            eps: spec.eps,
            amsgrad: false,
        }
        .build(vs, spec.lr),
        OptimizerKind::RmsProp => nn::RmsProp {
            alpha: spec.alpha,
            eps: spec.eps,
            wd: spec.weight_decay,
            momentum: spec.momentum,
            centered: spec.centered,
        }
        .build(vs, spec.lr),
    }
}
