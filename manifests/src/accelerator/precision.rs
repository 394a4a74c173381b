//! `accelerator.precision`: the dtypes a run computes in. The built-ins are Lightning's
//! names; `backends::accelerator::precision` runs them.

use super::{Chosen, Member, Registry};

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

    fn registry() -> &'static Registry<Self> {
        &PRECISIONS
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
pub static PRECISIONS: Registry<PrecisionDescription> =
    Registry::new(|| BUILTINS.to_vec(), |m| m.name);

/// A registered precision, as a manifest names it.
pub type Precision = Chosen<PrecisionDescription>;

impl Precision {
    /// The default, `32`.
    pub const FP32: Precision = Chosen(&FP32);
}
