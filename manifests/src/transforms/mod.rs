//! The image transforms a `data.images` block may hold: one type per transform, one file
//! each, every type registered once in [`transforms!`] below — the way `layers/` holds
//! the model's layers, and torchvision's `transforms.v2` one class per transform.
//!
//! A transform type owns everything about itself:
//!
//! - its **schema** entry ([`TransformType::SCHEMA`]: name, keys, docs, defaults), which
//!   drives reading the manifest, `pipeline explain data.images.<name>` and "did you mean";
//! - its typed settings (serialised into the cache key, defaults applied);
//! - its **size rule** ([`TransformType::size`]), which `pipeline check` runs without
//!   reading an image when the sizes are fixed by the transforms;
//! - what it does to one image ([`TransformType::apply`]), written against [`Pixels`],
//!   which `pipeline_core::image` implements; `random` transforms draw their parameters
//!   from a [`Uniform`] while training, and use their deterministic form (or none) for
//!   evaluation and prediction.
//!
//! Images stay 8-bit until the end: `normalize`, the last transform when present, says
//! how 8-bit pixels become the model's floats (else `x / 255`, torchvision's `ToTensor`).

mod center_crop;
mod flip;
mod normalize;
mod random_crop;
mod random_resized_crop;
mod resize;

use crate::layers::ShapeError;
use crate::reader::Fields;
use crate::schema::Section;
use serde::Serialize;

/// An image's size: `(height, width)` in pixels.
pub type Size = (u32, u32);

/// The largest side an image may have after a transform (2^16: beyond any real image).
pub const MAX_SIDE: i64 = 65_536;

/// A box of an image in pixels, possibly fractional (a random crop's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Area {
    pub top: f64,
    pub left: f64,
    pub height: f64,
    pub width: f64,
}

impl Area {
    /// The whole of an image of `size`.
    pub fn whole((h, w): Size) -> Area {
        Area {
            top: 0.0,
            left: 0.0,
            height: h as f64,
            width: w as f64,
        }
    }
}

/// The image operations transforms are written in; `pipeline_core::image::Image`
/// implements them (8-bit pixels, channels interleaved).
pub trait Pixels: Sized {
    fn size(&self) -> Size;

    /// The `h`×`w` window whose top-left corner is at (`top`, `left`); either may be
    /// negative and the window may run past the image: those pixels are 0 (torchvision's
    /// zero padding).
    fn crop(&self, top: i64, left: i64, h: u32, w: u32) -> Self;

    /// `area` (within the image) resampled to `h`×`w`: bilinear, antialiased when
    /// shrinking (PIL's `BILINEAR`, torchvision's default).
    fn resize(&self, area: Area, h: u32, w: u32) -> Self;

    /// Mirrored left to right.
    fn flip_horizontal(&self) -> Self;
}

/// Uniform random numbers in `[0, 1)`: a sample's generator for one epoch.
pub trait Uniform {
    fn uniform(&mut self) -> f64;

    /// A uniform integer in `0..n` (`n` ≥ 1), as `torch.randint(0, n)` draws it.
    fn below(&mut self, n: u32) -> u32 {
        ((self.uniform() * n as f64) as u32).min(n.saturating_sub(1))
    }
}

/// What every transform type provides; see the module docs.
pub trait TransformType: Sized {
    const SCHEMA: Section;

    /// The settings from the node's checked fields (defaults already applied).
    fn lower(f: &Fields) -> Self;

    /// The output size for an input of size `x` (`None`: known only once an image is
    /// read), or why the transform cannot take it. The same in training and evaluation.
    fn size(&self, x: Option<Size>) -> Result<Option<Size>, ShapeError>;

    /// Whether it draws random parameters while training (augmentation).
    fn random(&self) -> bool {
        false
    }

    /// The transform of one image; `rng` is the sample's generator while training, `None`
    /// for evaluation and prediction. The image's size has been checked by [`Self::size`].
    fn apply<P: Pixels>(&self, image: P, rng: Option<&mut dyn Uniform>) -> P;

    /// `normalize`'s per-channel mean and standard deviation (of pixels in `[0, 1]`).
    fn normalization(&self) -> Option<(&[f64], &[f64])> {
        None
    }
}

/// The registry: one line a file (`file: Type, Type;`), each type a variant of
/// [`Transform`] named after it. It generates the enum, its dispatch (exhaustive
/// matches) and [`TRANSFORMS`], the schema of each.
macro_rules! transforms {
    ($($file:ident: $($ty:ident),+;)*) => {
        $(pub use $file::{$($ty),+};)*

        transforms!(@types $($($ty)+)*);
    };
    (@types $($ty:ident)*) => {
        /// One image transform, with its settings (defaults applied).
        #[derive(Debug, Clone, PartialEq)]
        pub enum Transform {
            $($ty($ty),)*
        }

        /// Every transform's schema, in the order `pipeline explain data.images` lists them.
        pub static TRANSFORMS: &[&Section] = &[$(&<$ty as TransformType>::SCHEMA,)*];

        impl Transform {
            /// The transform's name as written in a manifest.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Transform::$ty(_) => <$ty as TransformType>::SCHEMA.name,)*
                }
            }

            /// The transform named `name` read from `f` (`None`: no such transform).
            pub(crate) fn lower(name: &str, f: &Fields) -> Option<Transform> {
                $(if name == <$ty as TransformType>::SCHEMA.name {
                    return Some(Transform::$ty(<$ty as TransformType>::lower(f)));
                })*
                None
            }

            /// See [`TransformType::size`].
            pub fn size(&self, x: Option<Size>) -> Result<Option<Size>, ShapeError> {
                match self {
                    $(Transform::$ty(t) => t.size(x),)*
                }
            }

            /// See [`TransformType::random`].
            pub fn random(&self) -> bool {
                match self {
                    $(Transform::$ty(t) => t.random(),)*
                }
            }

            /// See [`TransformType::apply`].
            pub fn apply<P: Pixels>(&self, image: P, rng: Option<&mut dyn Uniform>) -> P {
                match self {
                    $(Transform::$ty(t) => t.apply(image, rng),)*
                }
            }

            /// See [`TransformType::normalization`].
            pub fn normalization(&self) -> Option<(&[f64], &[f64])> {
                match self {
                    $(Transform::$ty(t) => t.normalization(),)*
                }
            }

            fn settings(&self) -> Result<serde_json::Value, serde_json::Error> {
                match self {
                    $(Transform::$ty(t) => serde_json::to_value(t),)*
                }
            }
        }
    };
}

transforms! {
    resize: Resize;
    center_crop: CenterCrop;
    random_crop: RandomCrop;
    random_resized_crop: RandomResizedCrop;
    flip: HorizontalFlip;
    normalize: Normalize;
}

/// `{"kind": "<name>", <settings>…}`: the form the cache key hashes.
impl Serialize for Transform {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = self.settings().map_err(serde::ser::Error::custom)?;
        match &mut value {
            serde_json::Value::Object(map) => {
                map.insert("kind".into(), self.name().into());
            }
            _ => return Err(serde::ser::Error::custom("transform settings are a struct")),
        }
        value.serialize(serializer)
    }
}

/// The transform schema named `name`.
pub fn transform(name: &str) -> Option<&'static Section> {
    TRANSFORMS.iter().copied().find(|t| t.name == name)
}

/// `(h, w)` from a size key written as one number (a square) or two (height, width).
pub(crate) fn size_of(values: &[i64]) -> Size {
    match values {
        [] => (0, 0),
        [s] => (*s as u32, *s as u32),
        [h, w, ..] => (*h as u32, *w as u32),
    }
}

/// The size key's values are one side or two: a third is refused.
pub(crate) fn one_or_two(name: &str, values: &[i64]) -> Result<(), ShapeError> {
    if values.len() > 2 {
        return Err(ShapeError::new(
            format!(
                "`{name}` takes one size (a square) or two (height, width), not {}",
                values.len()
            ),
            format!("for example `{name} 32` or `{name} 32 48`"),
        ));
    }
    Ok(())
}

/// `round(x)` as Python rounds: halves to the even neighbour (torchvision's crop offsets).
pub(crate) fn round_half_even(x: f64) -> i64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && (r as i64) % 2 != 0 {
        (r - x.signum()) as i64
    } else {
        r as i64
    }
}

/// The top-left corner of a centred `crop` of `size` (negative: the crop is larger and
/// the image is padded), as torchvision's `center_crop` places it.
pub(crate) fn centred((h, w): Size, (ch, cw): Size) -> (i64, i64) {
    let offset = |side: u32, crop: u32| {
        if crop > side {
            -(((crop - side) / 2) as i64)
        } else {
            round_half_even((side - crop) as f64 / 2.0)
        }
    };
    (offset(h, ch), offset(w, cw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transform_has_a_distinct_name() {
        let mut names: Vec<&str> = TRANSFORMS.iter().map(|s| s.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "two transforms share a name");
        assert!(transform("random-crop").is_some());
    }

    #[test]
    fn halves_round_to_even_as_python_does() {
        let got: Vec<i64> = [0.5, 1.5, 2.5, 3.0, 3.4, 3.6]
            .iter()
            .map(|&x| round_half_even(x))
            .collect();
        assert_eq!(got, [0, 2, 2, 3, 3, 4]);
    }

    #[test]
    fn a_centred_crop_sits_where_torchvision_puts_it() {
        // torchvision: crop_top = int(round((h - ch) / 2.0)); larger crops pad (ch - h) // 2 on top.
        assert_eq!(centred((10, 9), (8, 8)), (1, 0));
        assert_eq!(centred((11, 8), (8, 8)), (2, 0)); // round(1.5) = 2
        assert_eq!(centred((13, 8), (8, 8)), (2, 0)); // round(2.5) = 2
        assert_eq!(centred((5, 8), (8, 8)), (-1, 0)); // padded 1 above, 2 below
    }
}
