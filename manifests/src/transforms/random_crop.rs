//! `random-crop`: a window at a random place, after zero padding (torchvision's
//! `RandomCrop(size, padding)`); the centred window when not training.

use super::{centred, one_or_two, size_of, Pixels, Size, TransformType, Uniform, MAX_SIDE};
use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::{int, key, required, section, Section, Ty, Val};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RandomCrop {
    /// One side (a square) or height and width.
    pub size: Vec<i64>,
    /// Zero pixels added on every side first.
    pub padding: i64,
}

impl RandomCrop {
    fn padded(&self, (h, w): Size) -> Size {
        let p = 2 * self.padding as u32;
        (h + p, w + p)
    }
}

impl TransformType for RandomCrop {
    const SCHEMA: Section = section(
        "random-crop",
        &["size"],
        &[
            required(
                "size",
                Ty::Ints { max: MAX_SIDE },
                "One number (a square) or two (height, width).",
            ),
            key(
                "padding",
                int(0, MAX_SIDE),
                Some(Val::Int(0)),
                "Zero pixels added on every side before cropping.",
            ),
        ],
        "Training: pads the image with `padding` zero pixels on every side, then crops a window of `size` at a random place, drawn anew for every sample and epoch (torchvision's `RandomCrop`). Evaluation and prediction: the image's centred window of `size` (torchvision's `CenterCrop`).",
    );

    fn lower(f: &Fields) -> Self {
        RandomCrop {
            size: f.ints("size"),
            padding: f.int("padding"),
        }
    }

    fn size(&self, x: Option<Size>) -> Result<Option<Size>, ShapeError> {
        one_or_two("random-crop", &self.size)?;
        let (ch, cw) = size_of(&self.size);
        if let Some(x) = x {
            let (h, w) = self.padded(x);
            if ch > h || cw > w {
                return Err(ShapeError::new(
                    format!(
                        "`random-crop` takes {ch}×{cw} out of an image of {}×{} ({h}×{w} padded)",
                        x.0, x.1
                    ),
                    "crop a smaller window, pad more (`padding`), or `resize` first",
                ));
            }
        }
        Ok(Some((ch, cw)))
    }

    fn random(&self) -> bool {
        true
    }

    fn apply<P: Pixels>(&self, image: P, rng: Option<&mut dyn Uniform>) -> P {
        let (ch, cw) = size_of(&self.size);
        let (h, w) = self.padded(image.size());
        let p = self.padding;
        // Corners in the image's coordinates: drawn in the padded image's while training;
        // the image's own centred window otherwise (torchvision's `CenterCrop`, which an
        // evaluation transform would use), whatever the padding.
        let (top, left) = match rng {
            Some(rng) => (
                rng.below(h - ch + 1) as i64 - p,
                rng.below(w - cw + 1) as i64 - p,
            ),
            None => centred(image.size(), (ch, cw)),
        };
        if (top, left) == (0, 0) && image.size() == (ch, cw) {
            return image;
        }
        image.crop(top, left, ch, cw)
    }
}
