//! Image data (`image-folder`, `image-list`): every image decoded once, in parallel, and
//! put through the transforms up to the first random one, kept as 8-bit pixels; the
//! rest of the transforms (augmentation while training, their deterministic form
//! otherwise) and the conversion to floats run per batch, in parallel, each sample with
//! its own generator for (seed, epoch, sample), so a resumed run sees the same images.
//!
//! With `data.load "stream"` (or `auto` when the held pixels would pass 1 GiB) nothing is
//! held: every image is still decoded once at load, so that a bad one is named before
//! training, then dropped, and each batch decodes its images again (in the loader's
//! workers, ahead of the math). The pixels are the same either way, so the cache key does
//! not say which.

use super::read::Labels;
use super::{data_error, first_index, float_batch, Dataset, Origin};
use manifests::transforms::{Pixels, Size, Transform, Uniform};
use manifests::{
    DataSpec, Diagnostic, ImageSpec, Load, Manifest, Spanned, TransformSpec, STREAM_ABOVE_BYTES,
};
use pipeline_core::image::Image;
use pipeline_core::image_listing::{ImageListing, ListingLabels};
use pipeline_core::rng::Rng;
use pipeline_core::split::Splits;
use rayon::prelude::*;
use std::borrow::Cow;
use std::path::PathBuf;
use tch::{Device, Kind, Tensor};

/// The decoded images of a data set, and what each batch still does to them.
#[derive(Debug)]
pub struct ImageSet {
    pub listing: ImageListing,
    /// Each image after the transforms before the first random one; `None` when the
    /// images are streamed (decoded per batch).
    held: Option<Vec<Image>>,
    /// The transforms before the first random one (a streamed image's, per batch).
    prefix: Vec<Transform>,
    /// The transforms from the first random one on.
    rest: Vec<Transform>,
    mean: Vec<f64>,
    std: Vec<f64>,
    channels: u32,
    /// Every sample's size after all the transforms.
    size: Size,
    seed: u64,
}

impl Dataset {
    /// The images under the directory `source` for a `predict` stage of a model trained
    /// on `training`: every one below it in torchvision's walk order, decoded and
    /// transformed as the training's are when evaluated (without the random transforms),
    /// all of them the `test` split. `manifest`'s data source is `source`, so that a
    /// problem with an image is said of it.
    pub(super) fn images_to_predict(
        manifest: &Manifest,
        source: &Spanned<PathBuf>,
        training: &Dataset,
    ) -> Result<Dataset, Diagnostic> {
        let dir = manifest.resolve(&source.value);
        let listing = ImageListing::unlabelled(&dir).map_err(|(why, help)| {
            Diagnostic::error("pipeline::stage::bad_source", why)
                .label_opt(source.span, "images to predict")
                .help(help)
        })?;
        let n = listing.files.len();
        let set = ImageSet::load(manifest, listing)?;
        let mut dataset = Dataset::skeleton(manifest, Origin::Indices, n);
        dataset.sample_shape = set.sample_shape();
        if dataset.sample_shape != training.sample_shape {
            return Err(Diagnostic::error(
                "pipeline::data::other_columns",
                format!(
                    "{}: its images are {:?} (channels, height, width) after the transforms, the training's were {:?}",
                    dir.display(),
                    dataset.sample_shape,
                    training.sample_shape
                ),
            )
            .label_opt(source.span, "images to predict")
            .help("end `images` with `resize H W` or `center-crop N`, so that every image comes out at one size"));
        }
        dataset.images = Some(set);
        // Not read: the predictions are the model's.
        let mut label_shape = vec![n as i64];
        label_shape.extend(&training.labels.size()[1..]);
        dataset.labels = Tensor::zeros(
            label_shape.as_slice(),
            (training.labels.kind(), Device::Cpu),
        );
        dataset.classes = training.classes.clone();
        dataset.label_names = training.label_names.clone();
        dataset.splits = Splits {
            train: Vec::new(),
            val: Vec::new(),
            test: (0..n).collect(),
        };
        Ok(dataset)
    }

    /// Image data: the listing's images decoded, their labels (class directories, or the
    /// listing's label cells read as any table's), split.
    pub(super) fn load_images(
        manifest: &Manifest,
        classification: bool,
        fold: Option<u64>,
    ) -> Result<Dataset, Diagnostic> {
        let spec = &manifest.data;
        let listing = ImageListing::of(manifest)?;
        let n = listing.files.len();
        // A folder's labels are its classes; a listing's, cells read as any table's.
        let (labels, classes, origin, cells) = match &listing.labels {
            ListingLabels::Classes { classes, index } => {
                let index: Vec<i64> = index.iter().map(|&k| k as i64).collect();
                let labels = Tensor::from_slice(&index);
                (Some(labels), Some(classes.clone()), Origin::Indices, None)
            }
            // Only a prediction's images have none (`images_to_predict`).
            ListingLabels::Unlabelled => (None, None, Origin::Indices, None),
            ListingLabels::Cells {
                columns,
                names,
                lines,
                listing,
            } => {
                let cells = Labels::Cells {
                    columns: columns.clone(),
                    names: names.clone(),
                    lines: Some(lines.clone()),
                    path: listing.clone(),
                };
                (None, None, Origin::Lines(lines.clone()), Some(cells))
            }
        };
        let set = ImageSet::load(manifest, listing)?;
        let mut dataset = Dataset::skeleton(manifest, origin, n);
        dataset.sample_shape = set.sample_shape();
        dataset.images = Some(set);
        dataset.classes = classes;
        dataset.read_extra_inputs(manifest, n)?;
        if let Some(cells) = cells {
            let (labels, classes) = dataset.labels_from(cells, spec, classification)?;
            let missing = match labels.dim() {
                1 => labels.isnan(),
                _ => labels.isnan().flatten(1, -1).any_dim(1, false),
            };
            if let Some(i) = first_index(&missing) {
                return Err(data_error(
                    "pipeline::data::missing_label",
                    spec,
                    format!("{}: the label is missing", dataset.at(i)),
                    "give every listed image a label",
                ));
            }
            dataset.labels = if labels.dim() == 1 {
                labels.to_kind(Kind::Int64)
            } else {
                labels.to_kind(Kind::Float)
            };
            dataset.classes = classes;
        } else {
            let index = labels.expect("a folder's classes");
            if !classification {
                return Err(data_error(
                    "pipeline::data::bad_label",
                    spec,
                    format!(
                        "{}: an image folder's labels are its classes, but the loss is a regression loss",
                        dataset.path.display()
                    ),
                    "use `cross-entropy` or `nll`; targets for images come from a listing (`format \"image-list\"`)",
                ));
            }
            dataset.labels = index;
        }
        dataset.fold = fold;
        dataset.splits = dataset.own_splits(spec, classification);
        dataset.check_extra_masks(manifest)?;
        dataset.ids_fit(manifest, 0)?;
        dataset.scale_extra_inputs(manifest);
        Ok(dataset)
    }
}

/// What is wrong with an image, and what to do.
type Problem = (String, String);

fn image_error(spec: &DataSpec, message: String, help: &str) -> Diagnostic {
    Diagnostic::error("pipeline::data::bad_image", message)
        .label_opt(spec.source.span, "image data")
        .help(help.to_string())
}

impl ImageSet {
    /// Lists and decodes the manifest's images. Every problem names the image.
    pub fn load(manifest: &Manifest, listing: ImageListing) -> Result<ImageSet, Diagnostic> {
        let spec = &manifest.data;
        let images_spec: &ImageSpec = spec.images.as_ref().expect("image data has `images`");
        let split = images_spec
            .transforms
            .iter()
            .position(|t| t.transform.random())
            .unwrap_or(images_spec.transforms.len());
        let (prefix, rest) = images_spec.transforms.split_at(split);
        let channels = images_spec.channels;
        let hold = match spec.load.value {
            Load::Memory => true,
            Load::Stream => false,
            Load::Auto => held_bytes(&listing, channels, prefix) <= STREAM_ABOVE_BYTES,
        };
        // Each image's problem: what is wrong, and what to do.
        let decoded: Vec<Result<(Option<Image>, Size), Problem>> = listing
            .files
            .par_iter()
            .map(|file| {
                let mut image = Image::read(&listing.root.join(file), channels)
                    .map_err(|e| (e, "fix the image, or remove it".to_string()))?;
                let read = image.size();
                // The sizes every transform sees, checked before it runs.
                let out = images_spec
                    .size(Some(read))
                    .map_err(|(t, e)| {
                        let message = format!(
                            "{}×{} pixels: `{}`: {}",
                            read.0,
                            read.1,
                            t.transform.name(),
                            e.message
                        );
                        (message, e.help)
                    })?
                    .expect("a known size stays known");
                if !hold {
                    return Ok((None, out));
                }
                for t in prefix {
                    image = t.transform.apply(image, None);
                }
                Ok((Some(image), out))
            })
            .collect();
        let mut images = Vec::with_capacity(decoded.len());
        let mut size = None;
        for (i, result) in decoded.into_iter().enumerate() {
            let (image, out) = result.map_err(|(message, help)| {
                image_error(spec, format!("{}: {message}", listing.at(i)), &help)
            })?;
            match size {
                None => size = Some(out),
                Some(first) if first != out => {
                    return Err(image_error(
                        spec,
                        format!(
                            "{}: {}×{} pixels after the transforms, but {} gives {}×{}",
                            listing.at(i),
                            out.0,
                            out.1,
                            listing.at(0),
                            first.0,
                            first.1
                        ),
                        "the samples of a batch need one size: end the transforms with `resize H W`, `center-crop N` or a crop to a fixed size",
                    ));
                }
                Some(_) => {}
            }
            images.extend(image);
        }
        let (mean, std) = images_spec.normalization();
        Ok(ImageSet {
            listing,
            held: hold.then_some(images),
            prefix: prefix.iter().map(|t| t.transform.clone()).collect(),
            rest: rest.iter().map(|t| t.transform.clone()).collect(),
            mean,
            std,
            channels,
            size: size.unwrap_or((0, 0)),
            seed: manifest.seed,
        })
    }

    /// A sample's shape: `[channels, height, width]`.
    pub fn sample_shape(&self) -> Vec<i64> {
        vec![self.channels as i64, self.size.0 as i64, self.size.1 as i64]
    }

    /// The samples `ids` as a float batch (`ids × channels × height × width`, on the
    /// CPU): augmented with each sample's generator for `epoch` when training (`Some`),
    /// in the transforms' deterministic form otherwise. Streamed images are decoded here;
    /// one that no longer decodes, or to another size, is an error naming it.
    pub fn batch(&self, ids: &[usize], epoch: Option<u64>) -> Result<Tensor, String> {
        let (c, (h, w)) = (self.channels as usize, self.size);
        let per = c * h as usize * w as usize;
        let shape = [ids.len() as i64, c as i64, h as i64, w as i64];
        float_batch(&shape, |floats| {
            floats
                .par_chunks_mut(per.max(1))
                .zip(ids.par_iter())
                .try_for_each(|(out, &i)| {
                    let source = match &self.held {
                        Some(images) => Cow::Borrowed(&images[i]),
                        None => Cow::Owned(self.decode(i)?),
                    };
                    if self.rest.is_empty() {
                        return self.write(&source, i, out);
                    }
                    let mut rng = epoch.map(|e| Rng::augmentation(self.seed, e, i as u64));
                    let mut image = source.into_owned();
                    for t in &self.rest {
                        image = t.apply(image, rng.as_mut().map(|r| r as &mut dyn Uniform));
                    }
                    self.write(&image, i, out)
                })
        })
    }

    /// Image `i` decoded from its file and put through the transforms before the first
    /// random one, as a held image was at load.
    fn decode(&self, i: usize) -> Result<Image, String> {
        let path = self.listing.root.join(&self.listing.files[i]);
        let mut image = Image::read(&path, self.channels)
            .map_err(|e| format!("{}: {e}", self.listing.at(i)))?;
        for t in &self.prefix {
            image = t.apply(image, None);
        }
        Ok(image)
    }

    /// Sample `i`'s pixels as floats into `out`, once its size is the data set's.
    fn write(&self, image: &Image, i: usize, out: &mut [f32]) -> Result<(), String> {
        if image.size() != self.size {
            let ((h, w), (eh, ew)) = (image.size(), self.size);
            return Err(format!(
                "{}: {h}×{w} pixels after the transforms, where the data set's are {eh}×{ew}: the image changed since the run started",
                self.listing.at(i)
            ));
        }
        image.write_floats(&self.mean, &self.std, out);
        Ok(())
    }
}

/// The bytes the images would take held: each one's pixels after `prefix`, from its
/// header's size (an image whose header does not read counts 0: loading names it).
fn held_bytes(listing: &ImageListing, channels: u32, prefix: &[TransformSpec]) -> u64 {
    listing
        .files
        .par_iter()
        .map(|file| {
            let Some(read) = Image::dimensions(&listing.root.join(file)) else {
                return 0;
            };
            let size = prefix
                .iter()
                .try_fold(Some(read), |x, t| t.transform.size(x))
                .ok()
                .flatten();
            size.map_or(0, |(h, w)| h as u64 * w as u64 * channels as u64)
        })
        .sum()
}
