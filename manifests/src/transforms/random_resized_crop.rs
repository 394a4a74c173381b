//! `random-resized-crop`: a random part of an image, scaled to a fixed size
//! (torchvision's `RandomResizedCrop`); when not training, the shorter side scaled to the
//! size and the middle cropped.

use super::{
    centred, one_or_two, round_half_even, size_of, Area, Pixels, Size, TransformType, Uniform,
    MAX_SIDE,
};
use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::{key, required, section, Bound, Section, Ty, Val, FRACTION};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RandomResizedCrop {
    /// One side (a square) or height and width.
    pub size: Vec<i64>,
    /// The part of the image's area a crop covers, drawn uniformly in this range.
    pub min_scale: f64,
    pub max_scale: f64,
    /// The crop's width / height, drawn log-uniformly in this range.
    pub min_ratio: f64,
    pub max_ratio: f64,
}

const RATIO: Ty = Ty::Float {
    min: Bound::Exclusive(0.0),
    max: Bound::Inclusive(1000.0),
};

impl RandomResizedCrop {
    /// The box torchvision's `RandomResizedCrop.get_params` draws: ten tries at an area and
    /// a ratio that fit, else the centred box of the nearest allowed ratio.
    fn draw(&self, (height, width): Size, rng: &mut dyn Uniform) -> Area {
        let area = height as f64 * width as f64;
        let (lo, hi) = (self.min_ratio.ln(), self.max_ratio.ln());
        for _ in 0..10 {
            let target =
                area * (self.min_scale + (self.max_scale - self.min_scale) * rng.uniform());
            let ratio = (lo + (hi - lo) * rng.uniform()).exp();
            let w = round_half_even((target * ratio).sqrt());
            let h = round_half_even((target / ratio).sqrt());
            if 0 < w && w <= width as i64 && 0 < h && h <= height as i64 {
                let top = rng.below((height as i64 - h + 1) as u32);
                let left = rng.below((width as i64 - w + 1) as u32);
                return Area {
                    top: top as f64,
                    left: left as f64,
                    height: h as f64,
                    width: w as f64,
                };
            }
        }
        let in_ratio = width as f64 / height as f64;
        let (h, w) = if in_ratio < self.min_ratio {
            (round_half_even(width as f64 / self.min_ratio), width as i64)
        } else if in_ratio > self.max_ratio {
            (
                height as i64,
                round_half_even(height as f64 * self.max_ratio),
            )
        } else {
            (height as i64, width as i64)
        };
        // At least a pixel (an extreme ratio rounds a side to 0), at most the image.
        let (h, w) = (h.clamp(1, height as i64), w.clamp(1, width as i64));
        Area {
            top: ((height as i64 - h) / 2) as f64,
            left: ((width as i64 - w) / 2) as f64,
            height: h as f64,
            width: w as f64,
        }
    }
}

impl TransformType for RandomResizedCrop {
    const SCHEMA: Section = section(
        "random-resized-crop",
        &["size"],
        &[
            required(
                "size",
                Ty::Ints { max: MAX_SIDE },
                "The output: one number (a square) or two (height, width).",
            ),
            key(
                "min-scale",
                FRACTION,
                Some(Val::Float(0.08)),
                "The smallest part of the image's area a crop covers.",
            ),
            key(
                "max-scale",
                FRACTION,
                Some(Val::Float(1.0)),
                "The largest part of the image's area a crop covers.",
            ),
            key(
                "min-ratio",
                RATIO,
                Some(Val::Float(0.75)),
                "The narrowest crop, as width / height.",
            ),
            key(
                "max-ratio",
                RATIO,
                Some(Val::Float(4.0 / 3.0)),
                "The widest crop, as width / height.",
            ),
        ],
        "Training: crops a random part of the image (its area a uniform share of the image's in [min-scale, max-scale], its width / height log-uniform in [min-ratio, max-ratio]) and scales it to `size`, drawn anew for every sample and epoch (torchvision's `RandomResizedCrop`). Evaluation and prediction: the shorter side scaled to the size's larger side, then the middle cropped to `size`.",
    );

    fn lower(f: &Fields) -> Self {
        RandomResizedCrop {
            size: f.ints("size"),
            min_scale: f.float("min-scale"),
            max_scale: f.float("max-scale"),
            min_ratio: f.float("min-ratio"),
            max_ratio: f.float("max-ratio"),
        }
    }

    fn size(&self, _x: Option<Size>) -> Result<Option<Size>, ShapeError> {
        one_or_two("random-resized-crop", &self.size)?;
        if self.min_scale > self.max_scale || self.min_ratio > self.max_ratio {
            return Err(ShapeError::new(
                "`random-resized-crop`: a minimum is above its maximum",
                "write `min-scale` ≤ `max-scale` and `min-ratio` ≤ `max-ratio`",
            ));
        }
        if self.min_scale == 0.0 {
            return Err(ShapeError::new(
                "`random-resized-crop`: `min-scale` 0 would crop nothing",
                "write a `min-scale` above 0, such as 0.08",
            ));
        }
        Ok(Some(size_of(&self.size)))
    }

    fn random(&self) -> bool {
        true
    }

    fn apply<P: Pixels>(&self, image: P, rng: Option<&mut dyn Uniform>) -> P {
        let (h, w) = size_of(&self.size);
        let size = image.size();
        match rng {
            Some(rng) => {
                let area = self.draw(size, rng);
                image.resize(area, h, w)
            }
            None => {
                // The shorter side scaled to the output's larger side, then the middle.
                let side = h.max(w) as u64;
                let (ih, iw) = (size.0 as u64, size.1 as u64);
                // The longer side at most `MAX_SIDE` (a sliver of an image only).
                let long = |l: u64, s: u64| (side * l / s.max(1)).clamp(1, MAX_SIDE as u64) as u32;
                let scaled = if ih <= iw {
                    (side as u32, long(iw, ih))
                } else {
                    (long(ih, iw), side as u32)
                };
                let image = if scaled == size {
                    image
                } else {
                    image.resize(Area::whole(size), scaled.0, scaled.1)
                };
                let (top, left) = centred(scaled, (h, w));
                image.crop(top, left, h, w)
            }
        }
    }
}
