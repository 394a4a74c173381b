//! Attention over (length, features) sequences: `multi-head-attention` (self-attention,
//! `nn.MultiheadAttention` with query = key = value) and `transformer-encoder` (a stack
//! of `nn.TransformerEncoderLayer`s, batch first, post- or pre-norm).

use super::{show_shape, Init, LayerType, Ops, Param, Params, Shape, ShapeError, Unary, MASK};
use crate::reader::Fields;
use crate::schema::{int, key, required, section, Section, Ty, Val, MAX_FEATURES, PROBABILITY_BELOW_ONE};
use serde::Serialize;

/// The most heads, and the most layers of one encoder.
const MAX_HEADS: i64 = 1024;
const MAX_LAYERS: i64 = 256;

/// (length, width) of a sequence input, with `heads` dividing the width.
fn width(name: &str, x: &[i64], heads: i64) -> Result<i64, ShapeError> {
    let [_, width] = x[..] else {
        return Err(ShapeError::new(
            format!("`{name}` needs (length, features) inputs, but gets {}", show_shape(x)),
            "put an `embedding` (and a `positional-embedding`) before it",
        ));
    };
    if width % heads != 0 {
        return Err(ShapeError::new(
            format!("`{name}` has {heads} heads, which do not divide its {width} features"),
            format!("choose a number of heads that divides {width}, or change the width"),
        ));
    }
    Ok(width)
}

/// `nn.MultiheadAttention`'s tensors for width `d`, named under `prefix`.
fn attention_params(prefix: &str, d: i64) -> Vec<Param> {
    let xavier = (6.0 / (d + 3 * d) as f64).sqrt();
    vec![
        Param::weight(format!("{prefix}in_proj_weight"), vec![3 * d, d], Init::Uniform { bound: xavier }),
        Param::weight(format!("{prefix}in_proj_bias"), vec![3 * d], Init::Const(0.0)),
        Param::weight(
            format!("{prefix}out_proj.weight"),
            vec![d, d],
            Init::Uniform {
                bound: 1.0 / (d as f64).sqrt(),
            },
        ),
        Param::weight(format!("{prefix}out_proj.bias"), vec![d], Init::Const(0.0)),
    ]
}

/// Self-attention of the batch `x` (batch, length, d) with the tensors under `prefix`;
/// no step attends to a padding step of `mask` (batch, length).
fn self_attention<O: Ops>(
    ops: &mut O,
    p: &Params<'_, O::T>,
    prefix: &str,
    x: &O::T,
    heads: i64,
    dropout: f64,
    mask: Option<&O::T>,
) -> Result<O::T, O::Error> {
    let get = |name: &str| p.get(&format!("{prefix}{name}"));
    let (length, d) = (ops.size(x, 1), ops.size(x, 2));
    let qkv = ops.linear(x, get("in_proj_weight"), Some(get("in_proj_bias")))?;
    let mut parts = Vec::with_capacity(3);
    for i in 0..3 {
        let part = ops.narrow(&qkv, 2, i * d, d)?;
        let split = ops.reshape(&part, &[-1, length, heads, d / heads])?;
        parts.push(ops.permute(&split, &[0, 2, 1, 3])?);
    }
    let attended = ops.attention(&parts[0], &parts[1], &parts[2], dropout, mask)?;
    let joined = ops.permute(&attended, &[0, 2, 1, 3])?;
    let joined = ops.reshape(&joined, &[-1, length, d])?;
    ops.linear(&joined, get("out_proj.weight"), Some(get("out_proj.bias")))
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MultiHeadAttention {
    pub heads: i64,
    pub dropout: f64,
    /// The model input marking padding (`key_padding_mask`, inverted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
}

impl LayerType for MultiHeadAttention {
    const SCHEMA: Section = section(
        "multi-head-attention",
        &["heads"],
        &[
            required("heads", int(1, MAX_HEADS), "Attention heads; they must divide the features."),
            key(
                "dropout",
                PROBABILITY_BELOW_ONE,
                Some(Val::Float(0.0)),
                "Dropout on the attention weights while training.",
            ),
            MASK,
        ],
        "Self-attention over (length, features) inputs (`nn.MultiheadAttention(features, heads, batch_first=True)` with query, key and value the input): the same shape out. Every step attends to every step, or with `mask=\"mask\"` to every real one (PyTorch's `key_padding_mask` is `mask == 0`).",
    );

    fn lower(f: &Fields) -> Self {
        MultiHeadAttention {
            heads: f.int("heads"),
            dropout: f.float("dropout"),
            mask: f.opt_text("mask"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        width("multi-head-attention", x, self.heads)?;
        Ok(x.to_vec())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        attention_params("", *x.last().unwrap_or(&1))
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        self_attention(ops, p, "", x, self.heads, self.dropout, None)
    }

    fn mask(&self) -> Option<&str> {
        self.mask.as_deref()
    }

    fn forward_masked<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
        mask: &O::T,
    ) -> Result<O::T, O::Error> {
        self_attention(ops, p, "", x, self.heads, self.dropout, Some(mask))
    }
}

choice! {
    /// Where a transformer layer normalises: after each residual sum (the original
    /// transformer, PyTorch's default) or before each sublayer.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum NormPlace {
        Post = "post",
        Pre = "pre",
    }
}

choice! {
    /// The activation of a transformer layer's feed-forward block.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum FeedForwardActivation {
        Relu = "relu",
        Gelu = "gelu",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransformerEncoder {
    pub layers: i64,
    pub heads: i64,
    /// Features of the feed-forward block; `None`: 4 × the width.
    pub feed_forward: Option<i64>,
    pub dropout: f64,
    pub norm: NormPlace,
    pub activation: FeedForwardActivation,
    pub eps: f64,
    /// The model input marking padding (`src_key_padding_mask`, inverted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
}

impl LayerType for TransformerEncoder {
    const SCHEMA: Section = section(
        "transformer-encoder",
        &["layers"],
        &[
            key("layers", int(1, MAX_LAYERS), Some(Val::Int(1)), "Encoder layers stacked."),
            required("heads", int(1, MAX_HEADS), "Attention heads; they must divide the features."),
            key(
                "feed-forward",
                int(1, MAX_FEATURES),
                None,
                "Features of each layer's feed-forward block (default: 4 × the input's features).",
            ),
            key(
                "dropout",
                PROBABILITY_BELOW_ONE,
                Some(Val::Float(0.1)),
                "Dropout on the attention weights, the sublayers' outputs and inside the feed-forward block, while training.",
            ),
            key(
                "norm",
                Ty::Choice(NormPlace::NAMES),
                Some(Val::Text(NormPlace::Post.as_str())),
                "`post`: layer-norm after each residual sum (PyTorch's default); `pre`: before each sublayer (`norm_first=True`), steadier for deep stacks.",
            ),
            key(
                "activation",
                Ty::Choice(FeedForwardActivation::NAMES),
                Some(Val::Text(FeedForwardActivation::Relu.as_str())),
                "The feed-forward block's activation.",
            ),
            key(
                "eps",
                crate::schema::POSITIVE,
                Some(Val::Float(1e-5)),
                "The layer-norms' epsilon.",
            ),
            MASK,
        ],
        "A stack of transformer encoder layers over (length, features) inputs (`nn.TransformerEncoder(nn.TransformerEncoderLayer(features, heads, feed_forward, dropout, batch_first=True), layers)`): self-attention and a feed-forward block, each around a residual sum with layer-norm. The same shape out. With `mask=\"mask\"` no step attends to padding (PyTorch's `src_key_padding_mask` is `mask == 0`); padding steps still get outputs, as in PyTorch's slow path.",
    );

    fn lower(f: &Fields) -> Self {
        TransformerEncoder {
            layers: f.int("layers"),
            heads: f.int("heads"),
            feed_forward: f.opt_int("feed-forward"),
            dropout: f.float("dropout"),
            // Not reached: the reader keeps the defaults for any other value.
            norm: NormPlace::parse(&f.text("norm")).unwrap_or(NormPlace::Post),
            activation: FeedForwardActivation::parse(&f.text("activation"))
                .unwrap_or(FeedForwardActivation::Relu),
            eps: f.float("eps"),
            mask: f.opt_text("mask"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        width("transformer-encoder", x, self.heads)?;
        Ok(x.to_vec())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        let d = *x.last().unwrap_or(&1);
        let ff = self.feed_forward(d);
        let linear = |name: String, out: i64, fan_in: i64| {
            let bound = 1.0 / (fan_in as f64).sqrt();
            [
                Param::weight(format!("{name}.weight"), vec![out, fan_in], Init::Uniform { bound }),
                Param::weight(format!("{name}.bias"), vec![out], Init::Uniform { bound }),
            ]
        };
        let mut p = Vec::new();
        for i in 0..self.layers {
            let at = format!("layers.{i}.");
            p.extend(attention_params(&format!("{at}self_attn."), d));
            p.extend(linear(format!("{at}linear1"), ff, d));
            p.extend(linear(format!("{at}linear2"), d, ff));
            for norm in ["norm1", "norm2"] {
                p.push(Param::weight(format!("{at}{norm}.weight"), vec![d], Init::Const(1.0)));
                p.push(Param::weight(format!("{at}{norm}.bias"), vec![d], Init::Const(0.0)));
            }
        }
        p
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        self.encode(ops, p, x, None)
    }

    fn mask(&self) -> Option<&str> {
        self.mask.as_deref()
    }

    fn forward_masked<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
        mask: &O::T,
    ) -> Result<O::T, O::Error> {
        self.encode(ops, p, x, Some(mask))
    }
}

impl TransformerEncoder {
    fn feed_forward(&self, d: i64) -> i64 {
        self.feed_forward.unwrap_or(4 * d)
    }

    /// The stack over `x`, no step attending to a padding step of `mask`.
    fn encode<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
        mask: Option<&O::T>,
    ) -> Result<O::T, O::Error> {
        let d = ops.size(x, 2);
        let mut x = ops.identity(x)?;
        for i in 0..self.layers {
            let at = format!("layers.{i}.");
            let get = |name: &str| p.get(&format!("{at}{name}"));
            let norm = |ops: &mut O, x: &O::T, which: &str| {
                ops.layer_norm(
                    x,
                    &[d],
                    Some(get(&format!("{which}.weight"))),
                    Some(get(&format!("{which}.bias"))),
                    self.eps,
                )
            };
            let attend = |ops: &mut O, x: &O::T| -> Result<O::T, O::Error> {
                let a = self_attention(ops, p, &format!("{at}self_attn."), x, self.heads, self.dropout, mask)?;
                ops.dropout(&a, self.dropout)
            };
            let feed = |ops: &mut O, x: &O::T| -> Result<O::T, O::Error> {
                let h = ops.linear(x, get("linear1.weight"), Some(get("linear1.bias")))?;
                let h = ops.unary(
                    &h,
                    match self.activation {
                        FeedForwardActivation::Relu => Unary::Relu,
                        FeedForwardActivation::Gelu => Unary::Gelu,
                    },
                )?;
                let h = ops.dropout(&h, self.dropout)?;
                let h = ops.linear(&h, get("linear2.weight"), Some(get("linear2.bias")))?;
                ops.dropout(&h, self.dropout)
            };
            x = match self.norm {
                NormPlace::Post => {
                    let a = attend(ops, &x)?;
                    let sum = ops.add(&x, &a)?;
                    let x1 = norm(ops, &sum, "norm1")?;
                    let f = feed(ops, &x1)?;
                    let sum = ops.add(&x1, &f)?;
                    norm(ops, &sum, "norm2")?
                }
                NormPlace::Pre => {
                    let n = norm(ops, &x, "norm1")?;
                    let a = attend(ops, &n)?;
                    let x1 = ops.add(&x, &a)?;
                    let n = norm(ops, &x1, "norm2")?;
                    let f = feed(ops, &n)?;
                    ops.add(&x1, &f)?
                }
            };
        }
        Ok(x)
    }
}
