//! Optimizers: Adam and AdamW as one fused libtorch kernel per step over all parameters
//! (through the C++ shim), SGD and RMSprop through libtorch's C++ optimizers.
//!
//! The fused update replaces the 7 or so kernels per parameter tensor that libtorch's C++
//! Adam issues per step, which dominate small models (see docs/benchmarks.md); its
//! moments and step count are plain tensors owned here.

use crate::error::torch_error;
use manifests::{Diagnostic, OptimizerKind, OptimizerSpec};
use std::ffi::{c_char, CStr};
use tch::nn::{self, OptimizerConfig};
use tch::{Kind, TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_fused_adam(
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
        pub fn pipeline_clear_grads(params: *mut *mut c_void, n: usize) -> *const c_char;
    }
}

fn check(result: *const c_char) -> Result<(), TchError> {
    if result.is_null() {
        Ok(())
    } else {
        // SAFETY: the shim returns a NUL-terminated string that lives until its next call.
        Err(TchError::Torch(
            unsafe { CStr::from_ptr(result) }
                .to_string_lossy()
                .into_owned(),
        ))
    }
}

fn raw(tensors: &mut [Tensor]) -> Vec<*mut std::ffi::c_void> {
    tensors
        .iter_mut()
        .map(|t| t.as_mut_ptr() as *mut std::ffi::c_void)
        .collect()
}

/// Adam / AdamW with their state in tensors, updated by one fused kernel.
pub struct FusedAdam {
    params: Vec<Tensor>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
    step: Tensor,
    lr: f64,
    spec: OptimizerSpec,
}

impl FusedAdam {
    fn new(spec: &OptimizerSpec, vs: &nn::VarStore) -> FusedAdam {
        let params = vs.trainable_variables();
        let zeros = |p: &Tensor| p.zeros_like();
        FusedAdam {
            exp_avg: params.iter().map(zeros).collect(),
            exp_avg_sq: params.iter().map(zeros).collect(),
            step: Tensor::zeros([], (Kind::Float, vs.device())),
            lr: spec.lr,
            spec: spec.clone(),
            params,
        }
    }

    fn step(&mut self) -> Result<(), TchError> {
        // Parameters without a gradient (unused by the loss) are left alone, as in PyTorch.
        let (with_grad, mut g): (Vec<usize>, Vec<Tensor>) = self
            .params
            .iter()
            .map(Tensor::grad)
            .enumerate()
            .filter(|(_, grad)| grad.defined())
            .unzip();
        if with_grad.is_empty() {
            return Ok(());
        }
        let pick = |ts: &[Tensor]| -> Vec<Tensor> {
            with_grad.iter().map(|&i| ts[i].shallow_clone()).collect()
        };
        let (mut p, mut m, mut v) = (
            pick(&self.params),
            pick(&self.exp_avg),
            pick(&self.exp_avg_sq),
        );
        let _ = self.step.f_add_scalar_(1.0)?;
        let (mut pp, mut gp, mut mp, mut vp) = (raw(&mut p), raw(&mut g), raw(&mut m), raw(&mut v));
        let s = &self.spec;
        // SAFETY: every pointer is a live tensor held in the vectors above for the call.
        check(unsafe {
            ffi::pipeline_fused_adam(
                pp.as_mut_ptr(),
                gp.as_mut_ptr(),
                mp.as_mut_ptr(),
                vp.as_mut_ptr(),
                self.step.as_mut_ptr() as *mut std::ffi::c_void,
                pp.len(),
                self.lr,
                s.beta1,
                s.beta2,
                s.weight_decay,
                s.eps,
                i32::from(s.kind == OptimizerKind::AdamW),
            )
        })
    }

    fn zero_grad(&mut self) -> Result<(), TchError> {
        let mut ptrs = raw(&mut self.params);
        // SAFETY: the pointers are the live parameters owned by self.
        check(unsafe { ffi::pipeline_clear_grads(ptrs.as_mut_ptr(), ptrs.len()) })
    }
}

/// The optimizer of a training stage.
pub enum Optimizer {
    Fused(FusedAdam),
    Libtorch(nn::Optimizer),
}

impl Optimizer {
    pub fn new(spec: &OptimizerSpec, vs: &nn::VarStore) -> Result<Optimizer, Diagnostic> {
        let libtorch = |built: Result<nn::Optimizer, TchError>| {
            built.map(Optimizer::Libtorch).map_err(|e| {
                torch_error(
                    "pipeline::train::optimizer",
                    "cannot build the optimizer",
                    &e,
                )
            })
        };
        match spec.kind {
            OptimizerKind::Adam | OptimizerKind::AdamW => {
                Ok(Optimizer::Fused(FusedAdam::new(spec, vs)))
            }
            OptimizerKind::Sgd => libtorch(
                nn::Sgd {
                    momentum: spec.momentum,
                    dampening: 0.0,
                    wd: spec.weight_decay,
                    nesterov: spec.nesterov,
                }
                .build(vs, spec.lr),
            ),
            OptimizerKind::RmsProp => libtorch(
                nn::RmsProp {
                    alpha: spec.alpha,
                    eps: spec.eps,
                    wd: spec.weight_decay,
                    momentum: spec.momentum,
                    centered: spec.centered,
                }
                .build(vs, spec.lr),
            ),
        }
    }

    pub fn set_lr(&mut self, lr: f64) {
        match self {
            Optimizer::Fused(o) => o.lr = lr,
            Optimizer::Libtorch(o) => o.set_lr(lr),
        }
    }

    pub fn zero_grad(&mut self) -> Result<(), TchError> {
        match self {
            Optimizer::Fused(o) => o.zero_grad(),
            Optimizer::Libtorch(o) => {
                o.zero_grad();
                Ok(())
            }
        }
    }

    pub fn step(&mut self) -> Result<(), TchError> {
        match self {
            Optimizer::Fused(o) => o.step(),
            Optimizer::Libtorch(o) => {
                o.step();
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Reduction};

    fn spec(kind: OptimizerKind, weight_decay: f64) -> OptimizerSpec {
        OptimizerSpec {
            kind,
            lr: 0.01,
            weight_decay,
            momentum: 0.0,
            nesterov: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            alpha: 0.99,
            centered: false,
        }
    }

    /// Five steps of a small regression, returning the final weights.
    fn train(mut step: impl FnMut(&nn::VarStore, &Tensor)) -> Tensor {
        tch::manual_seed(1);
        let vs = nn::VarStore::new(Device::Cpu);
        let layer = nn::linear(vs.root() / 0, 4, 3, Default::default());
        let x = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
        let y = Tensor::randn([16, 3], (Kind::Float, Device::Cpu));
        for _ in 0..5 {
            let loss = x
                .linear(&layer.ws, layer.bs.as_ref())
                .mse_loss(&y, Reduction::Mean);
            step(&vs, &loss);
        }
        layer.ws.detach()
    }

    #[test]
    fn fused_adam_and_adamw_match_libtorch() {
        for kind in [OptimizerKind::Adam, OptimizerKind::AdamW] {
            let mut ours: Option<Optimizer> = None;
            let fused = train(|vs, loss| {
                let opt = ours.get_or_insert_with(|| Optimizer::new(&spec(kind, 0.1), vs).unwrap());
                opt.zero_grad().unwrap();
                loss.backward();
                opt.step().unwrap();
            });
            let mut theirs: Option<nn::Optimizer> = None;
            let reference = train(|vs, loss| {
                let opt = theirs.get_or_insert_with(|| match kind {
                    OptimizerKind::Adam => nn::Adam {
                        wd: 0.1,
                        ..Default::default()
                    }
                    .build(vs, 0.01)
                    .unwrap(),
                    _ => nn::AdamW {
                        wd: 0.1,
                        ..Default::default()
                    }
                    .build(vs, 0.01)
                    .unwrap(),
                });
                opt.zero_grad();
                loss.backward();
                opt.step();
            });
            assert!(
                fused.allclose(&reference, 1e-5, 1e-6, false),
                "{kind:?}: {fused} vs {reference}"
            );
            assert!(
                !fused.allclose(&train(|_, _| {}), 1e-5, 1e-6, false),
                "the weights moved"
            );
        }
    }
}
