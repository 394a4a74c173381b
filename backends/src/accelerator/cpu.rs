//! `device "cpu"`.

use super::device::{Accelerator, Unavailable};
use manifests::accelerator::{AcceleratorDescription, CPU};
use tch::Device;

pub struct Cpu;

impl Accelerator for Cpu {
    fn describe(&self) -> &'static AcceleratorDescription {
        &CPU
    }

    fn count(&self) -> Result<usize, Unavailable> {
        Ok(1)
    }

    fn device(&self, _index: usize) -> Device {
        Device::Cpu
    }

    fn owns(&self, device: Device) -> bool {
        device == Device::Cpu
    }

    /// `MemAvailable` of /proc/meminfo: what the machine can still give.
    fn memory_limit(&self, _device: Device) -> Option<(u128, String)> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kb: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
        let bytes = kb * 1024;
        Some((
            bytes,
            format!(
                "this machine has {} available",
                crate::model::show_bytes(bytes)
            ),
        ))
    }
}
