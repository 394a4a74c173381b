//! One image: decoded from PNG or JPEG (the `image` crate), as 8-bit grey or RGB the way
//! PIL's `convert` makes it, and the pixel operations the transforms of
//! `manifests::transforms` are written in (resampling by `pipeline_resample`, whose
//! bilinear convolution is Pillow's). No libtorch: the data loader turns finished images
//! into tensors.

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};
use manifests::transforms::{Area, Pixels, Size};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// An 8-bit image, its channels interleaved (`height × width × channels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub height: u32,
    pub width: u32,
    /// 1 (grey) or 3 (RGB).
    pub channels: u32,
    pub pixels: Vec<u8>,
}

/// The most bytes one image may take decoded (what the `image` crate allows by default):
/// a larger one is refused from its header, before its data is read.
pub const MAX_DECODED_BYTES: u64 = 512 << 20;

/// The formats read, by extension: what a file named so must hold.
fn format_of(path: &Path) -> Option<ImageFormat> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "png" => Some(ImageFormat::Png),
        "jpg" | "jpeg" => Some(ImageFormat::Jpeg),
        _ => None,
    }
}

/// Whether `path` names an image pipeline reads (`.png`, `.jpg`, `.jpeg`, any case).
pub fn is_image(path: &Path) -> bool {
    format_of(path).is_some()
}

/// Extensions of images in formats not read (torchvision's other `IMG_EXTENSIONS`), which a
/// folder must not hold silently unread.
pub fn is_unread_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .is_some_and(|e| ["bmp", "gif", "webp", "tif", "tiff", "ppm", "pgm"].contains(&e.as_str()))
}

fn format_name(format: ImageFormat) -> &'static str {
    match format {
        ImageFormat::Png => "PNG",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::Gif => "GIF",
        ImageFormat::WebP => "WebP",
        ImageFormat::Bmp => "BMP",
        ImageFormat::Tiff => "TIFF",
        _ => "another format",
    }
}

/// The format a file's first bytes say, for the message about a misnamed file.
fn sniffed(bytes: &[u8]) -> Option<ImageFormat> {
    image::guess_format(bytes).ok()
}

impl Image {
    /// Reads the image at `path` as `channels` (1: grey, `L = (19595 R + 38470 G + 7471 B
    /// + 2^15) >> 16` as PIL computes it; 3: RGB, alpha dropped). The file must hold what
    /// its name says: a PNG named `.jpg` is an error, not a guess.
    pub fn read(path: &Path, channels: u32) -> Result<Image, String> {
        let Some(format) = format_of(path) else {
            return Err("only PNG and JPEG images are read (.png, .jpg, .jpeg)".into());
        };
        let file = File::open(path).map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(file);
        let head = reader.fill_buf().map_err(|e| e.to_string())?;
        match sniffed(head) {
            Some(found) if found == format => {}
            Some(found) => {
                return Err(format!(
                    "the file is a {} image, but its name says {}",
                    format_name(found),
                    format_name(format)
                ))
            }
            None if head.is_empty() => return Err("the file is empty".into()),
            None => return Err(format!("not a {} image", format_name(format))),
        }
        // The header first: an image too large is refused before its data is read.
        let decoder = ImageReader::with_format(reader, format)
            .into_decoder()
            .map_err(|e| format!("cannot decode it: {e}"))?;
        let (width, height) = decoder.dimensions();
        let bytes = decoder.total_bytes();
        if bytes > MAX_DECODED_BYTES {
            return Err(format!(
                "the image is {width}×{height} pixels, {} MiB decoded, more than the {} MiB one image may take: make it smaller",
                bytes.div_ceil(1 << 20),
                MAX_DECODED_BYTES >> 20
            ));
        }
        let decoded =
            DynamicImage::from_decoder(decoder).map_err(|e| format!("cannot decode it: {e}"))?;
        Ok(Image::from_decoded(decoded, channels))
    }

    /// The size of the image at `path`, read from its header only.
    pub fn dimensions(path: &Path) -> Option<Size> {
        let reader = ImageReader::open(path).ok()?.with_guessed_format().ok()?;
        let (w, h) = reader.into_dimensions().ok()?;
        Some((h, w))
    }

    fn from_decoded(decoded: DynamicImage, channels: u32) -> Image {
        let (width, height) = (decoded.width(), decoded.height());
        let pixels = match (channels, decoded) {
            (1, DynamicImage::ImageLuma8(grey)) => grey.into_raw(),
            (1, other) => other
                .to_rgb8()
                .pixels()
                .map(|p| {
                    let [r, g, b] = p.0.map(u32::from);
                    ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16) as u8
                })
                .collect(),
            (_, other) => other.to_rgb8().into_raw(),
        };
        Image {
            height,
            width,
            channels: if channels == 1 { 1 } else { 3 },
            pixels,
        }
    }

    /// The image from raw pixels (`height × width × channels` bytes).
    pub fn from_pixels(height: u32, width: u32, channels: u32, pixels: Vec<u8>) -> Image {
        debug_assert_eq!(pixels.len(), (height * width * channels) as usize);
        Image {
            height,
            width,
            channels,
            pixels,
        }
    }

    /// The pixels as floats, channels first (`channels × height × width`), each
    /// `(x / 255 − mean[c]) / std[c]`, written into `out` (exactly that long).
    pub fn write_floats(&self, mean: &[f64], std: &[f64], out: &mut [f32]) {
        let c = self.channels as usize;
        let plane = self.pixels.len() / c.max(1);
        for (k, out) in out.chunks_exact_mut(plane.max(1)).enumerate().take(c) {
            let (m, s) = (mean[k] as f32, std[k] as f32);
            for (o, &x) in out.iter_mut().zip(self.pixels.iter().skip(k).step_by(c)) {
                *o = (x as f32 / 255.0 - m) / s;
            }
        }
    }
}

impl Pixels for Image {
    fn size(&self) -> Size {
        (self.height, self.width)
    }

    fn crop(&self, top: i64, left: i64, h: u32, w: u32) -> Image {
        let c = self.channels as usize;
        let mut pixels = vec![0u8; h as usize * w as usize * c];
        // The columns of the window that fall inside the image, and where they start.
        let x0 = left.max(0);
        let x1 = (left + w as i64).min(self.width as i64);
        if x1 > x0 {
            let span = (x1 - x0) as usize * c;
            let into = (x0 - left) as usize * c;
            for y in 0..h as i64 {
                let sy = top + y;
                if sy < 0 || sy >= self.height as i64 {
                    continue;
                }
                let from = (sy as usize * self.width as usize + x0 as usize) * c;
                let to = y as usize * w as usize * c + into;
                pixels[to..to + span].copy_from_slice(&self.pixels[from..from + span]);
            }
        }
        Image::from_pixels(h, w, self.channels, pixels)
    }

    fn resize(&self, area: Area, h: u32, w: u32) -> Image {
        let window = pipeline_resample::Window {
            left: area.left,
            top: area.top,
            width: area.width,
            height: area.height,
        };
        let pixels = pipeline_resample::resize(
            &self.pixels,
            (self.width, self.height),
            self.channels,
            window,
            (w, h),
        );
        Image::from_pixels(h.max(1), w.max(1), self.channels, pixels)
    }

    fn flip_horizontal(&self) -> Image {
        let c = self.channels as usize;
        let row = self.width as usize * c;
        let mut pixels = Vec::with_capacity(self.pixels.len());
        for line in self.pixels.chunks_exact(row.max(1)) {
            for px in line.chunks_exact(c).rev() {
                pixels.extend_from_slice(px);
            }
        }
        Image::from_pixels(self.height, self.width, self.channels, pixels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(h: u32, w: u32) -> Image {
        Image::from_pixels(h, w, 1, (0..h * w).map(|i| i as u8).collect())
    }

    #[test]
    fn a_crop_past_the_edges_reads_zeros() {
        let img = ramp(3, 3); // 0 1 2 / 3 4 5 / 6 7 8
        let c = img.crop(-1, -1, 3, 3);
        assert_eq!(c.pixels, [0, 0, 0, 0, 0, 1, 0, 3, 4]);
        let c = img.crop(1, 1, 3, 3);
        assert_eq!(c.pixels, [4, 5, 0, 7, 8, 0, 0, 0, 0]);
        assert_eq!(img.crop(0, 0, 3, 3), img);
        assert_eq!(img.crop(5, 5, 2, 2).pixels, [0; 4]);
    }

    #[test]
    fn a_flip_mirrors_each_row_keeping_channels_together() {
        let rgb = Image::from_pixels(1, 2, 3, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(rgb.flip_horizontal().pixels, [4, 5, 6, 1, 2, 3]);
    }

    #[test]
    fn resizing_to_the_same_size_keeps_the_pixels() {
        let img = ramp(4, 4);
        assert_eq!(img.resize(Area::whole((4, 4)), 4, 4), img);
        let small = img.resize(Area::whole((4, 4)), 2, 2);
        assert_eq!((small.height, small.width), (2, 2));
    }

    #[test]
    fn the_random_transforms_evaluate_as_their_centred_forms_and_never_crop_nothing() {
        use manifests::transforms::{
            CenterCrop, RandomCrop, RandomResizedCrop, Resize, TransformType,
        };
        let img = ramp(9, 9);
        let centre = CenterCrop { size: vec![8] }.apply(img.clone(), None);
        for padding in 0..3 {
            let crop = RandomCrop {
                size: vec![8],
                padding,
            };
            assert_eq!(crop.apply(img.clone(), None), centre, "padding {padding}");
        }
        // Ratios no box of the image has: the fallback box is still a pixel at least.
        let bright = Image::from_pixels(8, 8, 1, vec![200; 64]);
        let mut rng = crate::rng::Rng::new(1);
        for ratio in [0.001, 1000.0] {
            let rrc = RandomResizedCrop {
                size: vec![8],
                min_scale: 0.5,
                max_scale: 1.0,
                min_ratio: ratio,
                max_ratio: ratio,
            };
            let out = rrc.apply(bright.clone(), Some(&mut rng));
            assert!(out.pixels.iter().all(|&p| p == 200), "ratio {ratio}");
        }
        // A side past the limit is refused, not wrapped.
        let huge = Resize { size: vec![65_536] };
        assert!(huge.size(Some((1, 65_536))).is_err());
        assert_eq!(
            huge.size(Some((65_536, 65_536))).unwrap(),
            Some((65_536, 65_536))
        );
    }

    #[test]
    fn floats_are_channels_first_and_normalised() {
        let rgb = Image::from_pixels(1, 2, 3, vec![0, 255, 0, 255, 0, 255]);
        let mut out = vec![0.0; 6];
        rgb.write_floats(&[0.5; 3], &[0.5; 3], &mut out);
        assert_eq!(out, [-1.0, 1.0, 1.0, -1.0, -1.0, 1.0]);
    }

    /// CRC-32 (ISO-HDLC) of `bytes`, as a PNG chunk's.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn an_image_too_large_is_refused_from_its_header_before_its_data_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.png");
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut chunk = |kind: &[u8], data: &[u8], claimed: u32| {
            png.extend(claimed.to_be_bytes());
            let mut body = kind.to_vec();
            body.extend(data);
            png.extend(&body);
            if claimed as usize == data.len() {
                png.extend(crc32(&body).to_be_bytes());
            }
        };
        let mut ihdr = Vec::new();
        ihdr.extend(20_000u32.to_be_bytes());
        ihdr.extend(20_000u32.to_be_bytes());
        ihdr.extend([8, 6, 0, 0, 0]); // 8-bit RGBA
        chunk(b"IHDR", &ihdr, 13);
        // Image data that would be 1.6 GB decoded, its bytes not read: the file is sparse.
        chunk(b"IDAT", &[], 1 << 30);
        std::fs::write(&path, &png).unwrap();
        std::fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        assert_eq!(Image::dimensions(&path), Some((20_000, 20_000)));
        let e = Image::read(&path, 3).unwrap_err();
        assert_eq!(
            e,
            "the image is 20000×20000 pixels, 1526 MiB decoded, more than the 512 MiB one image may take: make it smaller"
        );
    }
}
