//! `optimizer "sgd"`: computed as libtorch's C++ `SGD` (dampening 0), in one call into
//! the shim (`shim/optim.cpp`) per step.

use super::{OptimizerAlgorithm, Update};
use manifests::optimizers::{OptimizerDescription, SGD};
use manifests::OptimizerSpec;
use std::ffi::{c_char, c_void};
use tch::TchError;

extern "C" {
    fn pipeline_sgd(
        params: *mut *mut c_void,
        grads: *mut *mut c_void,
        bufs: *mut *mut c_void,
        n: usize,
        lr: f64,
        momentum: f64,
        weight_decay: f64,
        nesterov: i32,
    ) -> *const c_char;
}

pub(super) struct Sgd;

impl OptimizerAlgorithm for Sgd {
    fn describe(&self) -> &'static OptimizerDescription {
        &SGD
    }

    fn slots(&self, settings: &OptimizerSpec) -> Vec<&'static str> {
        match settings.momentum != 0.0 {
            true => vec!["momentum_buffer"],
            false => vec![],
        }
    }

    fn update(&self, u: &mut Update) -> Result<(), TchError> {
        let (lr, o) = (u.lr, u.settings);
        let (mut p, mut g) = u.raw_params();
        let mut buf = u.raw_state("momentum_buffer");
        // SAFETY: every pointer is a live tensor of `u` for the call; the shim reads the
        // buffers only with momentum, and then they are there (`slots`).
        crate::shim::check(unsafe {
            pipeline_sgd(
                p.as_mut_ptr(),
                g.as_mut_ptr(),
                super::or_null(&mut buf),
                p.len(),
                lr,
                o.momentum,
                o.weight_decay,
                i32::from(o.nesterov),
            )
        })
    }
}
