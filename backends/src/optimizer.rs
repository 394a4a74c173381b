//! Optimizers with their state in tensors owned here, so that a snapshot can save and
//! restore it: Adam and AdamW as one fused libtorch kernel per step over all parameters,
//! SGD and RMSprop computed as libtorch's C++ optimizers do, in one call into the C++ shim
//! (`shim/optim.cpp`) per step.
//!
//! The fused update replaces the 7 or so kernels per parameter tensor that libtorch's C++
//! Adam issues per step, which dominate small models (see docs/benchmarks.md).

use crate::error::torch_error;
use manifests::{Diagnostic, OptimizerKind, OptimizerSpec};
use std::ffi::{c_char, c_void, CStr};
use tch::nn;
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
        pub fn pipeline_sgd(
            params: *mut *mut c_void,
            grads: *mut *mut c_void,
            bufs: *mut *mut c_void,
            n: usize,
            lr: f64,
            momentum: f64,
            weight_decay: f64,
            nesterov: i32,
        ) -> *const c_char;
        pub fn pipeline_rmsprop(
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
        pub fn pipeline_clear_grads(params: *mut *mut c_void, n: usize) -> *const c_char;
    }
}

/// Turns the shim's result (null, or an error message) into a `Result`.
pub(crate) fn check(result: *const c_char) -> Result<(), TchError> {
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

/// The raw `at::Tensor*` of each tensor, for the shim.
fn raw(tensors: &mut [Tensor]) -> Vec<*mut c_void> {
    tensors
        .iter_mut()
        .map(|t| t.as_mut_ptr() as *mut c_void)
        .collect()
}

/// The names of the per-parameter state tensors of each kind of optimizer.
fn slot_names(spec: &OptimizerSpec) -> Vec<&'static str> {
    match spec.kind {
        OptimizerKind::Adam | OptimizerKind::AdamW => vec!["exp_avg", "exp_avg_sq"],
        OptimizerKind::Sgd if spec.momentum != 0.0 => vec!["momentum_buffer"],
        OptimizerKind::Sgd => vec![],
        OptimizerKind::RmsProp => {
            let mut names = vec!["square_avg"];
            if spec.centered {
                names.push("grad_avg");
            }
            if spec.momentum > 0.0 {
                names.push("momentum_buffer");
            }
            names
        }
    }
}

/// The parameters an optimizer updates: the trainable variables of `vs` but those
/// frozen (`train.freeze` turns their `requires_grad` off), in the order they were
/// created, which is the same in every process.
pub fn trainable(vs: &nn::VarStore) -> Vec<Tensor> {
    vs.trainable_variables()
        .into_iter()
        .filter(Tensor::requires_grad)
        .collect()
}

/// The optimizer of a training stage.
pub struct Optimizer {
    spec: OptimizerSpec,
    lr: f64,
    /// Every parameter not frozen (their gradients are cleared and averaged).
    all: Vec<Tensor>,
    /// The parameters this optimizer updates and keeps state for: all of them, or this
    /// process's shard under `zero1`.
    params: Vec<Tensor>,
    /// Per-parameter state by name (`exp_avg`, `momentum_buffer`, …): one tensor per
    /// parameter, zeros before the first step.
    slots: Vec<(&'static str, Vec<Tensor>)>,
    /// Steps taken, as a float scalar tensor (the form the fused Adam kernels take).
    step: Tensor,
}

impl Optimizer {
    pub fn new(spec: &OptimizerSpec, vs: &nn::VarStore) -> Result<Optimizer, Diagnostic> {
        Optimizer::sharded(spec, vs, |_| true)
    }

    /// An optimizer that updates, and keeps state for, only the parameters whose index
    /// (in the order of [`trainable`]) `owns` accepts.
    pub fn sharded(
        spec: &OptimizerSpec,
        vs: &nn::VarStore,
        owns: impl Fn(usize) -> bool,
    ) -> Result<Optimizer, Diagnostic> {
        let all = trainable(vs);
        let params: Vec<Tensor> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| owns(*i))
            .map(|(_, t)| t.shallow_clone())
            .collect();
        let zeros = |p: &Tensor| {
            tch::no_grad(|| p.f_zeros_like()).map_err(|e| {
                torch_error(
                    "pipeline::train::optimizer",
                    "cannot build the optimizer",
                    &e,
                )
            })
        };
        let mut slots = Vec::new();
        for name in slot_names(spec) {
            slots.push((name, params.iter().map(zeros).collect::<Result<_, _>>()?));
        }
        Ok(Optimizer {
            spec: spec.clone(),
            lr: spec.lr,
            step: Tensor::zeros([], (Kind::Float, vs.device())),
            slots,
            params,
            all,
        })
    }

    pub fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// Drops every gradient (PyTorch's `zero_grad(set_to_none=True)`).
    pub fn zero_grad(&mut self) -> Result<(), TchError> {
        let mut ptrs = raw(&mut self.all);
        // SAFETY: the pointers are the live parameters owned by self.
        check(unsafe { ffi::pipeline_clear_grads(ptrs.as_mut_ptr(), ptrs.len()) })
    }

    /// The gradients there are (shallow copies: changing them changes the gradients).
    pub fn grads(&self) -> Vec<Tensor> {
        self.all
            .iter()
            .map(Tensor::grad)
            .filter(Tensor::defined)
            .collect()
    }

    /// One update of every parameter that has a gradient (the others are left alone, as
    /// in PyTorch).
    pub fn step(&mut self) -> Result<(), TchError> {
        let (with_grad, mut grads): (Vec<usize>, Vec<Tensor>) = self
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
        let mut params = pick(&self.params);
        let mut state: Vec<Vec<Tensor>> = self.slots.iter().map(|(_, ts)| pick(ts)).collect();
        let _ = self.step.f_add_scalar_(1.0)?;
        let (mut p, mut g) = (raw(&mut params), raw(&mut grads));
        let mut s: Vec<Vec<*mut c_void>> = state.iter_mut().map(|ts| raw(ts)).collect();
        let slot = |s: &mut Vec<Vec<*mut c_void>>, name: &str| -> *mut *mut c_void {
            match self.slots.iter().position(|(n, _)| *n == name) {
                Some(i) => s[i].as_mut_ptr(),
                None => std::ptr::null_mut(),
            }
        };
        let (exp_avg, exp_avg_sq, square_avg, grad_avg, buf) = (
            slot(&mut s, "exp_avg"),
            slot(&mut s, "exp_avg_sq"),
            slot(&mut s, "square_avg"),
            slot(&mut s, "grad_avg"),
            slot(&mut s, "momentum_buffer"),
        );
        let (n, lr, o) = (p.len(), self.lr, &self.spec);
        // SAFETY: every pointer is a live tensor held in the vectors above for the call;
        // the shim reads a slot's pointers only when the settings use that slot, and then
        // it is present (see `slot_names`).
        check(unsafe {
            match o.kind {
                OptimizerKind::Adam | OptimizerKind::AdamW => ffi::pipeline_fused_adam(
                    p.as_mut_ptr(),
                    g.as_mut_ptr(),
                    exp_avg,
                    exp_avg_sq,
                    self.step.as_mut_ptr() as *mut c_void,
                    n,
                    lr,
                    o.beta1,
                    o.beta2,
                    o.weight_decay,
                    o.eps,
                    i32::from(o.kind == OptimizerKind::AdamW),
                ),
                OptimizerKind::Sgd => ffi::pipeline_sgd(
                    p.as_mut_ptr(),
                    g.as_mut_ptr(),
                    buf,
                    n,
                    lr,
                    o.momentum,
                    o.weight_decay,
                    i32::from(o.nesterov),
                ),
                OptimizerKind::RmsProp => ffi::pipeline_rmsprop(
                    p.as_mut_ptr(),
                    g.as_mut_ptr(),
                    square_avg,
                    grad_avg,
                    buf,
                    n,
                    lr,
                    o.alpha,
                    o.eps,
                    o.weight_decay,
                    o.momentum,
                    i32::from(o.centered),
                ),
            }
        })
    }

    /// The whole state by name (`step`, `exp_avg.0`, …), for a snapshot.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut named = vec![("step".to_string(), self.step.shallow_clone())];
        for (name, tensors) in &self.slots {
            for (i, t) in tensors.iter().enumerate() {
                named.push((format!("{name}.{i}"), t.shallow_clone()));
            }
        }
        named
    }

    /// Restores a state from [`Optimizer::state`] of an optimizer with the same settings.
    pub fn load_state(&mut self, get: impl Fn(&str) -> Option<Tensor>) -> Result<(), TchError> {
        // `state()` hands out handles that share storage: copying into them restores it.
        tch::no_grad(|| {
            for (name, mut target) in self.state() {
                let saved = get(&name).ok_or_else(|| {
                    TchError::Torch(format!("optimizer state `{name}` is missing"))
                })?;
                target.f_copy_(&saved)?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::OptimizerConfig;
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
    fn every_optimizer_matches_libtorchs() {
        let sgd = |momentum, nesterov| OptimizerSpec {
            momentum,
            nesterov,
            ..spec(OptimizerKind::Sgd, 0.1)
        };
        let rmsprop = |momentum, centered| OptimizerSpec {
            momentum,
            centered,
            ..spec(OptimizerKind::RmsProp, 0.1)
        };
        let cases = [
            spec(OptimizerKind::Adam, 0.1),
            spec(OptimizerKind::AdamW, 0.1),
            sgd(0.0, false),
            sgd(0.9, false),
            sgd(0.9, true),
            rmsprop(0.0, false),
            rmsprop(0.5, true),
        ];
        for case in cases {
            let mut ours: Option<Optimizer> = None;
            let fused = train(|vs, loss| {
                let opt = ours.get_or_insert_with(|| Optimizer::new(&case, vs).unwrap());
                opt.zero_grad().unwrap();
                loss.backward();
                opt.step().unwrap();
            });
            let mut theirs: Option<nn::Optimizer> = None;
            let reference = train(|vs, loss| {
                let (wd, lr) = (case.weight_decay, case.lr);
                let opt = theirs.get_or_insert_with(|| match case.kind {
                    OptimizerKind::Adam => nn::Adam {
                        wd,
                        ..Default::default()
                    }
                    .build(vs, lr)
                    .unwrap(),
                    OptimizerKind::AdamW => nn::AdamW {
                        wd,
                        ..Default::default()
                    }
                    .build(vs, lr)
                    .unwrap(),
                    OptimizerKind::Sgd => nn::Sgd {
                        momentum: case.momentum,
                        dampening: 0.0,
                        wd,
                        nesterov: case.nesterov,
                    }
                    .build(vs, lr)
                    .unwrap(),
                    OptimizerKind::RmsProp => nn::RmsProp {
                        alpha: case.alpha,
                        eps: case.eps,
                        wd,
                        momentum: case.momentum,
                        centered: case.centered,
                    }
                    .build(vs, lr)
                    .unwrap(),
                });
                opt.zero_grad();
                loss.backward();
                opt.step();
            });
            assert!(
                fused.allclose(&reference, 1e-5, 1e-6, false),
                "{case:?}: {fused} vs {reference}"
            );
            assert!(
                !fused.allclose(&train(|_, _| {}), 1e-5, 1e-6, false),
                "the weights moved"
            );
        }
    }
}
