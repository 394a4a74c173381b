//! `optimizer "lion"`: Lion (Chen et al., 2023, "Symbolic Discovery of Optimization
//! Algorithms"), as lucidrains' `lion-pytorch` computes it: each weight moves by the
//! learning rate times the *sign* of an interpolation of its momentum and its gradient,
//! after a decoupled weight decay; the momentum then follows the gradient at `beta2`.
//! One state tensor per weight (Adam keeps two). The paper's setting is `beta1=0.9
//! beta2=0.99` with a learning rate 3–10× smaller than AdamW's: `beta2`'s default here is
//! the key's, shared with Adam (0.999).

use backends::optimizer::{OptimizerAlgorithm, Update};
use manifests::optimizers::{OptimizerDescription, BETA1, BETA2};
use manifests::OptimizerSpec;
use tch::TchError;

pub struct Lion;

static LION: OptimizerDescription = OptimizerDescription {
    name: "lion",
    doc: "Lion (Chen et al., 2023): each weight moves by `lr` × the sign of its momentum blended with its gradient, weight decay decoupled; one state tensor per weight",
    // Adam's `beta1` and `beta2` keys themselves: the same meaning, and a group may set them.
    keys: &[&BETA1, &BETA2],
};

impl OptimizerAlgorithm for Lion {
    fn describe(&self) -> &'static OptimizerDescription {
        &LION
    }

    fn slots(&self, _: &OptimizerSpec) -> Vec<&'static str> {
        vec!["exp_avg"]
    }

    fn update(&self, u: &mut Update) -> Result<(), TchError> {
        let (lr, o) = (u.lr, u.settings);
        let (b1, b2) = (o.beta1, o.beta2);
        let decay = 1.0 - lr * o.weight_decay;
        let Some((_, exp_avg)) = u.state.iter_mut().find(|(n, _)| *n == "exp_avg") else {
            return Err(TchError::Torch("lion keeps `exp_avg`".into()));
        };
        tch::no_grad(|| {
            for ((p, g), m) in u.params.iter_mut().zip(&u.grads).zip(exp_avg.iter_mut()) {
                let _ = p.f_mul_scalar_(decay)?;
                let direction = m
                    .f_mul_scalar(b1)?
                    .f_add_(&g.f_mul_scalar(1.0 - b1)?)?
                    .f_sign()?;
                let _ = p.f_sub_(&direction.f_mul_scalar(lr)?)?;
                let _ = m.f_mul_scalar_(b2)?.f_add_(&g.f_mul_scalar(1.0 - b2)?)?;
            }
            Ok(())
        })
    }
}
