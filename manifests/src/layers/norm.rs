//! Normalisation: `batch-norm` over features or channels (`nn.BatchNorm1d/2d`),
//! `layer-norm` over the last dimension (`nn.LayerNorm`), `group-norm` over groups of
//! channels (`nn.GroupNorm`). Weights start at 1 and biases at 0, as in `torch.nn`.

use super::{show_shape, Init, LayerType, Ops, Param, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{
    int, key, required, section, Key, Section, Ty, Val, FRACTION, MAX_CHANNELS, POSITIVE,
};
use serde::Serialize;

const EPS: Key = key(
    "eps",
    POSITIVE,
    Some(Val::Float(1e-5)),
    "Added to the variance for stability.",
);

/// `weight` (ones) and `bias` (zeros) of `shape`.
fn affine(shape: Vec<i64>) -> [Param; 2] {
    [
        Param::weight("weight", shape.clone(), Init::Const(1.0)),
        Param::weight("bias", shape, Init::Const(0.0)),
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchNorm {
    pub eps: f64,
    pub momentum: f64,
}

impl LayerType for BatchNorm {
    const SCHEMA: Section = section(
        "batch-norm",
        &[],
        &[
            EPS,
            key(
                "momentum",
                FRACTION,
                Some(Val::Float(0.1)),
                "Update rate of the running statistics.",
            ),
        ],
        "Batch normalisation over features (1-D) or channels (2-D); sizes are inferred. With `accelerator.sync-batch-norm`, over every process's share of the batch.",
    );

    fn lower(f: &Fields) -> Self {
        BatchNorm {
            eps: f.float("eps"),
            momentum: f.float("momentum"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        if x.is_empty() || x.len() > 3 {
            return Err(ShapeError::new(
                format!("`batch-norm` needs (features), (channels, length) or (channels, height, width) inputs, but gets {}", show_shape(x)),
                "use `layer-norm`, or reshape first",
            ));
        }
        Ok(x.to_vec())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        let c = x.first().copied().unwrap_or(1);
        let mut p = affine(vec![c]).to_vec();
        p.push(Param::buffer("running_mean", vec![c], Init::Const(0.0)));
        p.push(Param::buffer("running_var", vec![c], Init::Const(1.0)));
        p.push(Param::counter("num_batches_tracked"));
        p
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.batch_norm(
            x,
            p.opt("weight"),
            p.opt("bias"),
            p.get("running_mean"),
            p.get("running_var"),
            p.get("num_batches_tracked"),
            self.momentum,
            self.eps,
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerNorm {
    pub eps: f64,
}

impl LayerType for LayerNorm {
    const SCHEMA: Section = section(
        "layer-norm",
        &[],
        &[EPS],
        "Layer normalisation over the last dimension (`nn.LayerNorm(features)`).",
    );

    fn lower(f: &Fields) -> Self {
        LayerNorm {
            eps: f.float("eps"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        if x.is_empty() {
            return Err(ShapeError::new(
                "`layer-norm` needs at least one dimension",
                "apply it to a vector",
            ));
        }
        Ok(x.to_vec())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        affine(vec![*x.last().unwrap_or(&1)]).to_vec()
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let w = p.get("weight");
        ops.layer_norm(x, &p.decls[0].shape, Some(w), p.opt("bias"), self.eps)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupNorm {
    pub groups: i64,
    pub eps: f64,
    pub affine: bool,
}

impl LayerType for GroupNorm {
    const SCHEMA: Section = section(
        "group-norm",
        &["groups"],
        &[
            required(
                "groups",
                int(1, MAX_CHANNELS),
                "How many groups the channels are cut into; must divide the channels.",
            ),
            EPS,
            key(
                "affine",
                Ty::Bool,
                Some(Val::Bool(true)),
                "Learn a per-channel weight and bias.",
            ),
        ],
        "Group normalisation over (channels, …) inputs (`nn.GroupNorm`): statistics per sample and group, the same in training and evaluation.",
    );

    fn lower(f: &Fields) -> Self {
        GroupNorm {
            groups: f.int("groups"),
            eps: f.float("eps"),
            affine: f.bool("affine"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        let Some(&c) = x.first() else {
            return Err(ShapeError::new(
                "`group-norm` needs (channels, …) inputs, but gets a scalar",
                "apply it after a convolution",
            ));
        };
        if c % self.groups != 0 {
            return Err(ShapeError::new(
                format!(
                    "`group-norm` groups ({}) must divide its {c} channels",
                    self.groups
                ),
                "choose a divisor of the channels",
            ));
        }
        Ok(x.to_vec())
    }

    fn parameters(&self, x: &[i64]) -> Vec<Param> {
        if !self.affine {
            return Vec::new();
        }
        affine(vec![x.first().copied().unwrap_or(1)]).to_vec()
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        ops.group_norm(x, self.groups, p.opt("weight"), p.opt("bias"), self.eps)
    }
}
