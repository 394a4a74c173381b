//! `dropout`: zeroes elements at random while training (`nn.Dropout`).

use super::{LayerType, Ops, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{key, section, Section, Val, PROBABILITY_BELOW_ONE};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropout {
    pub p: f64,
}

impl LayerType for Dropout {
    const SCHEMA: Section = section(
        "dropout",
        &["p"],
        &[key(
            "p",
            PROBABILITY_BELOW_ONE,
            Some(Val::Float(0.5)),
            "Probability of zeroing an element while training.",
        )],
        "Randomly zeroes elements while training, scaling the others by 1/(1-p); off in eval and prediction.",
    );

    fn lower(f: &Fields) -> Self {
        Dropout { p: f.float("p") }
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
        ops.dropout(x, self.p)
    }
}
