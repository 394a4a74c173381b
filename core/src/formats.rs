//! Data formats a program brings (`register_data_format`): a file of samples in a form
//! pipeline does not read itself, read by the program's own code into plain arrays.
//! libtorch-free, so `check` reads a sample's shape from the file as the run does, and
//! the run (`backends::data`) turns the arrays into tensors as it does an NPZ's.

use manifests::formats::FormatDescription;
use manifests::registry::Registry;
use std::path::Path;

/// An array of `f32` in row-major order, samples first.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub values: Vec<f32>,
    /// `[samples, …]`; `values.len()` is its product.
    pub shape: Vec<usize>,
}

impl Array {
    /// `values` of `shape`; refused (with why) when their counts differ or `shape` has no
    /// sample axis.
    pub fn new(values: Vec<f32>, shape: Vec<usize>) -> Result<Array, String> {
        let array = Array { values, shape };
        array.check()?;
        Ok(array)
    }

    /// Whether it has a sample axis and as many values as its shape holds (its fields are
    /// public: a format's code may build it without [`Array::new`]).
    fn check(&self) -> Result<(), String> {
        if self.shape.is_empty() {
            return Err("an array of samples has a first axis, the samples".into());
        }
        let count: usize = self.shape.iter().product();
        if count != self.values.len() {
            return Err(format!(
                "{} values cannot be an array of shape {:?} ({count} values)",
                self.values.len(),
                self.shape
            ));
        }
        Ok(())
    }

    pub fn samples(&self) -> usize {
        self.shape[0]
    }
}

/// What a file of a registered format holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    /// `[samples, …]`: one sample's features is an array of `shape[1..]`.
    pub features: Array,
    /// One per sample (`[samples]`: a class index or a target, NaN where missing), or
    /// `[samples, k]` (several targets, or multi-label 0/1); `None` when the file has
    /// none, and the manifest names a labels file.
    pub labels: Option<Array>,
}

/// A data format's code: reading its file. Its description (name, documentation,
/// extensions) is what `check` and `pipeline explain data.format` know of it.
pub trait FileFormat: Sync + 'static {
    fn describe(&self) -> &'static FormatDescription;

    /// The features and labels of the file at `path`; `Err` says what is wrong with it
    /// (shown with the file's name, located at `data.source`).
    fn read(&self, path: &Path) -> Result<Samples, String>;

    /// The shape of one sample's features, for `check`: by default the file read whole;
    /// a format that can tell it from a header says so here.
    fn sample_shape(&self, path: &Path) -> Result<Vec<usize>, String> {
        let features = self.read(path)?.features;
        Ok(features.shape.get(1..).unwrap_or_default().to_vec())
    }
}

static READERS: Registry<dyn FileFormat> = Registry::new(Vec::new, |f| f.describe().name);

/// Adds a data format: its description (what `data.format` names it, the extensions
/// `format "auto"` knows it by) and its code. Refused (with why) when its name or an
/// extension is another format's.
pub fn register_data_format(member: &'static dyn FileFormat) -> Result<(), String> {
    manifests::formats::register(member.describe())?;
    READERS.register(member)
}

/// The code of the registered format `format`; `Err` when a program described it without
/// registering its code.
pub fn reader(
    format: manifests::registry::Chosen<FormatDescription>,
) -> Result<&'static dyn FileFormat, String> {
    READERS.get(format.as_str()).ok_or_else(|| {
        format!(
            "the data format `{}` is described, but this program has no code for it (`register_data_format` registers both)",
            format.as_str()
        )
    })
}

/// What the file at `path` reads as, checked: samples in the features and the labels
/// alike, at least one feature per sample.
pub fn read(
    format: manifests::registry::Chosen<FormatDescription>,
    path: &Path,
) -> Result<Samples, String> {
    let samples = reader(format)?.read(path)?;
    let features = &samples.features;
    for array in std::iter::once(features).chain(&samples.labels) {
        array
            .check()
            .map_err(|why| format!("the `{}` format's code gave {why}", format.as_str()))?;
    }
    if features.shape.len() < 2 || features.shape[1..].contains(&0) {
        return Err(format!(
            "the `{}` format's code gave features of shape {:?}: a sample needs at least one feature",
            format.as_str(),
            features.shape
        ));
    }
    if let Some(labels) = &samples.labels {
        if labels.samples() != features.samples() || labels.shape.len() > 2 {
            return Err(format!(
                "{} samples of features but labels of shape {:?}: one label (or one row of targets) per sample",
                features.samples(),
                labels.shape
            ));
        }
    }
    Ok(samples)
}
