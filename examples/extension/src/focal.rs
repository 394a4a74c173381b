//! `loss "focal" gamma=2`: the focal loss of Lin et al. (2017), FL(p_t) = −(1 − p_t)^γ ·
//! log p_t over the class probabilities (softmax of the outputs): a well-classified
//! sample (p_t near 1) counts little, so training dwells on the hard ones. `gamma 0` is
//! cross-entropy. It takes the built-in `class-weights` too (their α), as
//! `torchvision.ops.sigmoid_focal_loss`'s `alpha` weighs classes, with PyTorch's
//! weighted mean.

use backends::loss::{LossFunction, Settings};
use manifests::losses::{LossDescription, Target, CLASS_WEIGHTS};
use manifests::schema::{self, Key, Val};
use tch::{Kind, TchError, Tensor};

pub struct Focal;

static GAMMA: Key = schema::key(
    "gamma",
    schema::NON_NEGATIVE,
    Some(Val::Float(2.0)),
    "The focusing exponent γ: how much a well-classified sample is discounted (0: cross-entropy).",
);

static FOCAL: LossDescription = LossDescription {
    name: "focal",
    doc: "class indices against a score per class: cross-entropy with each sample's term scaled by (1 − p_t)^γ (Lin et al., 2017)",
    // What `check` asks: labels are class indices, accuracy and the class metrics apply.
    target: Target::Classes,
    keys: &[&GAMMA, &CLASS_WEIGHTS],
};

impl LossFunction for Focal {
    fn describe(&self) -> &'static LossDescription {
        &FOCAL
    }

    fn forward(
        &self,
        output: &Tensor,
        target: &Tensor,
        with: &Settings,
    ) -> Result<Tensor, TchError> {
        // Lowered with its default when not written.
        let gamma = with.spec.setting("gamma").unwrap_or(2.0);
        let log_p = output
            .f_log_softmax(-1, Kind::Float)?
            .f_gather(1, &target.f_unsqueeze(1)?, false)?
            .f_squeeze_dim(1)?;
        let focus = log_p
            .f_exp()?
            .f_neg()?
            .f_add_scalar(1.0)?
            .f_pow_tensor_scalar(gamma)?;
        let terms = focus.f_mul(&log_p)?.f_neg()?;
        match with.class_weights {
            Some(w) => {
                let w = w.f_index_select(0, target)?;
                terms
                    .f_mul(&w)?
                    .f_sum(Kind::Float)?
                    .f_div(&w.f_sum(Kind::Float)?)
            }
            None => terms.f_mean(Kind::Float),
        }
    }
}
