//! Layers over (length, features) sequences: `sequence-pool` (one vector per sequence)
//! and `positional-embedding` (where each step is, added to its features).

use super::{show_shape, Init, LayerType, Ops, Param, Params, Shape, ShapeError, MASK};
use crate::reader::Fields;
use crate::schema::{int, key, section, Section, Ty, Val, MAX_FEATURES};
use serde::Serialize;

fn sequence(name: &str, x: &[i64]) -> Result<(i64, i64), ShapeError> {
    match x[..] {
        [length, features] => Ok((length, features)),
        _ => Err(ShapeError::new(
            format!("`{name}` needs (length, features) inputs, but gets {}", show_shape(x)),
            "put it after an `embedding` or a layer that gives a sequence",
        )),
    }
}

choice! {
    /// What `sequence-pool` keeps of the steps.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum PoolMode {
        Mean = "mean",
        Max = "max",
        First = "first",
        Last = "last",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SequencePool {
    pub mode: PoolMode,
    /// The model input marking padding, which pooling leaves out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
}

impl LayerType for SequencePool {
    const SCHEMA: Section = section(
        "sequence-pool",
        &["mode"],
        &[key(
            "mode",
            Ty::Choice(PoolMode::NAMES),
            Some(Val::Text(PoolMode::Mean.as_str())),
            "The mean or the maximum over the steps, or the first or last step.",
        ), MASK],
        "One vector per sequence: (length, features) → (features). Every step counts, or with `mask=\"mask\"` the real ones only: the mean and maximum over them, the first and last real step (wherever the padding is).",
    );

    fn lower(f: &Fields) -> Self {
        SequencePool {
            // Not reached: the reader keeps the default for any other value.
            mode: PoolMode::parse(&f.text("mode")).unwrap_or(PoolMode::Mean),
            mask: f.opt_text("mask"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        let (_, features) = sequence("sequence-pool", x)?;
        Ok(vec![features])
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        match self.mode {
            PoolMode::Mean => ops.mean(x, &[1]),
            PoolMode::Max => ops.amax(x, &[1]),
            PoolMode::First => ops.select(x, 1, 0),
            PoolMode::Last => ops.select(x, 1, -1),
        }
    }

    fn mask(&self) -> Option<&str> {
        self.mask.as_deref()
    }

    fn forward_masked<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
        mask: &O::T,
    ) -> Result<O::T, O::Error> {
        match self.mode {
            PoolMode::Mean => {
                // The sum over real steps over their count (at least one: the data
                // refuses a sample that is all padding).
                let w = ops.mask_like(mask, x)?;
                let kept = ops.mul(x, &w)?;
                let sum = ops.sum(&kept, &[1])?;
                let count = ops.sum(&w, &[1])?;
                ops.div(&sum, &count)
            }
            PoolMode::Max => {
                let kept = ops.fill_padding(x, mask, f64::NEG_INFINITY)?;
                ops.amax(&kept, &[1])
            }
            PoolMode::First => ops.real_step(x, mask, false),
            PoolMode::Last => ops.real_step(x, mask, true),
        }
    }
}

choice! {
    /// How `positional-embedding` says where a step is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Positions {
        Learned = "learned",
        Sinusoidal = "sinusoidal",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionalEmbedding {
    pub positions: Positions,
    /// The longest sequence (the table's rows); `None`: the input's length.
    pub max_length: Option<i64>,
}

impl LayerType for PositionalEmbedding {
    const SCHEMA: Section = section(
        "positional-embedding",
        &["positions"],
        &[
            key(
                "positions",
                Ty::Choice(Positions::NAMES),
                Some(Val::Text(Positions::Learned.as_str())),
                "`learned`: a trained vector per position (N(0, 1), as `nn.Embedding`); `sinusoidal`: the fixed sines and cosines of \"Attention is all you need\" (a buffer `pe`).",
            ),
            key(
                "max-length",
                int(1, MAX_FEATURES),
                None,
                "Rows of the table, the longest sequence it takes (default: the input's length).",
            ),
        ],
        "Adds where each step is to its features: (length, features) → the same shape.",
    );

    fn lower(f: &Fields) -> Self {
        PositionalEmbedding {
            // Not reached: the reader keeps the default for any other value.
            positions: Positions::parse(&f.text("positions")).unwrap_or(Positions::Learned),
            max_length: f.opt_int("max-length"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        let (length, _) = sequence("positional-embedding", x)?;
        if let Some(max) = self.max_length.filter(|&m| m < length) {
            return Err(ShapeError::new(
                format!("`positional-embedding` has {max} positions, for sequences of {length}"),
                format!("raise `max-length` to {length} or more"),
            ));
        }
        Ok(x.to_vec())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        let (length, features) = match x[..] {
            [l, f] => (l, f),
            _ => (1, 1),
        };
        let rows = self.max_length.unwrap_or(length);
        match self.positions {
            Positions::Learned => vec![Param::weight(
                "weight",
                vec![rows, features],
                Init::Normal { std: 1.0 },
            )],
            Positions::Sinusoidal => vec![Param::buffer(
                "pe",
                vec![rows, features],
                Init::Sinusoidal,
            )],
        }
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let table = p.values.first().expect("one table");
        let rows = p.decls[0].shape[0];
        let length = ops.size(x, 1);
        let used = if length == rows {
            ops.identity(table)?
        } else {
            ops.narrow(table, 0, 0, length)?
        };
        ops.add(x, &used)
    }
}

/// The values of [`super::Init::Sinusoidal`] for a (rows, features) table, row-major:
/// `pe[pos, 2i] = sin(pos / 10000^(2i/d))`, `pe[pos, 2i+1] = cos(…)`.
pub fn sinusoids(rows: i64, features: i64) -> Vec<f64> {
    let mut out = Vec::with_capacity((rows * features).max(0) as usize);
    for pos in 0..rows {
        for i in 0..features {
            let pair = (i / 2 * 2) as f64;
            let angle = pos as f64 / 10000f64.powf(pair / features as f64);
            out.push(if i % 2 == 0 { angle.sin() } else { angle.cos() });
        }
    }
    out
}
