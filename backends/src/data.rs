//! Loading a data set into tensors: CSV / CSV.gz, NPY, NPZ and safetensors; the seeded
//! train / val / test split; and feature scaling fitted on the training split.
//!
//! The whole data set is held in memory (and on the device) — right for the tabular and
//! small-image data this serves today; streaming larger sets is future work.

use crate::arrays;
use crate::csv::{self, CsvError};
use manifests::{DataFormat, DataSpec, Diagnostic, Manifest, Scale, SplitName};
use pipeline_core::freshness::regular_input;
use pipeline_core::split::Splits;
use std::path::{Path, PathBuf};
use tch::{Device, Kind, TchError, Tensor};

/// How a sample is named in messages: its CSV line, or its index in an array file.
#[derive(Debug, Clone)]
enum Origin {
    Lines(Vec<usize>),
    Indices,
}

/// The samples of a run, split and scaled, on one device.
#[derive(Debug)]
pub struct Dataset {
    /// `N × sample_shape`, float32.
    pub features: Tensor,
    /// `N` class indices (int64) for classification, else `N × k` float32 targets.
    pub labels: Tensor,
    pub sample_shape: Vec<i64>,
    pub splits: Splits,
    /// The data file, for messages.
    pub path: PathBuf,
    /// What scaling subtracted from and divided the features by (per feature), so that
    /// checkpoints can record it for whoever applies the model later.
    pub scaling: Option<(Vec<f64>, Vec<f64>)>,
    origin: Origin,
}

/// Class labels must be below this (2^53).
const MAX_CLASS_INDEX: f64 = 9_007_199_254_740_992.0;

fn data_error(code: &'static str, spec: &DataSpec, message: String, help: &str) -> Diagnostic {
    Diagnostic::error(code, message)
        .label_opt(spec.source.span, "data file")
        .help(help.to_string())
}

fn read_arrays(
    path: &Path,
    format: DataFormat,
    spec: &DataSpec,
    manifest: &Manifest,
) -> Result<(Tensor, Tensor, Origin), Diagnostic> {
    // Errors of the array readers: a missing array names what the file holds.
    let array_error = |file: &Path, message: String| {
        let (code, help) = if message.starts_with("no array named") {
            (
                "pipeline::data::missing_array",
                "set `features` and `labels` in `data` to names the file holds",
            )
        } else {
            (
                "pipeline::data::unreadable",
                "check that the file is a valid array file",
            )
        };
        data_error(code, spec, format!("{}: {message}", file.display()), help)
    };
    let pair = |mut tensors: Vec<Tensor>| {
        let labels = tensors.pop().expect("two arrays were asked for");
        (tensors.pop().expect("two arrays were asked for"), labels)
    };
    let names = [spec.features.as_str(), spec.labels.as_str()];
    Ok(match format {
        DataFormat::Csv => {
            let table = csv::read(path, spec.header, &spec.label).map_err(|e| match e {
                CsvError::Io(m) => data_error(
                    "pipeline::data::unreadable",
                    spec,
                    format!("cannot read {}: {m}", path.display()),
                    "check the file",
                ),
                CsvError::Line { line, message } => data_error(
                    "pipeline::data::bad_row",
                    spec,
                    format!("{}:{line}: {message}", path.display()),
                    "every row needs the same number of numeric columns",
                ),
                CsvError::Label(m) => data_error(
                    "pipeline::data::bad_label_column",
                    spec,
                    format!("{}: {m}", path.display()),
                    "set `label` in `data` to the label column",
                ),
            })?;
            let rows = table.lines.len() as i64;
            let features =
                Tensor::from_slice(&table.features).reshape([rows, table.columns as i64]);
            let labels = Tensor::from_slice(&table.labels);
            (features, labels, Origin::Lines(table.lines))
        }
        DataFormat::Npy => {
            let labels_path = manifest.resolve(Path::new(&spec.labels));
            regular_input(manifest, "labels", &labels_path, None)?;
            let features = arrays::read_npy(path).map_err(|e| array_error(path, e))?;
            let labels =
                arrays::read_npy(&labels_path).map_err(|e| array_error(&labels_path, e))?;
            (features, labels, Origin::Indices)
        }
        DataFormat::Npz => {
            let (f, l) = pair(arrays::read_npz(path, &names).map_err(|e| array_error(path, e))?);
            (f, l, Origin::Indices)
        }
        DataFormat::Safetensors => {
            let (f, l) =
                pair(arrays::read_safetensors(path, &names).map_err(|e| array_error(path, e))?);
            (f, l, Origin::Indices)
        }
    })
}

impl Dataset {
    /// Loads the manifest's data. `classification` asks for class-index labels.
    pub fn load(manifest: &Manifest, classification: bool) -> Result<Dataset, Diagnostic> {
        let spec = &manifest.data;
        let path = manifest.resolve(&spec.source.value);
        regular_input(manifest, "data", &path, None)?;
        let (features, labels, origin) = read_arrays(&path, spec.format, spec, manifest)?;
        let n = features.size().first().copied().unwrap_or(0);
        if n == 0 || features.dim() < 2 || features.size()[1..].contains(&0) {
            return Err(data_error(
                "pipeline::data::bad_shape",
                spec,
                format!(
                    "{}: features must be an array of shape (samples, …) with at least one sample and one feature, found {:?}",
                    path.display(),
                    features.size()
                ),
                "store one row per sample",
            ));
        }
        if labels.size().first().copied() != Some(n) {
            return Err(data_error(
                "pipeline::data::bad_shape",
                spec,
                format!(
                    "{}: {n} samples of features but labels of shape {:?}",
                    path.display(),
                    labels.size()
                ),
                "features and labels need the same number of samples",
            ));
        }
        let features = features.to_kind(Kind::Float);
        let mut dataset = Dataset {
            sample_shape: features.size()[1..].to_vec(),
            features,
            labels: Tensor::new(),
            splits: Splits::new(n as usize, &spec.split),
            path,
            scaling: None,
            origin,
        };
        // A finite sum means every feature is finite; only otherwise pay for a mask as
        // large as the data to find the first culprit (an f32 sum that merely overflows
        // finds none). Summing in f64 would first copy the data into f64.
        let sum_is_finite = dataset
            .features
            .sum(Kind::Float)
            .double_value(&[])
            .is_finite();
        let first_bad = || {
            let bad_rows = dataset
                .features
                .isfinite()
                .logical_not()
                .flatten(1, -1)
                .any_dim(1, false);
            first_index(&bad_rows)
        };
        if let Some(i) = (!sum_is_finite).then(first_bad).flatten() {
            return Err(data_error(
                "pipeline::data::not_finite",
                spec,
                format!("{}: a feature is NaN or infinite", dataset.at(i)),
                "clean the data: every feature must be a finite number",
            ));
        }
        dataset.labels = if classification {
            let labels = labels.to_kind(Kind::Double).flatten(0, -1);
            if labels.size()[0] != n {
                return Err(data_error(
                    "pipeline::data::bad_shape",
                    spec,
                    format!(
                        "{}: class labels must be one number per sample",
                        dataset.path.display()
                    ),
                    "store labels as a 1-D array",
                ));
            }
            // Whole numbers from 0 that an int64 holds exactly (beyond 2^53 a double
            // no longer tells neighbouring integers apart; no model has that many classes).
            let bad = labels
                .lt(0.0)
                .logical_or(&labels.frac().ne(0.0))
                .logical_or(&labels.isfinite().logical_not())
                .logical_or(&labels.ge(MAX_CLASS_INDEX));
            if let Some(i) = first_index(&bad) {
                let value = labels.double_value(&[i as i64]);
                return Err(data_error(
                    "pipeline::data::bad_label",
                    spec,
                    format!("{}: label {value} is not a class index", dataset.at(i)),
                    "cross-entropy and nll need labels that are whole numbers from 0",
                ));
            }
            labels.to_kind(Kind::Int64)
        } else {
            let labels = labels.to_kind(Kind::Float);
            if labels.dim() == 1 {
                labels.unsqueeze(1)
            } else {
                labels.flatten(1, -1)
            }
        };
        dataset.scale(spec.scale);
        Ok(dataset)
    }

    /// Where sample `i` is, for messages: `file:line` for CSV, else `file, sample i`.
    pub fn at(&self, i: usize) -> String {
        match &self.origin {
            Origin::Lines(lines) => format!("{}:{}", self.path.display(), lines[i]),
            Origin::Indices => format!("{}, sample {i}", self.path.display()),
        }
    }

    /// Scales the features with statistics of the training split only.
    fn scale(&mut self, scale: Scale) {
        if scale == Scale::None {
            return;
        }
        let train = self
            .features
            .index_select(0, &index_tensor(&self.splits.train));
        let (shift, divide) = match scale {
            Scale::Standard => (
                train.mean_dim(0, false, Kind::Float),
                train.std_dim(0, false, false),
            ),
            Scale::MinMax => {
                let (lo, hi) = (train.amin(0, false), train.amax(0, false));
                let range = &hi - &lo;
                (lo, range)
            }
            Scale::None => unreachable!(),
        };
        // Constant features are centred, not divided by zero.
        let divide = divide.where_self(&divide.gt(1e-8), &divide.ones_like());
        let _ = self
            .features
            .f_sub_(&shift)
            .and_then(|mut f| f.f_div_(&divide));
        let values = |t: &Tensor| {
            Vec::<f64>::try_from(&t.to_kind(Kind::Double).flatten(0, -1)).unwrap_or_default()
        };
        self.scaling = Some((values(&shift), values(&divide)));
    }

    /// Moves the samples to `device` (a no-op when they are there already).
    pub fn to_device(&mut self, device: Device) {
        self.features = self.features.to_device(device);
        self.labels = self.labels.to_device(device);
    }

    /// The sample indices of `split`, as an int64 tensor on the samples' device. Splits
    /// are never copied out of the data: batches are gathered through these indices.
    pub fn indices(&self, split: SplitName) -> Tensor {
        index_tensor(self.splits.get(split)).to_device(self.features.device())
    }

    /// The features and labels of the samples at `indices`.
    pub fn batch(&self, indices: &Tensor) -> Result<(Tensor, Tensor), TchError> {
        Ok((
            self.features.f_index_select(0, indices)?,
            self.labels.f_index_select(0, indices)?,
        ))
    }

    /// Checks that every class label fits the model's `classes` outputs.
    pub fn check_classes(&self, classes: i64) -> Result<(), (usize, i64)> {
        match first_index(&self.labels.ge(classes)) {
            Some(i) => Err((i, self.labels.int64_value(&[i as i64]))),
            None => Ok(()),
        }
    }

    /// The number of targets per sample (regression) or 1 (classification).
    pub fn target_width(&self) -> i64 {
        if self.labels.dim() == 2 {
            self.labels.size()[1]
        } else {
            1
        }
    }
}

/// Indices as an int64 tensor.
pub fn index_tensor(indices: &[usize]) -> Tensor {
    let v: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_slice(&v)
}

/// The first index where a boolean vector is true.
fn first_index(mask: &Tensor) -> Option<usize> {
    let hits = mask.flatten(0, -1).nonzero();
    (hits.size()[0] > 0).then(|| hits.int64_value(&[0, 0]) as usize)
}
