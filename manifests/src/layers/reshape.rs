//! `flatten` and `reshape`: change a sample's shape, never its values.

use super::{show_shape, LayerType, Ops, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{required, section, Section, Ty, MAX_FEATURES};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flatten {}

impl LayerType for Flatten {
    const SCHEMA: Section = section(
        "flatten",
        &[],
        &[],
        "Flattens every dimension but the batch (`nn.Flatten`).",
    );

    fn lower(_: &Fields) -> Self {
        Flatten {}
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        Ok(vec![super::values(x)?])
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.flatten(x)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reshape {
    pub shape: Vec<i64>,
}

impl LayerType for Reshape {
    const SCHEMA: Section = section(
        "reshape",
        &["shape"],
        &[required(
            "shape",
            Ty::Ints { max: MAX_FEATURES },
            "The shape of one sample, e.g. `reshape 1 8 8`.",
        )],
        "Reshapes every sample (the batch dimension is kept).",
    );

    fn lower(f: &Fields) -> Self {
        Reshape {
            shape: f.ints("shape"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        let have = super::values(x)?;
        // Checked: an absurd shape is a diagnostic, not an overflow.
        let want = self
            .shape
            .iter()
            .try_fold(1i64, |acc, &d| acc.checked_mul(d));
        if want != Some(have) {
            let want = want.map_or("too many".to_string(), |w| w.to_string());
            return Err(ShapeError::new(
                format!(
                    "cannot reshape {have} values into {} ({want} values)",
                    show_shape(&self.shape)
                ),
                format!("the product of the new shape must be {have}"),
            ));
        }
        Ok(self.shape.clone())
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let shape: Vec<i64> = std::iter::once(-1)
            .chain(self.shape.iter().copied())
            .collect();
        ops.reshape(x, &shape)
    }
}
