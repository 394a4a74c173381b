//! `lstm` and `gru`: recurrent networks over (length, features) samples, batch first
//! (`nn.LSTM` / `nn.GRU` with `batch_first=True`), giving every step's output or the
//! final state.

use super::{show_shape, Cell, Init, LayerType, Ops, Param, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{int, key, required, section, Key, Section, Ty, Val, MAX_CHANNELS, PROBABILITY_BELOW_ONE};
use serde::Serialize;

choice! {
    /// What a recurrent layer gives.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum RnnOutput {
        Sequence = "sequence",
        Last = "last",
    }
}

/// The settings both recurrent layers share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recurrent {
    pub hidden: i64,
    pub layers: i64,
    pub bidirectional: bool,
    pub dropout: f64,
    pub output: RnnOutput,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Lstm(pub Recurrent);

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Gru(pub Recurrent);

/// The most stacked layers of one recurrent layer.
const MAX_LAYERS: i64 = 64;

const KEYS: &[Key] = &[
    required("hidden", int(1, MAX_CHANNELS), "Features of the hidden state."),
    key(
        "layers",
        int(1, MAX_LAYERS),
        Some(Val::Int(1)),
        "Recurrent layers stacked (`num_layers`).",
    ),
    key(
        "bidirectional",
        Ty::Bool,
        Some(Val::Bool(false)),
        "Also run over the sequence backwards; outputs join both directions (2 × hidden features).",
    ),
    key(
        "dropout",
        PROBABILITY_BELOW_ONE,
        Some(Val::Float(0.0)),
        "Dropout on the outputs of every layer but the last, while training.",
    ),
    key(
        "output",
        Ty::Choice(RnnOutput::NAMES),
        Some(Val::Text(RnnOutput::Sequence.as_str())),
        "`sequence`: every step's output, (length, features), for layers that read a sequence; `last`: the final hidden state of the last layer (both directions joined), one vector per sample, for a classifier.",
    ),
];

impl Recurrent {
    fn lower(f: &Fields) -> Recurrent {
        Recurrent {
            hidden: f.int("hidden"),
            layers: f.int("layers"),
            bidirectional: f.bool("bidirectional"),
            dropout: f.float("dropout"),
            // Not reached: the reader keeps the default for any other value.
            output: RnnOutput::parse(&f.text("output")).unwrap_or(RnnOutput::Sequence),
        }
    }

    fn directions(&self) -> i64 {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    fn infer(&self, name: &str, x: &[i64]) -> Result<Shape, ShapeError> {
        let [length, _] = x[..] else {
            return Err(ShapeError::new(
                format!("`{name}` needs (length, features) inputs, but gets {}", show_shape(x)),
                "put an `embedding` before it for token ids, or `reshape L F` for a series of L steps of F features",
            ));
        };
        let features = self.directions() * self.hidden;
        Ok(match self.output {
            RnnOutput::Last => vec![features],
            RnnOutput::Sequence => vec![length, features],
        })
    }

    /// PyTorch's parameters, in its order: per layer, per direction, the input-hidden
    /// and hidden-hidden weights, then their biases, all U(−1/√hidden, 1/√hidden).
    fn parameters(&self, gates: i64, x: &[i64]) -> Vec<Param> {
        let bound = 1.0 / (self.hidden as f64).sqrt();
        let init = Init::Uniform { bound };
        let rows = gates * self.hidden;
        let mut p = Vec::new();
        for layer in 0..self.layers {
            let input = if layer == 0 {
                *x.last().unwrap_or(&1)
            } else {
                self.directions() * self.hidden
            };
            for suffix in ["", "_reverse"].iter().take(self.directions() as usize) {
                let name = |what: &str| format!("{what}_l{layer}{suffix}");
                p.push(Param::weight(name("weight_ih"), vec![rows, input], init.clone()));
                p.push(Param::weight(name("weight_hh"), vec![rows, self.hidden], init.clone()));
                p.push(Param::weight(name("bias_ih"), vec![rows], init.clone()));
                p.push(Param::weight(name("bias_hh"), vec![rows], init.clone()));
            }
        }
        p
    }

    fn forward<O: Ops>(
        &self,
        cell: Cell,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let weights: Vec<&O::T> = p.values.iter().collect();
        ops.recurrent(
            cell,
            x,
            &weights,
            self.hidden,
            self.layers,
            self.bidirectional,
            self.dropout,
            self.output == RnnOutput::Last,
        )
    }
}

/// `LayerType` for a recurrent cell with `$gates` gates: the shared settings do the work.
macro_rules! recurrent {
    ($ty:ident, $name:literal, $cell:expr, $gates:literal, $doc:literal) => {
        impl LayerType for $ty {
            const SCHEMA: Section = section($name, &["hidden"], KEYS, $doc);

            fn lower(f: &Fields) -> Self {
                $ty(Recurrent::lower(f))
            }

            fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
                self.0.infer($name, x)
            }

            fn parameters(&self, x: &[i64]) -> Vec<Param> {
                self.0.parameters($gates, x)
            }

            fn forward<O: Ops>(
                &self,
                ops: &mut O,
                p: &Params<'_, O::T>,
                x: &O::T,
            ) -> Result<O::T, O::Error> {
                self.0.forward($cell, ops, p, x)
            }
        }
    };
}

recurrent!(
    Lstm,
    "lstm",
    Cell::Lstm,
    4,
    "Long short-term memory over (length, features) inputs (`nn.LSTM(batch_first=True)`), from zero states."
);
recurrent!(
    Gru,
    "gru",
    Cell::Gru,
    3,
    "Gated recurrent unit over (length, features) inputs (`nn.GRU(batch_first=True)`), from a zero state."
);
