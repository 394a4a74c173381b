//! `linear`: a fully connected layer (`torch.nn.Linear`).

use super::{Init, LayerType, Ops, Param, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{int, required, section, Section, BIAS, MAX_FEATURES};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Linear {
    pub out: i64,
    pub bias: bool,
}

impl LayerType for Linear {
    const SCHEMA: Section = section(
        "linear",
        &["out"],
        &[
            required("out", int(1, MAX_FEATURES), "Output features."),
            BIAS,
        ],
        "Fully connected layer over the last dimension (`nn.Linear`); input features are inferred.",
    );

    fn lower(f: &Fields) -> Self {
        Linear {
            out: f.int("out"),
            bias: f.bool("bias"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        let Some((_, rest)) = x.split_last() else {
            return Err(ShapeError::new(
                "`linear` needs at least one feature dimension",
                "add `reshape` before it",
            ));
        };
        Ok(rest.iter().copied().chain([self.out]).collect())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        let fan_in = *x.last().unwrap_or(&1);
        let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
        let mut p = vec![Param::weight(
            "weight",
            vec![self.out, fan_in],
            Init::Uniform { bound },
        )];
        if self.bias {
            p.push(Param::weight(
                "bias",
                vec![self.out],
                Init::Uniform { bound },
            ));
        }
        p
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.linear(x, p.get("weight"), p.opt("bias"))
    }
}
