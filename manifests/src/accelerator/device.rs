//! `accelerator.device`: the hardware a run trains on, named by an accelerator (`cpu`,
//! `cuda`, `cuda:1`) or `auto`. `backends::accelerator::device` runs the built-ins.

use super::{Chosen, Member, Registry};
use crate::manifest::CommBackend;
use serde::{Serialize, Serializer};

/// What an accelerator is, without libtorch.
#[derive(Debug)]
pub struct AcceleratorDescription {
    /// As a manifest writes it: `device "cuda"`, `device "cuda:1"`.
    pub name: &'static str,
    pub doc: &'static str,
    /// How messages call it: "the CPU".
    pub called: &'static str,
    /// Whether its devices are numbered (`cuda:N`; `cuda` alone is device 0).
    pub indexed: bool,
    /// Whether it computes on CUDA devices (what float16 kernels need).
    pub cuda: bool,
    /// The engines that can carry its tensors between processes (the first is what
    /// `backend "auto"` picks).
    pub backends: &'static [CommBackend],
    /// Whether this machine has it, as far as can be told without libtorch: `Some(false)`
    /// when certainly not, `None` when only libtorch can say.
    pub present: fn() -> Option<bool>,
}

impl Member for AcceleratorDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn registry() -> &'static Registry<Self> {
        &ACCELERATORS
    }
}

/// No NVIDIA driver: certainly no CUDA.
fn nvidia_driver() -> Option<bool> {
    match std::path::Path::new("/proc/driver/nvidia/version").exists() {
        true => None,
        false => Some(false),
    }
}

/// The CPU.
pub static CPU: AcceleratorDescription = AcceleratorDescription {
    name: "cpu",
    doc: "the CPU, with libtorch's threads",
    called: "the CPU",
    indexed: false,
    cuda: false,
    backends: &[CommBackend::Gloo],
    present: || Some(true),
};

/// NVIDIA GPUs.
pub static CUDA: AcceleratorDescription = AcceleratorDescription {
    name: "cuda",
    doc: "NVIDIA GPUs through CUDA, one per process",
    called: "CUDA",
    indexed: true,
    cuda: true,
    backends: &[CommBackend::Nccl, CommBackend::Gloo],
    present: nvidia_driver,
};

const BUILTINS: &[&AcceleratorDescription] = &[&CPU, &CUDA];

/// Every accelerator a manifest may name. `auto` takes the last registered one this
/// machine has (a user's before CUDA, CUDA before the CPU).
pub static ACCELERATORS: Registry<AcceleratorDescription> =
    Registry::new(|| BUILTINS.to_vec(), |m| m.name);

/// A registered accelerator, as a manifest names it.
pub type Accelerator = Chosen<AcceleratorDescription>;

impl Accelerator {
    pub const CPU: Accelerator = Chosen(&CPU);

    /// What `auto` would choose, as far as can be told without libtorch: `None` when
    /// only libtorch can say.
    pub fn auto_without_libtorch() -> Option<Accelerator> {
        for a in ACCELERATORS.all().into_iter().rev() {
            match (a.present)() {
                Some(false) => continue,
                Some(true) => return Some(Chosen(a)),
                None => return None,
            }
        }
        None
    }
}

/// `accelerator.device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The best accelerator this machine has.
    Auto,
    /// One accelerator, and for a numbered one, which device (`cuda` is `cuda:0`).
    On(Accelerator, Option<usize>),
}

impl DeviceSpec {
    /// The device as written in a manifest: `auto`, `cpu`, `cuda:1`; the text back when
    /// it names no registered accelerator (or a device of one that has no numbers).
    pub fn parse(text: &str, max_index: usize) -> Result<DeviceSpec, String> {
        if text == "auto" {
            return Ok(DeviceSpec::Auto);
        }
        let (name, index) = match text.split_once(':') {
            Some((name, n)) => (name, Some(n)),
            None => (text, None),
        };
        let accelerator = Accelerator::named(name).ok_or_else(|| text.to_string())?;
        let index = match (accelerator.describe().indexed, index) {
            (true, None) => Some(0),
            (true, Some(n)) => Some(
                n.parse::<usize>()
                    .ok()
                    .filter(|n| *n <= max_index)
                    .ok_or_else(|| text.to_string())?,
            ),
            (false, None) => None,
            (false, Some(_)) => return Err(text.to_string()),
        };
        Ok(DeviceSpec::On(accelerator, index))
    }

    /// The accelerator named, unless `auto`.
    pub fn accelerator(self) -> Option<Accelerator> {
        match self {
            DeviceSpec::Auto => None,
            DeviceSpec::On(a, _) => Some(a),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::On(a, None) => f.write_str(a.as_str()),
            DeviceSpec::On(a, Some(n)) => write!(f, "{}:{n}", a.as_str()),
        }
    }
}

/// As the enum it replaced serialised (cache keys): `"auto"`, `"cpu"`, `{"cuda": 0}`.
impl Serialize for DeviceSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            DeviceSpec::Auto => s.serialize_str("auto"),
            DeviceSpec::On(a, None) => s.serialize_str(a.as_str()),
            DeviceSpec::On(a, Some(n)) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(a.as_str(), n)?;
                map.end()
            }
        }
    }
}
