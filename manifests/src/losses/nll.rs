//! `loss "nll"`: PyTorch's `NLLLoss`.

use super::{LossDescription, Target, CLASS_WEIGHTS};

pub static NLL: LossDescription = LossDescription {
    name: "nll",
    doc: "class indices against log-probabilities (the model ends in `log-softmax`): the negative log-likelihood (`NLLLoss`)",
    target: Target::Classes,
    keys: &[&CLASS_WEIGHTS],
};
