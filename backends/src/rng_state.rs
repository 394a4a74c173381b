//! Saving and restoring libtorch's default random generators (through the C++ shim,
//! `shim/rng.cpp`): the CPU one, and the CUDA one of the device a run uses.

use crate::shim::check;
use tch::{Device, TchError, Tensor};

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_rng_get_state(cuda_index: i32, out: *mut *mut c_void) -> *const c_char;
        pub fn pipeline_rng_set_state(cuda_index: i32, state: *mut c_void) -> *const c_char;
    }
}

/// The generators a run on `device` draws from, by name and shim index (-1: the CPU).
fn generators(device: Device) -> Vec<(&'static str, i32)> {
    match device {
        Device::Cuda(i) => vec![("cpu", -1), ("cuda", i as i32)],
        _ => vec![("cpu", -1)],
    }
}

/// The state of every generator a run on `device` uses, by name (`cpu`, `cuda`).
pub fn save(device: Device) -> Result<Vec<(String, Tensor)>, TchError> {
    let mut states = Vec::new();
    for (name, index) in generators(device) {
        let mut out: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: on success the shim stores a new `at::Tensor*` in `out`, which tch's
        // Tensor then owns (and deletes when dropped).
        check(unsafe { ffi::pipeline_rng_get_state(index, &mut out) })?;
        let state = unsafe { Tensor::from_ptr(out as *mut torch_sys::C_tensor) };
        states.push((name.to_string(), state));
    }
    Ok(states)
}

/// Restores states from [`save`]; `get` finds a state by name.
pub fn restore(device: Device, get: impl Fn(&str) -> Option<Tensor>) -> Result<(), TchError> {
    for (name, index) in generators(device) {
        let mut state = get(name)
            .ok_or_else(|| TchError::Torch(format!("the `{name}` random state is missing")))?;
        // SAFETY: `state` is a live tensor for the duration of the call.
        check(unsafe {
            ffi::pipeline_rng_set_state(index, state.as_mut_ptr() as *mut std::ffi::c_void)
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;

    #[test]
    fn a_restored_state_draws_the_same_numbers() {
        tch::manual_seed(5);
        let saved = save(Device::Cpu).unwrap();
        let a = Tensor::rand([4], (Kind::Float, Device::Cpu));
        let _ = Tensor::rand([7], (Kind::Float, Device::Cpu));
        restore(Device::Cpu, |n| {
            saved
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, t)| t.shallow_clone())
        })
        .unwrap();
        let b = Tensor::rand([4], (Kind::Float, Device::Cpu));
        assert!(a.equal(&b));
    }
}
