//! What every call into the C++ shim (`shim/`) shares: its result (null, or an error
//! message) as a `Result`, and tensors as the `at::Tensor*` it takes.

use std::ffi::{c_char, c_void, CStr};
use tch::{TchError, Tensor};

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
pub(crate) fn raw(tensors: &mut [Tensor]) -> Vec<*mut c_void> {
    tensors
        .iter_mut()
        .map(|t| t.as_mut_ptr() as *mut c_void)
        .collect()
}
