//! Resampling of 8-bit images with Pillow's bilinear convolution (the one torchvision's
//! `Resize` uses on PIL images), by `fast_image_resize`. One function, not generic, so
//! that the resampler's generic SIMD code is compiled here once (see Cargo.toml).

use fast_image_resize::images::{TypedImage, TypedImageRef};
use fast_image_resize::pixels::{U8x3, U8};
use fast_image_resize::PixelTrait;
use fast_image_resize::{FilterType, ResizeAlg, ResizeOptions, Resizer};

/// A window of the source image, in pixels (fractions allowed, as Pillow's `box`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
}

/// The pixels of a `width × height` image whose `channels` (1 or 3) are interleaved,
/// resampled from `window` to `out_width × out_height` (each at least 1).
///
/// # Panics
/// If `channels` is neither 1 nor 3, if `pixels` is not `width × height × channels` long,
/// or if `window` does not lie within the image: the caller's invariants, not input.
pub fn resize(
    pixels: &[u8],
    (width, height): (u32, u32),
    channels: u32,
    window: Window,
    (out_width, out_height): (u32, u32),
) -> Vec<u8> {
    assert_eq!(
        pixels.len(),
        width as usize * height as usize * channels as usize,
        "the buffer holds the image"
    );
    match channels {
        1 => resize_typed::<U8>(pixels, (width, height), window, (out_width, out_height)),
        3 => resize_typed::<U8x3>(pixels, (width, height), window, (out_width, out_height)),
        other => panic!("{other} channels: images are decoded to 1 or 3"),
    }
}

fn resize_typed<P: PixelTrait>(
    pixels: &[u8],
    (width, height): (u32, u32),
    window: Window,
    (out_width, out_height): (u32, u32),
) -> Vec<u8> {
    let (out_width, out_height) = (out_width.max(1), out_height.max(1));
    let source =
        TypedImageRef::<P>::from_buffer(width, height, pixels).expect("the buffer holds the image");
    let mut out = vec![0u8; out_width as usize * out_height as usize * P::size()];
    let mut target = TypedImage::<P>::from_buffer(out_width, out_height, &mut out)
        .expect("the buffer holds the image");
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
        .crop(window.left, window.top, window.width, window.height);
    Resizer::new()
        .resize_typed(&source, &mut target, &options)
        .expect("a window within the image");
    out
}
