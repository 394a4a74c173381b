//! `device "cuda"`, `"cuda:N"`: libtorch's CUDA support, loaded when first asked for
//! (`crate::device::load_cuda`), so CPU runs never pay for it.

use super::device::{Accelerator, Unavailable};
use crate::device::{load_cuda, nvidia_driver_present};
use manifests::accelerator::{AcceleratorDescription, CUDA};
use tch::Device;

pub struct Cuda;

impl Accelerator for Cuda {
    fn describe(&self) -> &'static AcceleratorDescription {
        &CUDA
    }

    fn count(&self) -> Result<usize, Unavailable> {
        // No driver, no GPU: nothing to load.
        if !nvidia_driver_present() {
            return Ok(0);
        }
        match load_cuda() {
            Ok(()) if tch::Cuda::is_available() => Ok(tch::Cuda::device_count() as usize),
            Ok(()) => Ok(0),
            Err(why) => Err(Unavailable {
                why,
                help: "install a CUDA build of torch, or use `device \"cpu\"`",
            }),
        }
    }

    fn device(&self, index: usize) -> Device {
        Device::Cuda(index)
    }

    fn owns(&self, device: Device) -> bool {
        matches!(device, Device::Cuda(_))
    }

    /// libtorch does not report a GPU's memory before a context exists: 1 TB, more than
    /// any single GPU has.
    fn memory_limit(&self, _device: Device) -> Option<(u128, String)> {
        Some((1 << 40, "no GPU has as much".into()))
    }
}
