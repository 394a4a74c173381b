//! Loss functions and the accuracy metric.

use manifests::{LossKind, LossSpec};
use tch::{Kind, Reduction, TchError, Tensor};

/// The mean loss of a batch.
pub fn compute(spec: &LossSpec, output: &Tensor, target: &Tensor) -> Result<Tensor, TchError> {
    match spec.kind {
        LossKind::CrossEntropy => output.f_cross_entropy_loss(
            target,
            None::<Tensor>,
            Reduction::Mean,
            -100,
            spec.label_smoothing,
        ),
        LossKind::Nll => output.f_nll_loss(target, None::<Tensor>, Reduction::Mean, -100),
        LossKind::Mse => output.f_mse_loss(target, Reduction::Mean),
        LossKind::BceWithLogits => output.f_binary_cross_entropy_with_logits(
            target,
            None::<Tensor>,
            None::<Tensor>,
            Reduction::Mean,
        ),
    }
}

/// The number of correct predictions in a batch (a 0-d tensor, not read back to the
/// host), and how many predictions were made; `None` for regression losses.
pub fn correct(
    kind: LossKind,
    output: &Tensor,
    target: &Tensor,
) -> Result<Option<(Tensor, i64)>, TchError> {
    Ok(match kind {
        LossKind::CrossEntropy | LossKind::Nll => {
            let hits = output
                .f_argmax(-1, false)?
                .f_eq_tensor(target)?
                .f_sum(Kind::Int64)?;
            Some((hits, target.size()[0]))
        }
        LossKind::BceWithLogits => {
            let hits = output
                .f_gt(0.0)?
                .f_eq_tensor(&target.f_gt(0.5)?)?
                .f_sum(Kind::Int64)?;
            Some((hits, target.numel() as i64))
        }
        LossKind::Mse => None,
    })
}
