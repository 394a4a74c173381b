//! `accelerator.precision`: the dtypes a run computes in. The built-ins are Lightning's
//! names; `backends::accelerator::precision` runs them.

use super::{Member, Registry};
use serde::{Serialize, Serializer};

/// A floating-point dtype, named as torch names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Float64,
    Float32,
    BFloat16,
    Float16,
}

impl Dtype {
    pub const fn as_str(self) -> &'static str {
        match self {
            Dtype::Float64 => "float64",
            Dtype::Float32 => "float32",
            Dtype::BFloat16 => "bfloat16",
            Dtype::Float16 => "float16",
        }
    }
}

/// What a precision is, without libtorch.
#[derive(Debug)]
pub struct PrecisionDescription {
    /// As a manifest writes it: `precision "bf16-mixed"`.
    pub name: &'static str,
    pub doc: &'static str,
    /// The dtype of the weights (and of the inputs fed to them).
    pub weights: Dtype,
    /// The dtype autocast computes the forward pass and loss in, for mixed precisions.
    pub autocast: Option<Dtype>,
    /// Whether its gradients need a loss scaler (float16's narrow range): the dynamic
    /// scaler runs unless `loss-scale "off"`, and `loss-scale` is refused elsewhere.
    pub loss_scaling: bool,
    /// Whether it runs only on CUDA (float16 kernels).
    pub needs_cuda: bool,
}

impl Member for PrecisionDescription {
    fn name(&self) -> &'static str {
        self.name
    }
}

const fn builtin(
    name: &'static str,
    doc: &'static str,
    weights: Dtype,
    autocast: Option<Dtype>,
) -> PrecisionDescription {
    let fp16 = matches!(weights, Dtype::Float16) || matches!(autocast, Some(Dtype::Float16));
    PrecisionDescription {
        name,
        doc,
        weights,
        autocast,
        loss_scaling: fp16 && autocast.is_some(),
        needs_cuda: fp16,
    }
}

static FP32: PrecisionDescription = builtin("32", "fp32 weights and compute", Dtype::Float32, None);

const BUILTINS: &[&PrecisionDescription] = &[
    &FP32,
    &builtin("64", "fp64 weights and compute", Dtype::Float64, None),
    &builtin(
        "bf16-mixed",
        "fp32 weights; the forward pass and loss in bfloat16 under autocast",
        Dtype::Float32,
        Some(Dtype::BFloat16),
    ),
    &builtin(
        "bf16-true",
        "weights and compute in bfloat16",
        Dtype::BFloat16,
        None,
    ),
    &builtin(
        "16-mixed",
        "fp32 weights; the forward pass and loss in float16 under autocast, with a dynamic loss scaler",
        Dtype::Float32,
        Some(Dtype::Float16),
    ),
    &builtin(
        "16-true",
        "weights and compute in float16",
        Dtype::Float16,
        None,
    ),
];

/// Every precision a manifest may name.
pub static PRECISIONS: Registry<PrecisionDescription> = Registry::new(BUILTINS);

/// A registered precision, as the manifest names it; serialised as its name (a cache
/// key), compared by name.
#[derive(Clone, Copy)]
pub struct Precision(&'static PrecisionDescription);

impl Precision {
    /// The default, `32`.
    pub const FP32: Precision = Precision(&FP32);

    /// The registered precision named `name`.
    pub fn named(name: &str) -> Option<Precision> {
        PRECISIONS.get(name).map(Precision)
    }

    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    pub fn describe(self) -> &'static PrecisionDescription {
        self.0
    }

    /// fp32 weights with a lower-precision forward pass under autocast.
    pub fn is_mixed(self) -> bool {
        self.0.autocast.is_some()
    }
}

impl PartialEq for Precision {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Precision {}

impl std::fmt::Debug for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Precision({:?})", self.0.name)
    }
}

impl Serialize for Precision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}
