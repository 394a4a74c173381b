//! `embedding`: integer token ids → learned vectors (`nn.Embedding`).

use super::{Init, LayerType, Ops, Param, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{int, required, section, Section, MAX_CHANNELS, MAX_TOKENS};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Embedding {
    pub count: i64,
    pub dim: i64,
}

impl LayerType for Embedding {
    const SCHEMA: Section = section(
        "embedding",
        &["count", "dim"],
        &[
            required(
                "count",
                int(1, MAX_TOKENS),
                "Number of distinct token ids (ids are 0 … count-1).",
            ),
            required(
                "dim",
                int(1, MAX_CHANNELS),
                "Size of each embedding vector.",
            ),
        ],
        "Maps integer token ids to learned vectors (`nn.Embedding`, initialised N(0, 1)): (length) → (length, dim).",
    );

    fn lower(f: &Fields) -> Self {
        Embedding {
            count: f.int("count"),
            dim: f.int("dim"),
        }
    }

    fn infer(&self, x: &[i64], first: bool) -> Result<Shape, ShapeError> {
        if !first {
            return Err(ShapeError::new(
                "`embedding` must be the first layer: it reads token ids from the data",
                "move it to the top of the `model` block",
            ));
        }
        Ok(x.iter().copied().chain([self.dim]).collect())
    }

    fn parameters(&self, _x: &[i64]) -> Vec<Param> {
        vec![Param::weight(
            "weight",
            vec![self.count, self.dim],
            Init::Normal { std: 1.0 },
        )]
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.embedding(x, p.get("weight"))
    }
}
