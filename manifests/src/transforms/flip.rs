//! `horizontal-flip`: mirrors an image at random (torchvision's `RandomHorizontalFlip`).

use super::{Pixels, Size, TransformType, Uniform};
use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::{key, section, Section, Val, FRACTION};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HorizontalFlip {
    pub p: f64,
}

impl TransformType for HorizontalFlip {
    const SCHEMA: Section = section(
        "horizontal-flip",
        &["p"],
        &[key(
            "p",
            FRACTION,
            Some(Val::Float(0.5)),
            "The probability that a sample is mirrored.",
        )],
        "Training: mirrors the image left to right with probability `p`, drawn anew for every sample and epoch (torchvision's `RandomHorizontalFlip`). Evaluation and prediction: never.",
    );

    fn lower(f: &Fields) -> Self {
        HorizontalFlip { p: f.float("p") }
    }

    fn size(&self, x: Option<Size>) -> Result<Option<Size>, ShapeError> {
        Ok(x)
    }

    fn random(&self) -> bool {
        true
    }

    fn apply<P: Pixels>(&self, image: P, rng: Option<&mut dyn Uniform>) -> P {
        let flip = rng.is_some_and(|rng| rng.uniform() < self.p);
        if flip {
            image.flip_horizontal()
        } else {
            image
        }
    }
}
