//! `center-crop`: the middle of an image (torchvision's `CenterCrop`).

use super::{centred, one_or_two, size_of, Pixels, Size, TransformType, Uniform, MAX_SIDE};
use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::{required, section, Section, Ty};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CenterCrop {
    /// One side (a square) or height and width.
    pub size: Vec<i64>,
}

impl TransformType for CenterCrop {
    const SCHEMA: Section = section(
        "center-crop",
        &["size"],
        &[required(
            "size",
            Ty::Ints { max: MAX_SIDE },
            "One number (a square) or two (height, width).",
        )],
        "Crops the middle of the image to this size; a smaller image is padded with zeros first (torchvision's `CenterCrop`).",
    );

    fn lower(f: &Fields) -> Self {
        CenterCrop {
            size: f.ints("size"),
        }
    }

    fn size(&self, _x: Option<Size>) -> Result<Option<Size>, ShapeError> {
        one_or_two("center-crop", &self.size)?;
        Ok(Some(size_of(&self.size)))
    }

    fn apply<P: Pixels>(&self, image: P, _rng: Option<&mut dyn Uniform>) -> P {
        let crop = size_of(&self.size);
        if image.size() == crop {
            return image;
        }
        let (top, left) = centred(image.size(), crop);
        image.crop(top, left, crop.0, crop.1)
    }
}
