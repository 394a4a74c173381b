//! `optimizer "rmsprop"`: computed as libtorch's C++ `RMSprop`, in one call into the
//! shim (`shim/optim.cpp`) per step.

use super::{OptimizerAlgorithm, Update};
use manifests::optimizers::{OptimizerDescription, RMSPROP};
use manifests::OptimizerSpec;
use std::ffi::{c_char, c_void};
use tch::TchError;

extern "C" {
    fn pipeline_rmsprop(
        params: *mut *mut c_void,
        grads: *mut *mut c_void,
        square_avgs: *mut *mut c_void,
        grad_avgs: *mut *mut c_void,
        bufs: *mut *mut c_void,
        n: usize,
        lr: f64,
        alpha: f64,
        eps: f64,
        weight_decay: f64,
        momentum: f64,
        centered: i32,
    ) -> *const c_char;
}

pub(super) struct RmsProp;

impl OptimizerAlgorithm for RmsProp {
    fn describe(&self) -> &'static OptimizerDescription {
        &RMSPROP
    }

    fn slots(&self, settings: &OptimizerSpec) -> Vec<&'static str> {
        let mut names = vec!["square_avg"];
        if settings.centered {
            names.push("grad_avg");
        }
        if settings.momentum > 0.0 {
            names.push("momentum_buffer");
        }
        names
    }

    fn update(&self, u: &mut Update) -> Result<(), TchError> {
        let (lr, o) = (u.lr, u.settings);
        let (mut p, mut g) = u.raw_params();
        let mut square = u.raw_state("square_avg");
        let (mut grad_avg, mut buf) = (u.raw_state("grad_avg"), u.raw_state("momentum_buffer"));
        // SAFETY: every pointer is a live tensor of `u` for the call; the shim reads a
        // slot only when the settings use it, and then it is there (`slots`).
        crate::shim::check(unsafe {
            pipeline_rmsprop(
                p.as_mut_ptr(),
                g.as_mut_ptr(),
                square.as_mut_ptr(),
                super::or_null(&mut grad_avg),
                super::or_null(&mut buf),
                p.len(),
                lr,
                o.alpha,
                o.eps,
                o.weight_decay,
                o.momentum,
                i32::from(o.centered),
            )
        })
    }
}
