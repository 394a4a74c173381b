//! The layers a `model` block may hold: one type per layer, one file per family, every
//! type registered once in [`layers!`] below.
//!
//! A layer type owns everything about itself, the way a `torch.nn` module or a tch
//! `ModuleT` does:
//!
//! - its **schema** entry ([`LayerType::SCHEMA`]: name, keys, docs, defaults), which
//!   drives reading the manifest, `pipeline explain model.<name>` and "did you mean";
//! - its typed settings (the type itself, serialised into the cache key, defaults applied);
//! - its **shape rule** ([`LayerType::infer`]), which `pipeline check` runs without
//!   libtorch;
//! - its **parameters** ([`LayerType::parameters`]: names as in PyTorch's `state_dict`,
//!   shapes, initialisation as `torch.nn` does it);
//! - its **forward pass** ([`LayerType::forward`]), written against [`Ops`], which a
//!   backend implements with libtorch.
//!
//! Adding a layer is one new type (in a new file, or beside its family) and its name in
//! the registry, [`layers!`] at the bottom of this file; nothing else matches on layer
//! names. `docs/extending.md` walks through it.

pub mod ops;

pub use conv::Conv;
pub use ops::{Cell, Ops, Unary};
pub use pool::Window;
pub use sequence::{sinusoids, PoolMode};

use crate::reader::Fields;
use crate::schema::Section;
use serde::Serialize;

/// The shape of one sample (no batch dimension).
pub type Shape = Vec<i64>;

/// Why a layer cannot take its input: said on the layer's line by `check`, which adds
/// the shape it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError {
    pub message: String,
    /// What to write instead.
    pub help: String,
}

impl ShapeError {
    pub fn new(message: impl Into<String>, help: impl Into<String>) -> Self {
        ShapeError {
            message: message.into(),
            help: help.into(),
        }
    }
}

/// The most values one sample may hold between two layers (2^40: more than any memory).
pub const MAX_SAMPLE_VALUES: i64 = 1 << 40;

/// The number of values of a sample of shape `x`, or an error past [`MAX_SAMPLE_VALUES`]
/// (never an overflow).
pub fn values(x: &[i64]) -> Result<i64, ShapeError> {
    x.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_SAMPLE_VALUES)
        .ok_or_else(|| {
            ShapeError::new(
                format!(
                    "a sample of shape {} holds more than 2^40 values",
                    show_shape(x)
                ),
                "make the layers before it smaller",
            )
        })
}

/// `(1, 8, 8)`, or `a scalar`.
pub fn show_shape(shape: &[i64]) -> String {
    if shape.is_empty() {
        return "a scalar".into();
    }
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("({})", dims.join(", "))
}

/// How a parameter starts, as `torch.nn` initialises it.
#[derive(Debug, Clone, PartialEq)]
pub enum Init {
    /// Uniform on `[-bound, bound]` (PyTorch's default for weights and biases of linear
    /// and convolution layers: `bound = 1/sqrt(fan_in)`).
    Uniform { bound: f64 },
    /// Normal with mean 0 (`nn.Embedding`: std 1).
    Normal { std: f64 },
    /// Every element the same (`ones_`, `zeros_`).
    Const(f64),
    /// The sines and cosines of "Attention is all you need" over the (positions,
    /// features) table: `pe[pos, 2i] = sin(pos / 10000^(2i/d))`, `pe[pos, 2i+1] = cos(…)`.
    /// Computed by the backend when it allocates, so that counting a model's values
    /// allocates nothing.
    Sinusoidal,
}

/// One tensor a layer owns: a trained parameter or a buffer (running statistics).
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The name within the layer, as in the PyTorch module's `state_dict`
    /// (`weight`, `running_mean`, `weight_ih_l0`, `self_attn.out_proj.bias`).
    pub name: String,
    pub shape: Vec<i64>,
    pub init: Init,
    /// `false` for buffers, which the optimizer never sees.
    pub trainable: bool,
    /// Integer buffers (a count) keep their type whatever the model's precision.
    pub integer: bool,
}

impl Param {
    pub fn weight(name: impl Into<String>, shape: Vec<i64>, init: Init) -> Param {
        Param {
            name: name.into(),
            shape,
            init,
            trainable: true,
            integer: false,
        }
    }

    pub fn buffer(name: impl Into<String>, shape: Vec<i64>, init: Init) -> Param {
        Param {
            name: name.into(),
            shape,
            init,
            trainable: false,
            integer: false,
        }
    }

    /// A 64-bit integer scalar buffer starting at 0 (`num_batches_tracked`).
    pub fn counter(name: impl Into<String>) -> Param {
        Param {
            integer: true,
            ..Param::buffer(name, Vec::new(), Init::Const(0.0))
        }
    }

    /// The number of values it holds (saturating: an absurd model is refused by size).
    pub fn numel(&self) -> u128 {
        self.shape
            .iter()
            .map(|d| d.max(&0).unsigned_abs() as u128)
            .fold(1u128, u128::saturating_mul)
    }
}

/// A layer's tensors during a forward pass, in the order of [`LayerType::parameters`].
pub struct Params<'a, T> {
    pub decls: &'a [Param],
    pub values: &'a [T],
}

impl<'a, T> Params<'a, T> {
    /// The tensor named `name`, if the layer declared it (a bias may be off).
    pub fn opt(&self, name: &str) -> Option<&'a T> {
        let i = self.decls.iter().position(|p| p.name == name)?;
        self.values.get(i)
    }

    /// The tensor named `name`, which the layer always declares.
    pub fn get(&self, name: &str) -> &'a T {
        self.opt(name)
            .unwrap_or_else(|| panic!("the layer declares no parameter `{name}`"))
    }
}

/// What every layer type provides; see the module docs.
pub trait LayerType: Sized {
    /// The layer's node in the manifest: its name, keys (with docs and defaults), and
    /// the keys its positional arguments fill.
    const SCHEMA: Section;

    /// The settings from the node's checked fields (defaults already applied).
    fn lower(f: &Fields) -> Self;

    /// The shape of one output sample for one input sample of shape `x`; `first` says
    /// whether the layer reads the model's input (the data as stored).
    fn infer(&self, x: &[i64], first: bool) -> Result<Shape, ShapeError>;

    /// The tensors the layer owns for inputs of shape `x`, in creation order.
    fn parameters(&self, _x: &[i64]) -> Vec<Param> {
        Vec::new()
    }

    /// The forward pass of a batch `x`.
    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error>;

    /// The model input this layer reads as its padding mask (`mask="mask"`), for the
    /// layers whose schema has [`MASK`]; `None`: every step counts.
    fn mask(&self) -> Option<&str> {
        None
    }

    /// The forward pass of a batch `x` (batch, length, …) whose padding `mask` (batch,
    /// length) marks each real step with a non-zero value. Called only for a layer whose
    /// [`LayerType::mask`] names an input; such a layer overrides it.
    fn forward_masked<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
        _mask: &O::T,
    ) -> Result<O::T, O::Error> {
        self.forward(ops, p, x)
    }
}

/// The key of the layers that honour a padding mask: the model input that marks real
/// steps (non-zero) and padding (zero), as Hugging Face's `attention_mask` does.
pub(crate) const MASK: crate::schema::Key = crate::schema::key(
    "mask",
    crate::schema::Ty::Text,
    None,
    "The model input marking which steps are real (non-zero) and which are padding (0), such as `mask` from `data.text`: padding is left out. Default: every step counts.",
);

/// The names of the layers that take a padding mask (`mask="…"`).
pub fn masked_layers() -> Vec<&'static str> {
    LAYERS
        .iter()
        .filter(|s| s.keys.iter().any(|k| k.name == MASK.name))
        .map(|s| s.name)
        .collect()
}

/// The registry: one line a file (`file: Type, Type;`), each type a variant of [`Layer`]
/// named after it. It declares the files, and generates the enum, its dispatch
/// (exhaustive matches) and [`LAYERS`], the schema of each.
macro_rules! layers {
    ($($file:ident: $($ty:ident),+;)*) => {
        $(mod $file;
        pub use $file::{$($ty),+};)*

        layers!(@types $($($ty)+)*);
    };
    (@types $($ty:ident)*) => {
        /// One layer of a model, with its settings (defaults applied).
        #[derive(Debug, Clone, PartialEq)]
        pub enum Layer {
            $($ty($ty),)*
        }

        /// Every layer's schema, in the order `pipeline explain model` lists them.
        pub static LAYERS: &[&Section] = &[$(&<$ty as LayerType>::SCHEMA,)*];

        impl Layer {
            /// The layer's name as written in a manifest.
            pub fn name(&self) -> &'static str {
                self.schema().name
            }

            pub fn schema(&self) -> &'static Section {
                match self {
                    $(Layer::$ty(_) => &LAYERS[Kind::$ty as usize],)*
                }
            }

            /// The layer named `name` read from `f` (`None`: no such layer).
            pub(crate) fn lower(name: &str, f: &Fields) -> Option<Layer> {
                $(if name == <$ty as LayerType>::SCHEMA.name {
                    return Some(Layer::$ty(<$ty as LayerType>::lower(f)));
                })*
                None
            }

            /// See [`LayerType::infer`].
            pub fn infer(&self, x: &[i64], first: bool) -> Result<Shape, ShapeError> {
                match self {
                    $(Layer::$ty(l) => l.infer(x, first),)*
                }
            }

            /// See [`LayerType::parameters`].
            pub fn parameters(&self, x: &[i64]) -> Vec<Param> {
                match self {
                    $(Layer::$ty(l) => l.parameters(x),)*
                }
            }

            /// See [`LayerType::forward`].
            pub fn forward<O: Ops>(
                &self,
                ops: &mut O,
                p: &Params<'_, O::T>,
                x: &O::T,
            ) -> Result<O::T, O::Error> {
                match self {
                    $(Layer::$ty(l) => l.forward(ops, p, x),)*
                }
            }

            /// See [`LayerType::mask`].
            pub fn mask(&self) -> Option<&str> {
                match self {
                    $(Layer::$ty(l) => l.mask(),)*
                }
            }

            /// See [`LayerType::forward_masked`].
            pub fn forward_masked<O: Ops>(
                &self,
                ops: &mut O,
                p: &Params<'_, O::T>,
                x: &O::T,
                mask: &O::T,
            ) -> Result<O::T, O::Error> {
                match self {
                    $(Layer::$ty(l) => l.forward_masked(ops, p, x, mask),)*
                }
            }

            fn settings(&self) -> Result<serde_json::Value, serde_json::Error> {
                match self {
                    $(Layer::$ty(l) => serde_json::to_value(l),)*
                }
            }
        }

        /// The position of each type in [`LAYERS`].
        #[derive(Clone, Copy)]
        #[allow(dead_code)] // only `as usize` reads the variants
        enum Kind {
            $($ty,)*
        }
    };
}

layers! {
    linear: Linear;
    conv: Conv1d, Conv2d;
    pool: MaxPool, AvgPool, GlobalAvgPool, AdaptiveAvgPool;
    reshape: Flatten, Reshape;
    activation: Identity, Relu, LeakyRelu, Gelu, Silu, Tanh, Sigmoid, Softmax, LogSoftmax;
    dropout: Dropout;
    norm: BatchNorm, LayerNorm, GroupNorm;
    embedding: Embedding;
    sequence: PositionalEmbedding, SequencePool;
    rnn: Lstm, Gru;
    attention: MultiHeadAttention, TransformerEncoder;
}

/// `{"kind": "<name>", <settings>…}`: the form the cache key hashes (and `diff_model`
/// explains).
impl Serialize for Layer {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = self.settings().map_err(serde::ser::Error::custom)?;
        match &mut value {
            serde_json::Value::Object(map) => {
                map.insert("kind".into(), self.name().into());
            }
            _ => return Err(serde::ser::Error::custom("layer settings are a struct")),
        }
        value.serialize(serializer)
    }
}

/// The layer schema named `name`.
pub fn layer(name: &str) -> Option<&'static Section> {
    LAYERS.iter().copied().find(|l| l.name == name)
}

/// Window output size along one dimension (convolution, pooling):
/// `floor((size + 2·padding − dilation·(kernel − 1) − 1) / stride) + 1`.
pub(crate) fn window_out(size: i64, kernel: i64, stride: i64, padding: i64, dilation: i64) -> i64 {
    (size + 2 * padding - dilation * (kernel - 1) - 1).div_euclid(stride) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_has_a_distinct_name_and_its_position_in_layers() {
        let mut names: Vec<&str> = LAYERS.iter().map(|s| s.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "two layers share a name");
        let relu = Layer::Relu(Relu {});
        assert_eq!(relu.name(), "relu");
        let bn = Layer::GroupNorm(GroupNorm {
            groups: 2,
            eps: 1e-5,
            affine: true,
        });
        assert_eq!(bn.name(), "group-norm");
    }

    #[test]
    fn a_layer_serialises_as_its_kind_and_settings() {
        let l = Layer::Linear(Linear {
            out: 10,
            bias: true,
        });
        assert_eq!(
            serde_json::to_string(&l).unwrap(),
            r#"{"bias":true,"kind":"linear","out":10}"#
        );
        assert_eq!(
            serde_json::to_string(&Layer::Flatten(Flatten {})).unwrap(),
            r#"{"kind":"flatten"}"#
        );
    }
}
