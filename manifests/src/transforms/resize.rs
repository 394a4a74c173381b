//! `resize`: scales an image (torchvision's `Resize`, bilinear and antialiased).

use super::{one_or_two, size_of, Area, Pixels, Size, TransformType, Uniform, MAX_SIDE};
use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::{required, section, Section, Ty};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resize {
    /// One side (the shorter side becomes it, the aspect ratio kept) or height and width.
    pub size: Vec<i64>,
}

impl Resize {
    /// The size an image of `(h, w)` is scaled to.
    fn target(&self, (h, w): Size) -> Size {
        match self.size.as_slice() {
            // torchvision: the longer side is `int(size * long / short)`, truncated.
            [s] => {
                let s = *s as u32;
                let scaled = |long: u32, short: u32| {
                    ((s as u64 * long as u64) / short.max(1) as u64).max(1) as u32
                };
                if h <= w {
                    (s, scaled(w, h))
                } else {
                    (scaled(h, w), s)
                }
            }
            sides => size_of(sides),
        }
    }
}

impl TransformType for Resize {
    const SCHEMA: Section = section(
        "resize",
        &["size"],
        &[required(
            "size",
            Ty::Ints { max: MAX_SIDE },
            "One number: the shorter side becomes it and the aspect ratio is kept (`resize 32`); two: the height and the width (`resize 32 48`).",
        )],
        "Scales the image, bilinear and antialiased (torchvision's `Resize`, PIL's `BILINEAR`).",
    );

    fn lower(f: &Fields) -> Self {
        Resize {
            size: f.ints("size"),
        }
    }

    fn size(&self, x: Option<Size>) -> Result<Option<Size>, ShapeError> {
        one_or_two("resize", &self.size)?;
        Ok(match self.size.as_slice() {
            [_] => x.map(|x| self.target(x)),
            sides => Some(size_of(sides)),
        })
    }

    fn apply<P: Pixels>(&self, image: P, _rng: Option<&mut dyn Uniform>) -> P {
        let size = image.size();
        let (h, w) = self.target(size);
        if (h, w) == size {
            return image;
        }
        image.resize(Area::whole(size), h, w)
    }
}
