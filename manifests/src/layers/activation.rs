//! Element-wise activations (`relu`, `leaky-relu`, `gelu`, `silu`, `tanh`, `sigmoid`),
//! `softmax` and `log-softmax` over the last dimension, and `identity`. None has
//! parameters; all keep the shape.

use super::{LayerType, Ops, Params, Shape, ShapeError, Unary};
use crate::reader::Fields;
use crate::schema::{key, section, Bound, Section, Ty, Val};
use serde::Serialize;

/// An element-wise layer without settings: `$name` in manifests, `$unary` in [`Ops`].
macro_rules! elementwise {
    ($ty:ident, $name:literal, $unary:expr, $doc:literal) => {
        #[derive(Debug, Clone, PartialEq, Serialize)]
        pub struct $ty {}

        impl LayerType for $ty {
            const SCHEMA: Section = section($name, &[], &[], $doc);

            fn lower(_: &Fields) -> Self {
                $ty {}
            }

            fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
                Ok(x.to_vec())
            }

            fn forward<O: Ops>(
                &self,
                ops: &mut O,
                _p: &Params<'_, O::T>,
                x: &O::T,
            ) -> Result<O::T, O::Error> {
                ops.unary(x, $unary)
            }
        }
    };
}

elementwise!(
    Relu,
    "relu",
    Unary::Relu,
    "Rectified linear unit (`nn.ReLU`)."
);
elementwise!(
    Gelu,
    "gelu",
    Unary::Gelu,
    "Gaussian error linear unit, exact form (`nn.GELU()`)."
);
elementwise!(
    Silu,
    "silu",
    Unary::Silu,
    "Sigmoid linear unit, `x * sigmoid(x)` (`nn.SiLU`, also called swish)."
);
elementwise!(Tanh, "tanh", Unary::Tanh, "Hyperbolic tangent (`nn.Tanh`).");
elementwise!(
    Sigmoid,
    "sigmoid",
    Unary::Sigmoid,
    "Logistic sigmoid (`nn.Sigmoid`)."
);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeakyRelu {
    pub slope: f64,
}

impl LayerType for LeakyRelu {
    const SCHEMA: Section = section(
        "leaky-relu",
        &["slope"],
        &[key(
            "slope",
            Ty::Float {
                min: Bound::Inclusive(0.0),
                max: Bound::Inclusive(1.0),
            },
            Some(Val::Float(0.01)),
            "The slope for negative inputs (`negative_slope`).",
        )],
        "Leaky rectified linear unit (`nn.LeakyReLU`).",
    );

    fn lower(f: &Fields) -> Self {
        LeakyRelu {
            slope: f.float("slope"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        Ok(x.to_vec())
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.unary(x, Unary::LeakyRelu(self.slope))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Identity {}

impl LayerType for Identity {
    const SCHEMA: Section = section(
        "identity",
        &[],
        &[],
        "Passes its input through unchanged (`nn.Identity`): a placeholder, or a branch that keeps its input.",
    );

    fn lower(_: &Fields) -> Self {
        Identity {}
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        Ok(x.to_vec())
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.identity(x)
    }
}

/// The shape rule of both softmaxes: a vector at least.
fn over_last_dim(name: &str, x: &[i64]) -> Result<Shape, ShapeError> {
    if x.is_empty() {
        return Err(ShapeError::new(
            format!("`{name}` needs at least one dimension"),
            "apply it to a vector",
        ));
    }
    Ok(x.to_vec())
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Softmax {}

impl LayerType for Softmax {
    const SCHEMA: Section = section(
        "softmax",
        &[],
        &[],
        "Softmax over the last dimension (`nn.Softmax(dim=-1)`): probabilities. Not before `cross-entropy`, which takes logits.",
    );

    fn lower(_: &Fields) -> Self {
        Softmax {}
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        over_last_dim("softmax", x)
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.softmax(x, false)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogSoftmax {}

impl LayerType for LogSoftmax {
    const SCHEMA: Section = section(
        "log-softmax",
        &[],
        &[],
        "Log of the softmax over the last dimension (before an `nll` loss; `nn.LogSoftmax(dim=-1)`).",
    );

    fn lower(_: &Fields) -> Self {
        LogSoftmax {}
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        over_last_dim("log-softmax", x)
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.softmax(x, true)
    }
}
