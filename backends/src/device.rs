//! Choosing the device a run uses from `accelerator.device`.
//!
//! libtorch's CUDA support lives in `libtorch_cuda.so`, which registers itself with
//! libtorch when it is loaded. It is not linked into the binary (see `build.rs`): it is
//! loaded here, before anything asks libtorch about CUDA, and only when the manifest
//! asks for `cuda` or `auto`, so CPU runs never pay for it.

use manifests::{AcceleratorSpec, DeviceSpec, Diagnostic};
use std::ffi::{CStr, CString};
use std::sync::OnceLock;
use tch::{Cuda, Device};

/// Loads `libtorch_cuda.so` once; `Err` says why it could not be loaded.
pub fn load_cuda() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let dir =
                option_env!("PIPELINE_LIBTORCH_LIB").ok_or("built without libtorch's directory")?;
            let path = std::path::Path::new(dir).join("libtorch_cuda.so");
            if !path.exists() {
                return Err(format!(
                    "this libtorch has no CUDA support ({} is missing)",
                    path.display()
                ));
            }
            let c_path =
                CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
            // SAFETY: dlopen with a valid NUL-terminated path; the handle is kept open for
            // the life of the process, as libtorch expects of its backends.
            let handle =
                unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if handle.is_null() {
                // SAFETY: dlerror returns NULL or a valid C string owned by libc.
                let why = unsafe { libc::dlerror() };
                let why = if why.is_null() {
                    "unknown error".into()
                } else {
                    unsafe { CStr::from_ptr(why) }
                        .to_string_lossy()
                        .into_owned()
                };
                return Err(format!("cannot load {}: {why}", path.display()));
            }
            Ok(())
        })
        .clone()
}

/// The device for `spec`: `auto` is CUDA when a GPU is visible, the CPU otherwise.
pub fn resolve(spec: &AcceleratorSpec) -> Result<Device, Diagnostic> {
    if spec.deterministic && std::env::var_os("CUBLAS_WORKSPACE_CONFIG").is_none() {
        // cuBLAS is deterministic only with a fixed workspace, set before CUDA starts
        // (nothing else runs yet: this is the first thing a run does).
        std::env::set_var("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
    }
    match spec.device {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Auto => Ok(if load_cuda().is_ok() {
            Device::cuda_if_available()
        } else {
            Device::Cpu
        }),
        DeviceSpec::Cuda(n) => {
            let count = match load_cuda() {
                Ok(()) if Cuda::is_available() => Cuda::device_count() as usize,
                Ok(()) => 0,
                Err(why) => {
                    return Err(Diagnostic::error(
                        "pipeline::accelerator::cuda_unavailable",
                        format!("`accelerator.device` asks for cuda:{n}, but {why}"),
                    )
                    .label_opt(spec.span("device"), "CUDA requested here")
                    .help("install a CUDA build of torch, or use `device \"cpu\"`"));
                }
            };
            if n < count {
                Ok(Device::Cuda(n))
            } else {
                let found = match count {
                    0 => "no CUDA device is available on this machine".to_string(),
                    c => format!("this machine has {c} CUDA device(s), numbered from 0"),
                };
                Err(Diagnostic::error(
                    "pipeline::accelerator::cuda_unavailable",
                    format!("`accelerator.device` asks for cuda:{n}, but {found}"),
                )
                .label_opt(spec.span("device"), "CUDA requested here")
                .help("use `device \"auto\"` to fall back to the CPU, or `device \"cpu\"`"))
            }
        }
    }
}

/// How the device is named in messages and metadata.
pub fn describe(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(n) => format!("cuda:{n}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Kind, Tensor};

    /// Loading the library late must still register libtorch's CUDA kernels and hooks:
    /// then touching a CUDA tensor reaches the CUDA runtime (which, on a machine without a
    /// GPU, reports the missing driver) instead of failing for want of a CUDA backend.
    #[test]
    fn the_cuda_library_loaded_at_run_time_registers_itself() {
        let dir = env!("PIPELINE_LIBTORCH_LIB");
        if !std::path::Path::new(dir).join("libtorch_cuda.so").exists() {
            eprintln!("skipped: a CPU-only libtorch");
            return;
        }
        load_cuda().unwrap();
        match Tensor::f_zeros([2], (Kind::Float, Device::Cuda(0))) {
            Ok(t) => assert_eq!(t.device(), Device::Cuda(0)),
            Err(e) => {
                let message = e.to_string();
                // Unregistered, libtorch says "Could not run 'aten::empty.memory_format' with
                // arguments from the 'CUDA' backend"; registered, it reaches the driver.
                assert!(
                    !message.contains("Could not run") && !message.contains("without ATen_cuda"),
                    "CUDA is not registered: {message}"
                );
                assert!(!Cuda::is_available());
            }
        }
    }
}
