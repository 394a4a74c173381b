//! `normalize`: how 8-bit pixels become the model's floats (torchvision's `ToTensor`
//! then `Normalize(mean, std)`).

use super::{Pixels, Size, TransformType, Uniform};
use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::{key, section, Bound, Section, Ty, Val};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Normalize {
    /// One value for every channel, or one per channel.
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

impl TransformType for Normalize {
    const SCHEMA: Section = section(
        "normalize",
        &[],
        &[
            key(
                "mean",
                Ty::Floats {
                    min: Bound::None,
                    max: Bound::None,
                },
                Some(Val::Float(0.0)),
                "Subtracted from the pixels (scaled to [0, 1]): one number for every channel (`mean=0.5`) or one per channel (`mean 0.485 0.456 0.406` in a block).",
            ),
            key(
                "std",
                Ty::Floats {
                    min: Bound::Exclusive(0.0),
                    max: Bound::None,
                },
                Some(Val::Float(1.0)),
                "What the pixels are then divided by: one number, or one per channel.",
            ),
        ],
        "Turns the 8-bit pixels into floats as `(x / 255 - mean) / std` per channel (torchvision's `ToTensor` then `Normalize`). It comes last; without it the model sees `x / 255`.",
    );

    fn lower(f: &Fields) -> Self {
        Normalize {
            mean: f.floats("mean"),
            std: f.floats("std"),
        }
    }

    fn size(&self, x: Option<Size>) -> Result<Option<Size>, ShapeError> {
        Ok(x)
    }

    fn apply<P: Pixels>(&self, image: P, _rng: Option<&mut dyn Uniform>) -> P {
        image
    }

    fn normalization(&self) -> Option<(&[f64], &[f64])> {
        Some((&self.mean, &self.std))
    }
}
