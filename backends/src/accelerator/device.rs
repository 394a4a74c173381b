//! [`Accelerator`]: the hardware behind `accelerator.device`, and [`resolve`], which
//! turns the device the manifest names (or `auto`) into libtorch's.

use super::RUN_ACCELERATORS;
use manifests::accelerator::AcceleratorDescription;
use manifests::{AcceleratorSpec, DeviceSpec, Diagnostic};
use tch::Device;

/// Why an accelerator has no device here, and what to do about it.
pub struct Unavailable {
    pub why: String,
    pub help: &'static str,
}

/// An accelerator: what devices it has and how they are used (Lightning's
/// `Accelerator`). Its description says what `check` may know without libtorch.
pub trait Accelerator: Send + Sync {
    fn describe(&self) -> &'static AcceleratorDescription;

    /// How many devices this process can use (`Err`: why none, e.g. a library missing).
    fn count(&self) -> Result<usize, Unavailable>;

    /// Device number `index` (below [`Accelerator::count`]).
    fn device(&self, index: usize) -> Device;

    /// Whether `device` is one of this accelerator's.
    fn owns(&self, device: Device) -> bool;

    /// The device of the process with `local_rank` on its machine: the local rank's
    /// among the devices it sees, as torchrun's processes take them; shared round-robin
    /// when there are more processes than devices.
    fn for_local_rank(&self, local_rank: usize) -> Device {
        let count = self.count().map_or(1, |n| n.max(1));
        self.device(local_rank % count)
    }

    /// The most bytes a model's parameters may take on `device`, and how to say so
    /// ("this machine has 3.1 GB available"); `None` when unknown.
    fn memory_limit(&self, device: Device) -> Option<(u128, String)>;
}

/// The accelerator `device` belongs to.
pub fn of(device: Device) -> Option<&'static dyn Accelerator> {
    RUN_ACCELERATORS.all().into_iter().find(|a| a.owns(device))
}

/// The device for `spec` (the process's own with `local_rank`, in a distributed run):
/// `auto` is the last registered accelerator with a device here (CUDA before the CPU).
pub fn resolve(spec: &AcceleratorSpec, local_rank: Option<usize>) -> Result<Device, Diagnostic> {
    if spec.deterministic && std::env::var_os("CUBLAS_WORKSPACE_CONFIG").is_none() {
        // cuBLAS is deterministic only with a fixed workspace, set before CUDA starts
        // (nothing else runs yet: this is the first thing a run does).
        std::env::set_var("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
    }
    let pick = |a: &dyn Accelerator, index: usize| match local_rank {
        Some(rank) if a.describe().indexed => a.for_local_rank(rank),
        _ => a.device(index),
    };
    let (accelerator, index) = match spec.device {
        DeviceSpec::Auto => {
            let found = RUN_ACCELERATORS
                .all()
                .into_iter()
                .rev()
                .find(|a| a.count().is_ok_and(|n| n > 0));
            // The CPU is always there; nothing found means a registry without it.
            return Ok(found.map_or(Device::Cpu, |a| pick(a, 0)));
        }
        DeviceSpec::On(a, index) => (a, index),
    };
    let member = super::find(
        &RUN_ACCELERATORS,
        "accelerator",
        accelerator.as_str(),
        "device",
        spec,
    )?;
    let unavailable = |why: String, help: &str| {
        Diagnostic::error(
            "pipeline::accelerator::cuda_unavailable",
            format!("`accelerator.device` asks for {}, but {why}", spec.device),
        )
        .label_opt(
            spec.span("device"),
            format!("{} requested here", member.describe().called),
        )
        .help(help)
    };
    let count = member.count().map_err(|u| unavailable(u.why, u.help))?;
    let index = index.unwrap_or(0);
    if index < count {
        return Ok(pick(member, index));
    }
    let found = match count {
        0 => format!(
            "no {} device is available on this machine",
            member.describe().called
        ),
        c => format!(
            "this machine has {c} {} device(s), numbered from 0",
            member.describe().called
        ),
    };
    Err(unavailable(
        found,
        "use `device \"auto\"` to fall back to the CPU, or `device \"cpu\"`",
    ))
}
