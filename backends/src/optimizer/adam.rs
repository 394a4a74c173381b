//! `optimizer "adam"`: one fused libtorch kernel per step over every parameter of a
//! group (`_fused_adam_`), which replaces the 7 or so kernels per parameter tensor that
//! libtorch's C++ Adam issues per step, and dominate small models (docs/benchmarks.md).

use super::{OptimizerAlgorithm, Update};
use manifests::optimizers::{OptimizerDescription, ADAM};
use manifests::OptimizerSpec;
use std::ffi::{c_char, c_void};
use tch::TchError;

extern "C" {
    fn pipeline_fused_adam(
        params: *mut *mut c_void,
        grads: *mut *mut c_void,
        exp_avgs: *mut *mut c_void,
        exp_avg_sqs: *mut *mut c_void,
        step: *mut c_void,
        n: usize,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        decoupled: i32,
    ) -> *const c_char;
}

pub(super) struct Adam;

impl OptimizerAlgorithm for Adam {
    fn describe(&self) -> &'static OptimizerDescription {
        &ADAM
    }

    fn slots(&self, _: &OptimizerSpec) -> Vec<&'static str> {
        vec!["exp_avg", "exp_avg_sq"]
    }

    fn update(&self, u: &mut Update) -> Result<(), TchError> {
        fused(u, false)
    }
}

/// Adam's update, the weight decay L2 or decoupled (`adamw`).
pub(super) fn fused(u: &mut Update, decoupled: bool) -> Result<(), TchError> {
    let (lr, o) = (u.lr, u.settings);
    let (mut p, mut g) = u.raw_params();
    let (mut m, mut v) = (u.raw_state("exp_avg"), u.raw_state("exp_avg_sq"));
    // SAFETY: every pointer is a live tensor of `u` for the call; both slots are there.
    crate::shim::check(unsafe {
        pipeline_fused_adam(
            p.as_mut_ptr(),
            g.as_mut_ptr(),
            m.as_mut_ptr(),
            v.as_mut_ptr(),
            u.step.as_mut_ptr() as *mut c_void,
            p.len(),
            lr,
            o.beta1,
            o.beta2,
            o.weight_decay,
            o.eps,
            i32::from(decoupled),
        )
    })
}
