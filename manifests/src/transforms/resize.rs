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
    /// The size an image of `(h, w)` is scaled to (sides may pass [`MAX_SIDE`]: `size`
    /// refuses those).
    fn target(&self, (h, w): Size) -> (u64, u64) {
        match self.size.as_slice() {
            // torchvision: the longer side is `int(size * long / short)`, truncated.
            [s] => {
                let s = *s as u64;
                let scaled = |long: u32, short: u32| (s * long as u64 / short.max(1) as u64).max(1);
                if h <= w {
                    (s, scaled(w, h))
                } else {
                    (scaled(h, w), s)
                }
            }
            sides => {
                let (h, w) = size_of(sides);
                (h as u64, w as u64)
            }
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
        let Some(x) = x else {
            return Ok(match self.size.as_slice() {
                [_] => None,
                sides => Some(size_of(sides)),
            });
        };
        let (h, w) = self.target(x);
        if h.max(w) > MAX_SIDE as u64 {
            return Err(ShapeError::new(
                format!(
                    "`resize` would make a {}×{} image {h}×{w}, more than {MAX_SIDE} pixels on a side",
                    x.0, x.1
                ),
                "give both sides (`resize 32 32`), or crop first",
            ));
        }
        Ok(Some((h as u32, w as u32)))
    }

    fn apply<P: Pixels>(&self, image: P, _rng: Option<&mut dyn Uniform>) -> P {
        let size = image.size();
        // `size` has refused a target past `MAX_SIDE`.
        let (h, w) = self.target(size);
        let (h, w) = (h as u32, w as u32);
        if (h, w) == size {
            return image;
        }
        image.resize(Area::whole(size), h, w)
    }
}
