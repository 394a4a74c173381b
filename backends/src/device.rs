//! Choosing the device a run uses from `accelerator.device`.

use manifests::{AcceleratorSpec, DeviceSpec, Diagnostic};
use tch::{Cuda, Device};

/// The device for `spec`: `auto` is CUDA when a GPU is visible, the CPU otherwise.
pub fn resolve(spec: &AcceleratorSpec) -> Result<Device, Diagnostic> {
    match spec.device {
        DeviceSpec::Auto => Ok(Device::cuda_if_available()),
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(n) => {
            let count = if Cuda::is_available() {
                Cuda::device_count() as usize
            } else {
                0
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
                .label_opt(spec.device_span, "CUDA requested here")
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
