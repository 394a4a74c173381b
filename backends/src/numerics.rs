//! How a run computes, from `accelerator`: the dtype of the weights and inputs, autocast
//! around the forward pass and loss (never the backward pass or the optimizer step), the
//! dynamic loss scaler of `16-mixed`, gradient clipping, and deterministic algorithms.
//! What tch lacks comes from the shim (`shim/amp.cpp`).

use crate::accelerator::Precision;
use crate::shim::check;
use manifests::{AcceleratorSpec, Clipping, Diagnostic, Manifest};
use std::ffi::c_void;
use tch::{Device, Kind, TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_autocast_enter(cuda: i32, half: i32) -> *const c_char;
        pub fn pipeline_autocast_exit(cuda: i32) -> *const c_char;
        pub fn pipeline_set_deterministic(on: i32) -> *const c_char;
        pub fn pipeline_amp_unscale(
            grads: *mut *mut c_void,
            n: usize,
            found_inf: *mut c_void,
            inv_scale: *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_amp_update(
            scale: *mut c_void,
            growth_tracker: *mut c_void,
            found_inf: *mut c_void,
            growth: f64,
            backoff: f64,
            interval: i64,
        ) -> *const c_char;
        pub fn pipeline_grad_norm(
            grads: *mut *mut c_void,
            n: usize,
            norm_type: f64,
            total: *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_clip_grad_norm(
            grads: *mut *mut c_void,
            n: usize,
            max_norm: f64,
            norm_type: f64,
            total: *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_clip_grad_value(
            grads: *mut *mut c_void,
            n: usize,
            value: f64,
        ) -> *const c_char;
    }
}

fn ptr(t: &mut Tensor) -> *mut c_void {
    t.as_mut_ptr() as *mut c_void
}

/// The dtypes and autocast of a run, from its precision.
#[derive(Clone, Copy)]
pub struct Numerics {
    pub precision: &'static dyn Precision,
    /// The dtype of the weights (and of the inputs fed to them).
    pub weights: Kind,
    /// The dtype autocast computes in, for mixed precisions.
    pub autocast: Option<Kind>,
    pub device: Device,
}

impl Numerics {
    pub fn new(spec: &AcceleratorSpec, device: Device) -> Result<Numerics, Diagnostic> {
        let precision = crate::accelerator::precision(spec)?;
        Ok(Numerics {
            precision,
            weights: precision.weights(),
            autocast: precision.autocast(),
            device,
        })
    }

    /// A batch of inputs as the weights take it (inputs are read as fp32): the
    /// precision's [`Precision::input`].
    pub fn input(&self, x: &Tensor) -> Result<Tensor, TchError> {
        self.precision.input(x)
    }

    /// Runs `f` (a forward pass and loss) under autocast when the precision is mixed.
    pub fn autocast<T>(&self, f: impl FnOnce() -> Result<T, TchError>) -> Result<T, TchError> {
        let Some(kind) = self.autocast else {
            return f();
        };
        let cuda = i32::from(self.device.is_cuda());
        // SAFETY: plain calls into the shim; the region is closed below on every path.
        check(unsafe { ffi::pipeline_autocast_enter(cuda, i32::from(kind == Kind::Half)) })?;
        let result = f();
        let closed = check(unsafe { ffi::pipeline_autocast_exit(cuda) });
        let value = result?;
        closed.map(|()| value)
    }
}

/// libtorch's deterministic algorithms, on or off, for the whole process.
pub fn set_deterministic(on: bool) -> Result<(), TchError> {
    // SAFETY: a plain call into the shim.
    check(unsafe { ffi::pipeline_set_deterministic(i32::from(on)) })
}

/// The diagnostic for a libtorch error that says an operation has no deterministic
/// implementation (with `deterministic #true`); `None` for any other error.
pub fn nondeterministic(manifest: &Manifest, e: &TchError) -> Option<Diagnostic> {
    let message = crate::error::short_message(e);
    if !message.contains("does not have a deterministic implementation") {
        return None;
    }
    let rule = pipeline_core::compat::rule("pipeline::accelerator::nondeterministic_op");
    Some(
        Diagnostic::error(rule.code, message)
            .label_opt(
                manifest.accelerator.span("deterministic"),
                "deterministic algorithms only",
            )
            .help(rule.help),
    )
}

/// The dynamic loss scaler of `16-mixed` (PyTorch's GradScaler with its defaults).
pub struct Scaler {
    scale: Tensor,
    growth_tracker: Tensor,
    found_inf: Tensor,
    /// Optimizer steps skipped because a gradient was inf or NaN.
    pub skipped: u64,
}

pub const INITIAL_SCALE: f64 = 65536.0;
pub const GROWTH: f64 = 2.0;
pub const BACKOFF: f64 = 0.5;
pub const GROWTH_INTERVAL: i64 = 2000;

impl Scaler {
    pub fn new(device: Device) -> Result<Scaler, TchError> {
        Ok(Scaler {
            scale: Tensor::f_full([1], INITIAL_SCALE, (Kind::Float, device))?,
            growth_tracker: Tensor::f_zeros([1], (Kind::Int, device))?,
            found_inf: Tensor::f_zeros([1], (Kind::Float, device))?,
            skipped: 0,
        })
    }

    /// The loss times the scale, to backpropagate.
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor, TchError> {
        loss.f_mul(&self.scale)
    }

    /// Unscales the gradients in place; `true` when they are all finite (one read of a
    /// flag from the device, as GradScaler does).
    pub fn unscale(&mut self, grads: &mut [Tensor]) -> Result<bool, TchError> {
        let _ = self.found_inf.f_zero_()?;
        let mut inv = self.scale.f_reciprocal()?;
        let mut g: Vec<*mut c_void> = grads.iter_mut().map(ptr).collect();
        // SAFETY: every pointer is a live tensor for the duration of the call.
        check(unsafe {
            ffi::pipeline_amp_unscale(
                g.as_mut_ptr(),
                g.len(),
                ptr(&mut self.found_inf),
                ptr(&mut inv),
            )
        })?;
        let finite = self.found_inf.f_double_value(&[0])? == 0.0;
        if !finite {
            self.skipped += 1;
        }
        Ok(finite)
    }

    /// Halves the scale after a skipped step, doubles it after enough good ones.
    pub fn update(&mut self) -> Result<(), TchError> {
        // SAFETY: the tensors are owned by self and live for the call.
        check(unsafe {
            ffi::pipeline_amp_update(
                ptr(&mut self.scale),
                ptr(&mut self.growth_tracker),
                ptr(&mut self.found_inf),
                GROWTH,
                BACKOFF,
                GROWTH_INTERVAL,
            )
        })
    }

    /// The scaler's state for a snapshot.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        vec![
            ("scale".into(), self.scale.shallow_clone()),
            ("growth_tracker".into(), self.growth_tracker.shallow_clone()),
        ]
    }

    pub fn load_state(&mut self, get: impl Fn(&str) -> Option<Tensor>) -> Result<(), TchError> {
        for (name, target) in [
            ("scale", &mut self.scale),
            ("growth_tracker", &mut self.growth_tracker),
        ] {
            let saved = get(name)
                .ok_or_else(|| TchError::Torch(format!("loss scaler state `{name}` is missing")))?;
            target.f_copy_(&saved)?;
        }
        Ok(())
    }

    /// The scale, on the device.
    pub fn current_tensor(&self) -> &Tensor {
        &self.scale
    }

    pub fn current(&self) -> f64 {
        self.scale.double_value(&[0])
    }
}

/// Clips the gradients as `clipping` says (by total norm, or by value). Clipping by norm
/// gives the total norm before clipping, on the device (reading it waits for the device).
pub fn clip(grads: &mut [Tensor], clipping: &Clipping) -> Result<Option<Tensor>, TchError> {
    let mut g: Vec<*mut c_void> = grads.iter_mut().map(ptr).collect();
    match (clipping.max_norm, clipping.value) {
        (Some(max_norm), _) => {
            let mut total = Tensor::new();
            // SAFETY: every pointer is a live tensor for the duration of the call.
            check(unsafe {
                ffi::pipeline_clip_grad_norm(
                    g.as_mut_ptr(),
                    g.len(),
                    max_norm,
                    clipping.norm_type,
                    ptr(&mut total),
                )
            })?;
            Ok(Some(total).filter(Tensor::defined))
        }
        (None, Some(value)) => {
            // SAFETY: every pointer is a live tensor for the duration of the call.
            check(unsafe { ffi::pipeline_clip_grad_value(g.as_mut_ptr(), g.len(), value) })?;
            Ok(None)
        }
        (None, None) => Ok(None),
    }
}

/// The gradients' total 2-norm, on the device (`None` without gradients).
pub fn grad_norm(grads: &mut [Tensor]) -> Result<Option<Tensor>, TchError> {
    let mut g: Vec<*mut c_void> = grads.iter_mut().map(ptr).collect();
    let mut total = Tensor::new();
    // SAFETY: every pointer is a live tensor for the duration of the call.
    check(unsafe { ffi::pipeline_grad_norm(g.as_mut_ptr(), g.len(), 2.0, ptr(&mut total)) })?;
    Ok(Some(total).filter(Tensor::defined))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(ts: &[Tensor]) -> f64 {
        let squares: f64 = ts
            .iter()
            .map(|t| t.square().sum(Kind::Double).double_value(&[]))
            .sum();
        squares.sqrt()
    }

    #[test]
    fn clipping_by_norm_and_by_value_as_torch_nn_utils() {
        let make = || {
            vec![
                Tensor::from_slice(&[3.0f32, 4.0]),
                Tensor::from_slice(&[12.0f32]),
            ]
        };
        let mut grads = make();
        let by_norm = Clipping {
            max_norm: Some(1.3),
            norm_type: 2.0,
            value: None,
        };
        let total = clip(&mut grads, &by_norm).unwrap().unwrap();
        assert_eq!(total.double_value(&[]), 13.0, "the norm before clipping");
        assert!(
            (norm(&grads) - 1.3).abs() < 1e-5,
            "total norm 13 → 1.3: {}",
            norm(&grads)
        );
        assert!(
            (grads[0].double_value(&[1]) / grads[0].double_value(&[0]) - 4.0 / 3.0).abs() < 1e-6,
            "direction kept"
        );
        let mut small = vec![Tensor::from_slice(&[0.3f32, 0.4])];
        clip(&mut small, &by_norm).unwrap();
        assert!(
            (norm(&small) - 0.5).abs() < 1e-6,
            "below the bound: unchanged"
        );
        let mut grads = make();
        clip(
            &mut grads,
            &Clipping {
                max_norm: None,
                norm_type: 2.0,
                value: Some(3.5),
            },
        )
        .unwrap();
        assert_eq!(Vec::<f32>::try_from(&grads[0]).unwrap(), [3.0, 3.5]);
        assert_eq!(Vec::<f32>::try_from(&grads[1]).unwrap(), [3.5]);
    }

    #[test]
    fn the_gradients_norm_leaves_them_as_they_are() {
        let mut grads = vec![
            Tensor::from_slice(&[3.0f32, 4.0]),
            Tensor::from_slice(&[12.0f32]),
        ];
        let total = grad_norm(&mut grads).unwrap().unwrap();
        assert_eq!(total.double_value(&[]), 13.0);
        assert_eq!(Vec::<f32>::try_from(&grads[0]).unwrap(), [3.0, 4.0]);
        assert!(
            grad_norm(&mut []).unwrap().is_none(),
            "no gradients, no norm"
        );
    }

    #[test]
    fn a_missing_deterministic_kernel_is_the_rules_diagnostic() {
        let text = "seed 1\ndata { source \"d.csv\"; }\nmodel { linear 2; }\nloss \"mse\"\noptimizer \"sgd\"\naccelerator deterministic=#true\ntrain\n";
        let checked = pipeline_core::load(text, std::path::Path::new("m.kdl"), &[]);
        let m = checked.valid().unwrap();
        let e = TchError::Torch("index_add_cuda_ does not have a deterministic implementation, but you set 'torch.use_deterministic_algorithms(True)'.\nException raised from alertNotDeterministic".into());
        let d = nondeterministic(m, &e).unwrap();
        assert_eq!(d.code, "pipeline::accelerator::nondeterministic_op");
        assert!(
            d.message.starts_with("index_add_cuda_ does not have"),
            "{}",
            d.message
        );
        assert!(
            !d.message.contains("Exception raised"),
            "libtorch's trace is cut"
        );
        assert_eq!(d.labels.len(), 1, "points at `deterministic`");
        assert!(nondeterministic(m, &TchError::Torch("shape mismatch".into())).is_none());
    }

    #[test]
    fn the_loss_scaler_skips_overflowing_steps_and_backs_off() {
        let mut scaler = Scaler::new(Device::Cpu).unwrap();
        let mut grads = vec![Tensor::from_slice(&[65536.0f32, 131072.0])];
        assert!(scaler.unscale(&mut grads).unwrap(), "finite");
        assert_eq!(
            Vec::<f32>::try_from(&grads[0]).unwrap(),
            [1.0, 2.0],
            "unscaled"
        );
        scaler.update().unwrap();
        assert_eq!(scaler.current(), INITIAL_SCALE);
        let mut bad = vec![Tensor::from_slice(&[1.0f32, f32::INFINITY])];
        assert!(!scaler.unscale(&mut bad).unwrap(), "inf found");
        scaler.update().unwrap();
        assert_eq!(scaler.current(), INITIAL_SCALE * BACKOFF);
        assert_eq!(scaler.skipped, 1);
    }
}
