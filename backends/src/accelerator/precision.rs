//! [`Precision`]: the dtypes a run computes in (Lightning's precision plugins). The six
//! built-ins differ only in their dtypes, which their descriptions give; a registered
//! precision may also change how inputs reach the weights.

use manifests::accelerator::{Dtype, PrecisionDescription, PRECISIONS};
use std::sync::LazyLock;
use tch::{Kind, TchError, Tensor};

/// A precision: the dtype of the weights, the dtype autocast computes the forward pass
/// and loss in, and what is done to each input batch. Whether a loss scaler runs is its
/// description's `loss_scaling`.
pub trait Precision: Send + Sync {
    fn describe(&self) -> &'static PrecisionDescription;

    /// The dtype of the weights (the model is built in it; checkpoints are fp32).
    fn weights(&self) -> Kind {
        kind(self.describe().weights)
    }

    /// The dtype autocast computes the forward pass and loss in (`None`: no autocast).
    fn autocast(&self) -> Option<Kind> {
        self.describe().autocast.map(kind)
    }

    /// A batch of inputs (read as fp32) as the weights take it: floating-point inputs in
    /// the weights' dtype, the others (token ids) as they are.
    fn input(&self, x: &Tensor) -> Result<Tensor, TchError> {
        let weights = self.weights();
        if x.kind() == weights || !x.is_floating_point() {
            Ok(x.shallow_clone())
        } else {
            x.f_to_kind(weights)
        }
    }
}

/// libtorch's dtype for a described one.
pub fn kind(dtype: Dtype) -> Kind {
    match dtype {
        Dtype::Float64 => Kind::Double,
        Dtype::Float32 => Kind::Float,
        Dtype::BFloat16 => Kind::BFloat16,
        Dtype::Float16 => Kind::Half,
    }
}

/// A built-in precision: its description's dtypes, nothing more.
struct Builtin(&'static PrecisionDescription);

impl Precision for Builtin {
    fn describe(&self) -> &'static PrecisionDescription {
        self.0
    }
}

pub(super) fn builtins() -> Vec<&'static dyn Precision> {
    static ALL: LazyLock<Vec<Builtin>> =
        LazyLock::new(|| PRECISIONS.builtins().into_iter().map(Builtin).collect());
    ALL.iter().map(|b| b as &dyn Precision).collect()
}
