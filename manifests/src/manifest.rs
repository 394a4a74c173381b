//! The typed manifest: what `lower.rs` produces from the KDL text.
//!
//! Every spec has its defaults applied, so two manifests that mean the same thing are
//! equal however they were written. Specs serialise (without their source spans) so later
//! layers can hash them; spans are kept next to the values that diagnostics point at.

pub use crate::formats::{DataFormat, FormatDescription, FormatKind};
pub use crate::layers::Layer;
use miette::SourceSpan;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A value and where it was written (`None` when it came from `--set` or a default).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Spanned<T> {
    pub value: T,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

impl Spanned<Scale> {
    /// No scaling (`scale-label "none"`, the default).
    pub fn is_unscaled(&self) -> bool {
        self.value == Scale::None
    }
}

/// What a run records besides `metrics.jsonl` (`logging { … }`); in no cache key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoggingSpec {
    /// TensorBoard event files under the run directory.
    pub tensorboard: bool,
    /// A step record every this many optimizer steps (0: none).
    pub log_every_steps: u64,
    /// The gradients' total norm in step records even when clipping does not compute it.
    pub grad_norm: bool,
}

/// A checked, typed manifest.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub name: String,
    pub seed: u64,
    pub data: DataSpec,
    pub model: ModelSpec,
    pub loss: LossSpec,
    pub optimizer: OptimizerSpec,
    pub schedule: ScheduleSpec,
    pub accelerator: AcceleratorSpec,
    pub logging: LoggingSpec,
    /// What `pipeline sweep` runs without flags (`sweep { … }`); in no stage's key.
    pub sweep: Option<SweepSpec>,
    /// Metrics scripted in Python (`metric "brier" { torchscript "brier.pt" }`), in the
    /// key of each stage that measures them ([`Manifest::scripted_metric`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricSpec>,
    pub stages: Vec<StageSpec>,
    /// The directory relative paths in the manifest are resolved against.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Inputs the manifest names by URL (`init "s3://bucket/key"`), and the local copy of
    /// each that a run fetched (see `cli/src/fetch.rs`); the manifest keeps the URL, so a
    /// stage's key is the same on every machine.
    #[serde(skip)]
    pub fetched: std::collections::BTreeMap<PathBuf, PathBuf>,
}

impl Manifest {
    /// A path from the manifest, resolved against the manifest's directory (or a URL's
    /// local copy, once fetched).
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match self.fetched.get(path) {
            Some(local) => local.clone(),
            None => self.base_dir.join(path),
        }
    }

    /// The metric scripted in Python under `name`, if the manifest defines one.
    pub fn scripted_metric(&self, name: &str) -> Option<&MetricSpec> {
        self.metrics.iter().find(|m| m.name.value == name)
    }

    /// The scripted metrics stage `index` measures: an `eval`'s `metrics`, a `train`'s
    /// `validate` metrics and monitors. In the stage's key.
    pub fn scripted_metrics_of(&self, index: usize) -> Vec<&MetricSpec> {
        let names: Vec<&str> = match &self.stages[index].config {
            StageConfig::Train(train) => train
                .validate
                .metrics
                .iter()
                .map(|m| m.value.as_str())
                .chain(
                    self.monitors(train)
                        .into_iter()
                        .filter(|(_, m)| m.value.validation)
                        .map(|(_, m)| m.value.metric.as_str()),
                )
                .collect(),
            StageConfig::Eval(eval) => eval.metrics.iter().map(|m| m.value.as_str()).collect(),
            StageConfig::Checkpoint(_) | StageConfig::Predict(_) => Vec::new(),
        };
        self.metrics
            .iter()
            .filter(|m| names.contains(&m.name.value.as_str()))
            .collect()
    }

    pub fn stage(&self, name: &str) -> Option<&StageSpec> {
        self.stages.iter().find(|s| s.name.value == name)
    }

    /// What a `train` stage watches at every validation, each with what watches it:
    /// its `early-stop`, its `keep-best`, the `reduce-on-plateau` schedule.
    pub fn monitors<'a>(&'a self, train: &'a TrainSpec) -> Vec<(Watcher, &'a Spanned<Monitor>)> {
        let plateau = self.schedule.kind.plateau.as_ref().map(|w| &w.monitor);
        [
            (
                Watcher::EarlyStop,
                train.early_stop.as_ref().map(|e| &e.monitor),
            ),
            (
                Watcher::KeepBest,
                train.keep_best.as_ref().map(|k| &k.monitor),
            ),
            (Watcher::ReduceOnPlateau, plateau),
        ]
        .into_iter()
        .filter_map(|(w, m)| Some((w, m?)))
        .collect()
    }
}

/// What watches a [`Monitor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watcher {
    EarlyStop,
    KeepBest,
    ReduceOnPlateau,
}

impl Watcher {
    /// What a train stage does with the monitor, for messages: "stops early on".
    pub fn does(self) -> &'static str {
        match self {
            Watcher::EarlyStop => "stops early on",
            Watcher::KeepBest => "keeps its best weights by",
            Watcher::ReduceOnPlateau => "reduces its learning rate on plateaus of",
        }
    }
}

/// A CSV column (by 0-based index, header name, `first` or `last`), or a half-open
/// range of indices (`"2..10"`: columns 2 to 9). Serialised as written: `"last"`, `0`,
/// `"name"`, `"2..10"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    First,
    Last,
    Index(usize),
    Name(String),
    Range { start: usize, end: usize },
}

impl Serialize for Column {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Column::First => s.serialize_str("first"),
            Column::Last => s.serialize_str("last"),
            Column::Index(i) => s.serialize_u64(*i as u64),
            Column::Name(n) => s.serialize_str(n),
            Column::Range { start, end } => s.serialize_str(&format!("{start}..{end}")),
        }
    }
}

/// A comment byte as the character written.
fn as_char<S: serde::Serializer>(c: &Option<u8>, s: S) -> Result<S::Ok, S::Error> {
    c.map(|b| (b as char).to_string()).serialize(s)
}

/// A list of columns as written: one alone, several as a list.
fn one_or_many<S: serde::Serializer>(columns: &[Column], s: S) -> Result<S::Ok, S::Error> {
    match columns {
        [one] => one.serialize(s),
        many => many.serialize(s),
    }
}

impl std::fmt::Display for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Column::First => write!(f, "first"),
            Column::Last => write!(f, "last"),
            Column::Index(i) => write!(f, "{i}"),
            Column::Name(n) => write!(f, "`{n}`"),
            Column::Range { start, end } => write!(f, "{start}..{end}"),
        }
    }
}

choice! {
    /// What separates a CSV file's fields (`data.delimiter`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Delimiter {
        /// Told from the first lines: the one of `,` `;` tab that splits them all into
        /// the same number of fields (more than one), else runs of whitespace.
        Auto = "auto",
        Comma = ",",
        Semicolon = ";",
        Tab = "tab",
        /// Runs of spaces and tabs, as in `np.loadtxt` (no quoting).
        Whitespace = "whitespace",
    }
}

choice! {
    /// What a missing feature value does (`data.missing`): an empty cell, `NA`, `N/A`,
    /// `NaN`, `nan`, `null`, `?`, or NaN in an array file.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Missing {
        /// Stop, naming the row and the column.
        Error = "error",
        /// Leave out every row with a missing value (feature or label).
        DropRow = "drop-row",
        /// Fill with the column's mean over the training split.
        Mean = "mean",
        /// Fill with the column's median over the training split.
        Median = "median",
    }
}

choice! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Scale {
        None = "none",
        Standard = "standard",
        MinMax = "minmax",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitSpec {
    pub train: f64,
    pub val: f64,
    pub test: f64,
    pub seed: u64,
    pub shuffle: bool,
    /// Each class split in the same fractions (classification only).
    pub stratify: bool,
    /// k-fold cross-validation: the samples outside `test` cut into this many folds,
    /// each held out in turn as the validation split (`val` is 0). Left out of the key
    /// when absent, so that keys from before it stay valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folds: Option<u64>,
}

choice! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum SplitName {
        Train = "train",
        Val = "val",
        Test = "test",
    }
}

impl SplitSpec {
    /// The share of the samples in `split` (with folds: in one fold's).
    pub fn fraction(&self, split: SplitName) -> f64 {
        match (split, self.folds) {
            (SplitName::Train, Some(k)) => self.train * (k - 1) as f64 / k as f64,
            (SplitName::Val, Some(k)) => self.train / k as f64,
            (SplitName::Train, None) => self.train,
            (SplitName::Val, None) => self.val,
            (SplitName::Test, _) => self.test,
        }
    }

    /// Whether training has a validation split: `val`, or the fold held out.
    pub fn validates(&self) -> bool {
        self.fraction(SplitName::Val) > 0.0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataSpec {
    pub source: Spanned<PathBuf>,
    pub format: DataFormat,
    /// How a CSV file is written.
    #[serde(flatten)]
    pub dialect: Dialect,
    /// CSV: the label columns (several for multi-output regression); empty when the
    /// labels come from a file.
    #[serde(serialize_with = "one_or_many")]
    pub label: Vec<Column>,
    /// CSV: the feature columns, empty for every column that is not a label; NPZ /
    /// safetensors: the features array's name, alone.
    #[serde(serialize_with = "one_or_many")]
    pub features: Vec<Column>,
    /// NPZ / safetensors: the labels array's name (when there is no labels file).
    #[serde(rename = "labels")]
    pub labels_array: String,
    /// A separate labels file (any format). Its path is not in the cache key (its content
    /// is, as a stage input).
    #[serde(skip)]
    pub labels_file: Option<Spanned<PathBuf>>,
    pub missing: Missing,
    pub scale: Scale,
    /// Regression: the labels' scaling, fitted on the training split; losses train on
    /// the scaled labels, metrics and predictions are in the labels' units. Keyed only
    /// when set (older keys stay as they were).
    #[serde(skip_serializing_if = "Spanned::is_unscaled")]
    pub scale_label: Spanned<Scale>,
    pub split: SplitSpec,
    /// Time-series windows: a sample is some consecutive rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
    /// A text column tokenised into the features (CSV, Parquet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<TextSpec>,
    /// Image data (`image-folder`, `image-list`): how images become samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageSpec>,
    /// Token ids stored as numbers: the id that pads a sequence (a `mask` input marks
    /// the others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub padding_id: Option<i64>,
    /// More model inputs, each from a file of its own (`data.inputs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_inputs: Vec<InputSpec>,
    /// Feature columns declared categorical (`data.categorical`); a column of text is
    /// categorical (one-hot) without being declared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub categorical: Vec<CategoricalSpec>,
    /// Feature columns declared dates (`data.date`); a column of dates is one without
    /// being declared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dates: Vec<DateSpec>,
    /// The most distinct values a categorical column may hold. It only refuses: not in
    /// the cache key.
    #[serde(skip)]
    pub max_categories: u64,
    /// How the features are held. Not in the cache key as written: the key holds what
    /// `auto` resolves to (`fingerprint.rs`).
    #[serde(skip)]
    pub load: Spanned<Load>,
    /// Threads assembling batches (streamed features, images) ahead of the math (`None`:
    /// one per core); 0 assembles them in the training thread. Speed only: not in the
    /// cache key.
    #[serde(skip)]
    pub workers: Option<u64>,
    /// Batches assembled ahead. Speed only: not in the cache key.
    #[serde(skip)]
    pub prefetch: u64,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

choice! {
    /// How a categorical column becomes model input (`data.categorical`'s `encoding`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Encoding {
        /// One feature per value seen in the training split, after the numeric features.
        OneHot = "one-hot",
        /// The value's id (1 … K; 0 for one not seen in training), a model input of its own.
        Index = "index",
    }
}

choice! {
    /// What a date gives as a feature (`data.date`'s `parts`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum DatePart {
        Year = "year",
        /// 1 … 12.
        Month = "month",
        /// Of the month, 1 … 31.
        Day = "day",
        /// 1 … 366.
        DayOfYear = "day-of-year",
        /// 0 for Monday … 6 for Sunday (pandas' `dayofweek`).
        DayOfWeek = "day-of-week",
        Hour = "hour",
        Minute = "minute",
        /// Days since 1970-01-01, the time of day as a fraction.
        Days = "days",
    }
}

/// The parts a date column gives when no `date` node says.
pub const DEFAULT_DATE_PARTS: &[DatePart] = &[DatePart::Year, DatePart::Month, DatePart::DayOfYear];

/// `data.window`: each sample is `length` consecutive rows, labelled with the label
/// `horizon` rows after its last one; a window starts every `stride` rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowSpec {
    pub length: u64,
    pub horizon: u64,
    pub stride: u64,
    /// The column whose values order the rows (`None`: the file's order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<Spanned<String>>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// A `date` node of `data`: feature columns of dates, and the parts each gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DateSpec {
    #[serde(serialize_with = "one_or_many")]
    pub columns: Vec<Column>,
    pub parts: Vec<DatePart>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// A `categorical` node of `data`: feature columns read as categories, and how they
/// become model input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoricalSpec {
    #[serde(serialize_with = "one_or_many")]
    pub columns: Vec<Column>,
    pub encoding: Encoding,
    /// `index` of one column: the model input's name (`None`: the column's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// The model inputs of a data set, in the order a model (and a TorchScript module's
/// `forward`) receives them: the first is where a model's layers start.
pub const FEATURES_INPUTS: &[&str] = &["features"];
pub const IMAGE_INPUTS: &[&str] = &["image"];
/// Texts and token ids: the ids, and a mask of 1 for a token and 0 for padding.
pub const TOKEN_INPUTS: &[&str] = &["tokens", "mask"];

/// `data.inputs.NAME`: a model input from a file of its own. Its path is not in the cache
/// key (its content is, as a stage input of role `input NAME`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputSpec {
    pub name: String,
    #[serde(skip)]
    pub source: Spanned<PathBuf>,
    pub format: DataFormat,
    /// CSV and Parquet: the columns (empty: every one); NPZ / safetensors: the array's
    /// name, alone.
    #[serde(serialize_with = "one_or_many")]
    pub features: Vec<Column>,
    pub scale: Scale,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

impl DataSpec {
    /// The inputs the data file itself gives, by name, in order.
    pub fn own_inputs(&self) -> &'static [&'static str] {
        if self.format.is_images() {
            IMAGE_INPUTS
        } else if self.text.is_some() || self.padding_id.is_some() {
            TOKEN_INPUTS
        } else {
            FEATURES_INPUTS
        }
    }

    /// Every model input, by name, in the order a model receives them: the data file's,
    /// then `data.inputs`' in the order written, then the categorical columns encoded by
    /// index.
    pub fn inputs(&self) -> Vec<String> {
        self.own_inputs()
            .iter()
            .map(|n| n.to_string())
            .chain(self.extra_inputs.iter().map(|i| i.name.clone()))
            .chain(self.index_inputs())
            .collect()
    }

    /// The inputs of the categorical columns encoded by index, in the order written
    /// (lowering makes sure each names one column).
    pub fn index_inputs(&self) -> Vec<String> {
        self.categorical
            .iter()
            .filter(|c| c.encoding == Encoding::Index)
            .filter_map(CategoricalSpec::input_name)
            .collect()
    }
}

choice! {
    /// How the data's features are held while training (`data.load`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum Load {
        /// `stream` for NPY and Parquet features larger than [`STREAM_ABOVE_BYTES`] as
        /// float32 (that `stream` can read as they are) and images whose held pixels
        /// would be, else `memory`.
        Auto = "auto",
        /// Read whole into memory (on the device; images as 8-bit pixels).
        Memory = "memory",
        /// Read per batch from the `.npy` file(s), or images decoded per batch, ahead of
        /// the math.
        Stream = "stream",
    }
}

/// `load "auto"` streams NPY and Parquet features larger than this as float32 (1 GiB).
pub const STREAM_ABOVE_BYTES: u64 = 1 << 30;

choice! {
    /// Where `data.text` pads a short text.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum PaddingSide {
        Right = "right",
        Left = "left",
    }
}

/// `data.text`: a text column and how it becomes token ids.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextSpec {
    pub column: Column,
    /// Its content is in the cache key (an input of role `tokenizer`), not its path.
    #[serde(skip)]
    pub tokenizer: Spanned<PathBuf>,
    pub max_length: u64,
    pub padding_side: PaddingSide,
    pub add_special_tokens: bool,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// `data.images`: the channels images are read as, and the transforms applied in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageSpec {
    /// 1 (grey) or 3 (RGB).
    pub channels: u32,
    pub transforms: Vec<TransformSpec>,
}

impl ImageSpec {
    /// The size of a sample after the transforms for images of `size` (`None`: unknown
    /// until an image is read), or the first transform that cannot take it.
    pub fn size(
        &self,
        size: Option<crate::transforms::Size>,
    ) -> Result<Option<crate::transforms::Size>, (&TransformSpec, crate::layers::ShapeError)> {
        self.transforms
            .iter()
            .try_fold(size, |x, t| t.transform.size(x).map_err(|e| (t, e)))
    }

    /// `normalize`'s mean and standard deviation per channel (`[0]` and `[1]` without it).
    pub fn normalization(&self) -> (Vec<f64>, Vec<f64>) {
        let (mean, std) = self
            .transforms
            .iter()
            .find_map(|t| t.transform.normalization())
            .unwrap_or((&[0.0], &[1.0]));
        let per_channel = |v: &[f64]| match v {
            [one] => vec![*one; self.channels as usize],
            many => many.to_vec(),
        };
        (per_channel(mean), per_channel(std))
    }
}

/// One transform where it was written; serialised as the transform alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct TransformSpec {
    pub transform: crate::transforms::Transform,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// How a CSV file is written: `data.delimiter`, `header`, `skip-rows`, `comment`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dialect {
    pub delimiter: Delimiter,
    pub header: bool,
    /// Lines skipped before the header (or the first row): a metadata line.
    pub skip_rows: u64,
    /// Lines starting with this byte are skipped.
    #[serde(serialize_with = "as_char")]
    pub comment: Option<u8>,
}

impl CategoricalSpec {
    /// The model input of an `index` encoding: `input`, else the one column's name
    /// (`None` when it has neither: lowering refuses that).
    pub fn input_name(&self) -> Option<String> {
        match (&self.input, self.columns.as_slice()) {
            (Some(name), _) => Some(name.clone()),
            (None, [Column::Name(name)]) => Some(name.clone()),
            _ => None,
        }
    }
}

impl DataSpec {
    /// Whether the data file is a table whose columns have names: a text table with
    /// `header`, or one whose file names them (Parquet).
    pub fn has_header(&self) -> bool {
        self.format.has_header(&self.dialect)
    }

    /// NPZ / safetensors: the name of the features array.
    pub fn features_array(&self) -> &str {
        match self.features.as_slice() {
            [Column::Name(name)] => name,
            _ => "x",
        }
    }
}

/// One layer where it was written. Serialised as the layer alone
/// (`{"kind": "linear", "out": 10, "bias": true}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct LayerSpec {
    pub layer: Layer,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

choice! {
    /// How a `residual` block meets a body whose output shape is not its input's.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Projection {
        /// A learned projection of the input: a 1×1 convolution (with the stride that
        /// matches the sizes) or a linear map of the last dimension, without bias.
        Auto = "auto",
        /// None: the shapes must match.
        None = "none",
    }
}

choice! {
    /// How the outputs of a `parallel` block's branches become one.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Join {
        Concat = "concat",
        Add = "add",
    }
}

/// One node of a model: a layer, or a structure of nodes. A model is a list of nodes
/// applied in order (`nn.Sequential`); structures nest.
///
/// Serialised for the cache key as `{"kind": …, settings…}`, with the bodies as lists:
/// block uses are expanded (what a block computes is in the key, not its name).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Node {
    /// `residual { … }`: the body's output plus its input (projected when asked).
    Residual {
        body: Vec<Node>,
        projection: Projection,
        #[serde(skip)]
        span: Option<SourceSpan>,
    },
    /// `repeat N { … }`: N copies of the body in a row, each with weights of its own.
    Repeat {
        times: u64,
        body: Vec<Node>,
        #[serde(skip)]
        span: Option<SourceSpan>,
    },
    /// `parallel "concat" { branch { … } branch { … } }`: every branch on the same input,
    /// the outputs joined.
    Parallel {
        branches: Vec<Vec<Node>>,
        /// The model input each branch starts from (`branch input="image"`); `None`: the
        /// `parallel` block's input. Empty when every branch takes the block's input.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        inputs: Vec<Option<Spanned<String>>>,
        join: Join,
        /// The sample dimension `concat` joins along (negative: from the end).
        dim: i64,
        #[serde(skip)]
        span: Option<SourceSpan>,
    },
    /// A use of a named `block`, expanded: its body with the parameters filled in.
    Block {
        #[serde(skip)]
        name: String,
        body: Vec<Node>,
        #[serde(skip)]
        span: Option<SourceSpan>,
    },
    #[serde(untagged)]
    Layer(LayerSpec),
}

impl Node {
    /// Where the node was written.
    pub fn span(&self) -> Option<SourceSpan> {
        match self {
            Node::Residual { span, .. }
            | Node::Repeat { span, .. }
            | Node::Parallel { span, .. }
            | Node::Block { span, .. } => *span,
            Node::Layer(l) => l.span,
        }
    }

    /// Every layer in this node, in the order they are written.
    fn collect<'m>(&'m self, out: &mut Vec<&'m LayerSpec>) {
        match self {
            Node::Layer(l) => out.push(l),
            Node::Residual { body, .. } | Node::Repeat { body, .. } | Node::Block { body, .. } => {
                body.iter().for_each(|n| n.collect(out))
            }
            Node::Parallel { branches, .. } => {
                branches.iter().flatten().for_each(|n| n.collect(out))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// The layers and structures (none for a TorchScript model).
    pub nodes: Vec<Node>,
    /// A module scripted in Python, which is then the whole model. Its path is not in the
    /// cache key (the file's content is, as a stage input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torchscript: Option<TorchScriptSpec>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// `metric "brier" { torchscript "brier.pt"; mode "min" }`: a metric scripted in Python.
/// Its name and direction are in the key of each stage that measures it, the file's
/// content among the stage's inputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSpec {
    pub name: Spanned<String>,
    #[serde(skip)]
    pub script: TorchScriptSpec,
    pub mode: Mode,
    /// The node, for diagnostics.
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// `model { torchscript "net.pt" }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorchScriptSpec {
    /// The path as written, relative to the manifest's directory.
    #[serde(skip)]
    pub path: Spanned<PathBuf>,
    /// The path resolved against the manifest's directory.
    #[serde(skip)]
    pub file: PathBuf,
}

impl ModelSpec {
    /// Every layer written in the model (a repeated body once), in order.
    pub fn layers(&self) -> Vec<&LayerSpec> {
        let mut out = Vec::new();
        self.nodes.iter().for_each(|n| n.collect(&mut out));
        out
    }
}

pub use crate::losses::{Loss, LossDescription, Target};

/// `class-weights`: given, or computed from the training split.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassWeights {
    Balanced,
    Given(Vec<f64>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LossSpec {
    pub kind: LossKind,
    pub label_smoothing: f64,
    /// Cross-entropy and NLL. Left out of the serialised form when absent (as are the
    /// two below), so that keys from before them stay valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class_weights: Option<Spanned<ClassWeights>>,
    /// Binary cross-entropy: one weight, or one per output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pos_weight: Option<Spanned<Vec<f64>>>,
    /// Huber's `delta` (`huber` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// A registered member's own keys (numbers), defaults applied.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, f64>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// What computes the loss: a registered member, or a module scripted in Python.
#[derive(Debug, Clone, PartialEq)]
pub enum LossKind {
    Member(Loss),
    Script {
        script: TorchScriptSpec,
        target: Target,
    },
}

/// A member as its name (as the enum before the registry was: keys from then stay valid);
/// a script as `{"torchscript": {"target": …}}` (its content is in the key as an input).
impl Serialize for LossKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            LossKind::Member(loss) => loss.serialize(s),
            LossKind::Script { target, .. } => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("torchscript", &BTreeMap::from([("target", target)]))?;
                map.end()
            }
        }
    }
}

impl LossKind {
    /// The member's name, or `torchscript`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LossKind::Member(loss) => loss.as_str(),
            LossKind::Script { .. } => "torchscript",
        }
    }

    pub fn target(&self) -> Target {
        match self {
            LossKind::Member(loss) => loss.target(),
            LossKind::Script { target, .. } => *target,
        }
    }

    /// Whether labels are class indices (and accuracy is reported).
    pub fn is_classification(&self) -> bool {
        self.target() == Target::Classes
    }

    /// Whether targets are values to approach (regression: R², `mse`, `mae`, …).
    pub fn is_regression(&self) -> bool {
        self.target() == Target::Values
    }

    /// The scripted module, for a `torchscript` loss.
    pub fn script(&self) -> Option<&TorchScriptSpec> {
        match self {
            LossKind::Member(_) => None,
            LossKind::Script { script, .. } => Some(script),
        }
    }
}

impl LossSpec {
    /// The value of the member's own key `name` (its default when not written).
    pub fn setting(&self, name: &str) -> Option<f64> {
        self.settings.get(name).copied()
    }
}

pub use crate::optimizers::{Optimizer, OptimizerDescription};

/// The optimizer; keys that do not apply to `kind` keep their defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OptimizerSpec {
    pub kind: Optimizer,
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub alpha: f64,
    pub centered: bool,
    /// A registered member's own keys (numbers), defaults applied.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, f64>,
    /// `group` nodes: parameters with settings of their own, the first match winning.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<ParamGroup>,
}

impl OptimizerSpec {
    /// The value of the member's own key `name` (its default when not written).
    pub fn setting(&self, name: &str) -> Option<f64> {
        self.settings.get(name).copied()
    }

    /// The settings of the parameters of `group`: the optimizer's, with the group's own
    /// in their place (and no groups).
    pub fn in_group(&self, group: &ParamGroup) -> OptimizerSpec {
        OptimizerSpec {
            lr: group.lr.unwrap_or(self.lr),
            weight_decay: group.weight_decay.unwrap_or(self.weight_decay),
            momentum: group.momentum.unwrap_or(self.momentum),
            beta1: group.beta1.unwrap_or(self.beta1),
            beta2: group.beta2.unwrap_or(self.beta2),
            eps: group.eps.unwrap_or(self.eps),
            groups: Vec::new(),
            ..self.clone()
        }
    }
}

/// `optimizer { group "*.bias" weight-decay=0 }`: the parameters whose names one of
/// `params` matches (glob patterns), and what they set (absent: the optimizer's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamGroup {
    pub params: Vec<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub momentum: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta1: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub beta2: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eps: Option<f64>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// `schedule "reduce-on-plateau" monitor="val.loss" factor=0.1 patience=10 …`: PyTorch's
/// `ReduceLROnPlateau` (relative threshold), decided at every validation.
#[derive(Debug, Clone, PartialEq)]
pub struct PlateauSpec {
    pub monitor: Spanned<Monitor>,
    /// As written; absent, the monitored metric's own direction.
    pub mode: Option<Mode>,
    pub factor: f64,
    pub patience: u64,
    pub threshold: f64,
    pub cooldown: u64,
    pub min_lr: f64,
}

/// What `reduce-on-plateau` watches: [`crate::schedules::ScheduleKind::plateau`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlateauWatch {
    pub monitor: Spanned<Monitor>,
    /// As written; absent, the monitored metric's own direction.
    pub mode: Option<Mode>,
}

choice! {
    /// What a schedule counts: optimizer steps or epochs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Interval {
        Step = "step",
        Epoch = "epoch",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleSpec {
    pub kind: ScheduleKind,
    pub warmup_epochs: u64,
    /// As written; absent, the kind's own (epochs for `step`, optimizer steps for the
    /// others). Left out of the serialised form when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// `schedule { torchscript "lr.pt" }`: a scripted `forward(step, epoch)` gives the
    /// factor on the peak rate instead of a curve (`kind` is then `constant`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<TorchScriptSpec>,
}

impl ScheduleSpec {
    /// What the schedule counts.
    pub fn interval(&self) -> Interval {
        self.interval.unwrap_or(self.kind.member.describe().counts)
    }
}

pub use crate::accelerator::{Accelerator, DeviceSpec, Precision, Strategy};
pub use crate::schedules::{Schedule, ScheduleDescription, ScheduleKind};

choice! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum LossScale {
        Dynamic = "dynamic",
        Off = "off",
    }
}

/// How gradients are clipped before each optimizer step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Clipping {
    /// Clip the total `norm_type`-norm to this.
    pub max_norm: Option<f64>,
    pub norm_type: f64,
    /// Clamp each element to [-value, value].
    #[serde(rename = "clip_value")]
    pub value: Option<f64>,
}

impl Clipping {
    /// Whether gradients are clipped at all.
    pub fn enabled(&self) -> bool {
        self.max_norm.is_some() || self.value.is_some()
    }
}

choice! {
    /// The engine of a distributed run's collectives.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum CommBackend {
        /// NCCL on CUDA, Gloo on the CPU.
        Auto = "auto",
        Gloo = "gloo",
        Nccl = "nccl",
    }
}

choice! {
    /// `accelerator.shard-remainder`; lowered to [`Distributed::drop_remainder`] (the
    /// serialised form, a cache key, predates this enum).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ShardRemainder {
        Pad = "pad",
        Drop = "drop",
    }
}

choice! {
    /// `accelerator.sampler`; lowered to [`Distributed::bucketed`] (the serialised form,
    /// a cache key, predates this enum).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SamplerName {
        Distributed = "distributed",
        Bucketed = "bucketed",
    }
}

/// The distributed side of the accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distributed {
    pub strategy: Strategy,
    pub backend: CommBackend,
    /// Batch-norm statistics over every process's share of the batch. Left out of the
    /// serialised form (the cache key) when off, so that keys from before it stay valid.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sync_batch_norm: bool,
    /// Drop (instead of pad) the samples that do not divide among the processes.
    pub drop_remainder: bool,
    /// `Some(feature)`: the bucketed sampler, sorting by that feature.
    pub bucket_by: Option<u64>,
    /// Whether `sampler "bucketed"` was asked for (with or without `bucket-by`).
    pub bucketed: bool,
    pub buckets: u64,
    pub bucket_mb: f64,
    pub timeout_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcceleratorSpec {
    pub device: DeviceSpec,
    pub precision: Precision,
    /// As written; `None` means dynamic under `16-mixed` and none otherwise.
    pub loss_scale: Option<LossScale>,
    pub accumulate: u64,
    /// Serialised flat, so that keys and explanations read `accelerator.max-norm`.
    #[serde(flatten)]
    pub clipping: Clipping,
    pub deterministic: bool,
    pub threads: Option<u64>,
    pub distributed: Distributed,
    /// Where each key was written (absent for defaults and `--set`), for diagnostics.
    #[serde(skip)]
    pub spans: BTreeMap<&'static str, SourceSpan>,
    /// The keys given with `--set`, each with its `PATH=VALUE`, for diagnostics.
    #[serde(skip)]
    pub from_set: BTreeMap<&'static str, String>,
}

impl AcceleratorSpec {
    /// Where `key` (e.g. `"precision"`) was written, if in the file.
    pub fn span(&self, key: &str) -> Option<SourceSpan> {
        self.spans.get(key).copied()
    }

    /// The `PATH=VALUE` of the `--set` that gave `key`, if one did.
    pub fn from_set(&self, key: &str) -> Option<&str> {
        self.from_set.get(key).map(String::as_str)
    }

    /// Whether `key` was given at all, in the file or with `--set`.
    pub fn is_given(&self, key: &str) -> bool {
        self.spans.contains_key(key) || self.from_set.contains_key(key)
    }

    /// Whether a dynamic loss scaler runs: a precision that needs one (`16-mixed`) unless
    /// `loss-scale "off"`.
    pub fn scales_loss(&self) -> bool {
        self.precision.describe().loss_scaling && self.loss_scale != Some(LossScale::Off)
    }
}

choice! {
    /// The stage node names; [`crate::schema::stage`] gives each its schema.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum StageKind {
        Train = "train",
        Eval = "eval",
        Checkpoint = "checkpoint",
        Predict = "predict",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainSpec {
    pub epochs: u64,
    pub batch_size: u64,
    pub shuffle: bool,
    pub drop_last: bool,
    /// Save a resumable snapshot every this many epochs (0: never).
    pub snapshot_every_epochs: u64,
    /// … and every this many optimizer steps (0: only at epoch ends).
    pub snapshot_every_steps: u64,
    /// Starting weights from a file (instead of a fresh initialisation).
    pub init: Option<Spanned<PathBuf>>,
    /// Whether `init` must hold exactly the model's tensors (#false: those that match by
    /// name and shape are loaded, the others keep their fresh initialisation). Always
    /// true without `init`. Left out of the serialised form (the cache key) when true, so
    /// that keys from before it stay valid.
    #[serde(skip_serializing_if = "is_true")]
    pub strict: bool,
    /// Glob patterns on parameter names (`0.*`): the parameters the optimizer leaves
    /// alone. Left out of the serialised form when empty, as `strict`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub freeze: Vec<Spanned<String>>,
    /// Stop when a monitored metric stops improving. Left out of the serialised form
    /// when absent, as `freeze`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub early_stop: Option<EarlyStopSpec>,
    /// Keep the best weights by a monitored metric. Left out when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_best: Option<KeepBestSpec>,
    /// When to validate, and what. Left out when it is the default (every epoch).
    #[serde(skip_serializing_if = "ValidateSpec::is_default")]
    pub validate: ValidateSpec,
    /// Stop after this many optimizer steps in all. Left out when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    /// Stop after this many seconds of training (checked at optimizer steps). Left out
    /// when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_time: Option<f64>,
    /// Callbacks a program built on pipeline registered, turned on by name (in the key:
    /// a callback may end a training). Left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<Spanned<String>>,
    /// With `data.split folds=K`: the fold this stage holds out (the manifest's `train`
    /// stage is K stages, one per fold). Left out when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fold: Option<Fold>,
}

/// One training of k-fold cross-validation: it trains on the other folds and validates
/// on fold `index` (from 1) of `of`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fold {
    pub index: u64,
    pub of: u64,
    /// The `train` stage's name in the manifest (not keyed: a name never is).
    #[serde(skip)]
    pub training: String,
}

/// A value measured at every validation that `early-stop` and `keep-best` watch:
/// `loss` or `accuracy` of the training batches, or `val.METRIC`, any metric of one value
/// (`pipeline_core::metrics`) over the validation split. Written and serialised as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitor {
    /// Measured on the validation split (`val.`).
    pub validation: bool,
    /// `loss`, or a metric's name as written (`accuracy`, `f1-macro`, `top-3-accuracy`).
    pub metric: String,
}

impl Monitor {
    /// The monitor written `text`: `val.METRIC`, or a name of the training epoch's.
    /// Whether the metric exists is `pipeline check`'s to say.
    pub fn parse(text: &str) -> Monitor {
        match text.strip_prefix("val.") {
            Some(metric) => Monitor {
                validation: true,
                metric: metric.to_string(),
            },
            None => Monitor {
                validation: false,
                metric: text.to_string(),
            },
        }
    }

    /// Its name in an epoch's record and in `metrics.jsonl` (`val_loss`, `val_f1-macro`).
    pub fn record_key(&self) -> String {
        match self.validation {
            true => format!("val_{}", self.metric),
            false => self.metric.clone(),
        }
    }

    /// Whether it is the (training or validation) loss.
    pub fn is_loss(&self) -> bool {
        self.metric == "loss"
    }
}

impl std::fmt::Display for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.validation {
            true => write!(f, "val.{}", self.metric),
            false => f.write_str(&self.metric),
        }
    }
}

impl Serialize for Monitor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

choice! {
    /// Whether a monitored metric improves by going down or up.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Mode {
        Min = "min",
        Max = "max",
    }
}

/// `train { early-stop monitor="val.loss" mode="min" patience=5 min-delta=1e-4 }`: stop
/// after `patience` validations in which `monitor` did not improve on its best by more
/// than `min-delta`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EarlyStopSpec {
    pub monitor: Spanned<Monitor>,
    /// As written; absent, the monitored metric's own direction
    /// (`pipeline_core::metrics::mode_of`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    pub patience: u64,
    pub min_delta: f64,
    /// The block, for diagnostics.
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// `train { keep-best monitor="val.accuracy" k=3 }`: the weights of the `k` best
/// validations by `monitor` are outputs of the stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeepBestSpec {
    pub monitor: Spanned<Monitor>,
    /// As written; absent, the monitored metric's own direction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    pub k: u64,
    /// The block, for diagnostics.
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// `train { validate every-epochs=1 every-steps=0 { metrics "f1-macro" } }`: when the
/// validation split is measured, and which metrics besides its loss and accuracy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidateSpec {
    /// Validate at the end of every this many epochs (0: not at epoch ends).
    pub every_epochs: u64,
    /// … and every this many optimizer steps (0: not within epochs).
    pub every_steps: u64,
    /// Metrics besides the loss (and accuracy), as written.
    pub metrics: Vec<Spanned<String>>,
    /// The block, for diagnostics.
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

impl Default for ValidateSpec {
    fn default() -> ValidateSpec {
        ValidateSpec {
            every_epochs: 1,
            every_steps: 0,
            metrics: Vec::new(),
            span: None,
        }
    }
}

impl ValidateSpec {
    /// Whether it is what a stage without `validate` does (left out of the cache key).
    pub fn is_default(&self) -> bool {
        *self == ValidateSpec::default()
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalSpec {
    /// The split of the data file to evaluate on; ignored with `source`.
    pub split: Spanned<SplitName>,
    /// Another labelled file to evaluate on, whole, read as the data file is (its
    /// features scaled and filled with the training split's statistics). Its path is not
    /// in the cache key (its content is, as the stage input `source`).
    #[serde(skip)]
    pub source: Option<Spanned<PathBuf>>,
    /// Lines skipped at the top of `source` (the data's `skip-rows` is the data file's).
    /// Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub skip_rows: u64,
    /// Where the predictions of the samples evaluated go, as a `predict` stage writes
    /// them. Not in the cache key: the predictions are the same wherever they are written.
    #[serde(skip)]
    pub output: Option<Spanned<PathBuf>>,
    /// How they are written, by the output's name. Left out without an `output`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predictions: Option<PredictionFormat>,
    /// Which weights of the train stage it needs. Left out when `last`.
    #[serde(skip_serializing_if = "WeightsFrom::is_last")]
    pub from: Spanned<WeightsFrom>,
    pub batch_size: u64,
    /// Metrics computed besides the loss (`pipeline_core::metrics`), as written. Left
    /// out of the serialised form when empty, so that keys from before it stay valid.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Spanned<String>>,
    /// With `source`: the files of `data.inputs` for its samples.
    #[serde(skip)]
    pub inputs: Vec<InputFile>,
}

/// An `input "NAME" "FILE"` node of an `eval` with a `source`, or of a `predict` stage:
/// the file of `data.inputs`' input `NAME` for the samples of that source, one row per
/// sample in its order. Its path is not in the cache key (its content is, as a stage
/// input).
#[derive(Debug, Clone, PartialEq)]
pub struct InputFile {
    pub name: Spanned<String>,
    pub source: Spanned<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointSpec {
    pub path: Option<Spanned<PathBuf>>,
    /// Which weights of the train stage it exports. Left out when `last`.
    #[serde(skip_serializing_if = "WeightsFrom::is_last")]
    pub from: Spanned<WeightsFrom>,
}

/// `predict "scores" { needs "train"; source "new.csv"; output "predictions.csv" }`:
/// the trained model applied to a file without labels, with what training used (the
/// columns by name, the training split's scaling and filling, the class names, the
/// precision), one row of predictions per sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictSpec {
    /// The samples, read as the data file is (its format by its name). Not in the cache
    /// key (its content is, as the stage input `source`).
    #[serde(skip)]
    pub source: Spanned<PathBuf>,
    /// Where the predictions go (default: `<name>.csv` in the run directory). Not in the
    /// cache key: the predictions are the same wherever they are written.
    #[serde(skip)]
    pub output: Option<Spanned<PathBuf>>,
    /// How they are written, by the output's name.
    pub format: PredictionFormat,
    /// The source's column copied into the predictions beside `row` (a table's, by its
    /// header's name). In the key when given: the stored predictions hold it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Spanned<String>>,
    /// Lines skipped at the top of `source` (the data's `skip-rows` is the data file's).
    /// Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub skip_rows: u64,
    /// Which weights of the train stage it applies. Left out when `last`.
    #[serde(skip_serializing_if = "WeightsFrom::is_last")]
    pub from: Spanned<WeightsFrom>,
    pub batch_size: u64,
    /// The files of `data.inputs` for the source's samples.
    #[serde(skip)]
    pub inputs: Vec<InputFile>,
}

choice! {
    /// How a `predict` stage writes its predictions.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum PredictionFormat {
        /// A table with a header: the row, the predicted class (by name) and each class's
        /// probability, or the outputs.
        Csv = "csv",
        /// One float64 array, samples × outputs: the class probabilities, or the outputs.
        Npy = "npy",
    }
}

impl PredictionFormat {
    /// The format a file's name says (`.csv`, `.npy`; any case).
    pub fn of_name(path: &Path) -> Option<PredictionFormat> {
        let name = path.to_string_lossy().to_ascii_lowercase();
        PredictionFormat::ALL
            .iter()
            .copied()
            .find(|f| name.ends_with(&format!(".{}", f.as_str())))
    }
}

/// `from "last"` (the weights a `train` stage ended with) or `from "best"`, `"best-2"`, …
/// (one of the weights its `keep-best` kept, the best first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightsFrom {
    Last,
    /// The n-th best (1 = the best).
    Best(u64),
}

impl WeightsFrom {
    pub fn parse(text: &str) -> Option<WeightsFrom> {
        match text {
            "last" => Some(WeightsFrom::Last),
            "best" => Some(WeightsFrom::Best(1)),
            _ => text
                .strip_prefix("best-")
                .and_then(|n| n.parse().ok())
                .filter(|&n| n >= 1)
                .map(WeightsFrom::Best),
        }
    }

    pub fn is_last(from: &Spanned<WeightsFrom>) -> bool {
        from.value == WeightsFrom::Last
    }
}

impl std::fmt::Display for WeightsFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WeightsFrom::Last => f.write_str("last"),
            WeightsFrom::Best(1) => f.write_str("best"),
            WeightsFrom::Best(n) => write!(f, "best-{n}"),
        }
    }
}

impl Serialize for WeightsFrom {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a stage does, with its kind-specific settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
// A manifest holds a handful of stages: their size does not matter, and a box would
// complicate every match on a train stage's fields.
#[allow(clippy::large_enum_variant)]
pub enum StageConfig {
    Train(TrainSpec),
    Eval(EvalSpec),
    Checkpoint(CheckpointSpec),
    Predict(PredictSpec),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageSpec {
    pub name: Spanned<String>,
    pub needs: Vec<Spanned<String>>,
    pub config: StageConfig,
    /// The whole stage node.
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

impl StageSpec {
    /// The training a `train` stage is: its own name, or for one fold of k-fold
    /// cross-validation (`NAME.fold-2`) the name of the manifest's stage, `NAME`.
    pub fn training(&self) -> &str {
        match &self.config {
            StageConfig::Train(TrainSpec {
                fold: Some(fold), ..
            }) => &fold.training,
            _ => self.name(),
        }
    }

    pub fn kind(&self) -> StageKind {
        match self.config {
            StageConfig::Train(_) => StageKind::Train,
            StageConfig::Eval(_) => StageKind::Eval,
            StageConfig::Checkpoint(_) => StageKind::Checkpoint,
            StageConfig::Predict(_) => StageKind::Predict,
        }
    }

    /// Which weights of the `train` stage it needs a stage takes (`None`: a `train`
    /// stage, which starts from its source's last weights).
    pub fn weights_from(&self) -> Option<&Spanned<WeightsFrom>> {
        match &self.config {
            StageConfig::Train(_) => None,
            StageConfig::Eval(e) => Some(&e.from),
            StageConfig::Checkpoint(c) => Some(&c.from),
            StageConfig::Predict(p) => Some(&p.from),
        }
    }

    pub fn name(&self) -> &str {
        &self.name.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant serialises (in the specs, so in cache keys) to the string a manifest
    /// writes for it: the serde attributes and the `choice!` names agree.
    #[test]
    fn choices_serialise_to_their_manifest_names() {
        fn check<T: Serialize + Copy + std::fmt::Debug>(all: &[T], as_str: fn(T) -> &'static str) {
            for &v in all {
                assert_eq!(
                    serde_json::to_value(v).unwrap(),
                    serde_json::Value::from(as_str(v)),
                    "{v:?}"
                );
            }
        }
        check(&DataFormat::all(), DataFormat::as_str);
        for format in DataFormat::all() {
            assert_eq!(DataFormat::parse(format.as_str()), Some(format));
        }
        check(PaddingSide::ALL, PaddingSide::as_str);
        check(Scale::ALL, Scale::as_str);
        check(SplitName::ALL, SplitName::as_str);
        for name in crate::losses::LOSSES.names() {
            let loss = Loss::named(name).unwrap();
            assert_eq!(
                serde_json::to_value(loss).unwrap(),
                serde_json::Value::from(name)
            );
        }
        for name in crate::optimizers::OPTIMIZERS.names() {
            let optimizer = Optimizer::named(name).unwrap();
            assert_eq!(
                serde_json::to_value(optimizer).unwrap(),
                serde_json::Value::from(name)
            );
        }
        check(LossScale::ALL, LossScale::as_str);
        check(CommBackend::ALL, CommBackend::as_str);
        check(StageKind::ALL, StageKind::as_str);
        check(PredictionFormat::ALL, PredictionFormat::as_str);
        for name in crate::schedules::SCHEDULES.names() {
            let kind = ScheduleKind {
                member: crate::schedules::Schedule::named(name).unwrap(),
                settings: Default::default(),
                plateau: None,
            };
            assert_eq!(kind.name(), name);
            assert_eq!(serde_json::to_value(&kind).unwrap()["kind"], name);
        }
    }

    #[test]
    fn parse_and_as_str_are_inverse() {
        for s in StageKind::ALL {
            assert_eq!(StageKind::parse(s.as_str()), Some(*s));
        }
        assert_eq!(Loss::named(""), None);
    }
}

/// `sweep { grid { … } random trials=N { … } monitor … mode … jobs … halving … }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepSpec {
    /// Swept keys and their values as `--set` takes them, in the order written.
    pub grid: Vec<SweptKey>,
    /// Keys drawn at random: each with one value, how it is drawn (`log(1e-4,1e-2)`).
    pub random: Vec<SweptKey>,
    pub trials: u64,
    /// Where `trials` is written, for diagnostics.
    #[serde(skip)]
    pub trials_span: Option<SourceSpan>,
    pub seed: u64,
    pub monitor: Option<Spanned<String>>,
    pub mode: Option<Mode>,
    pub jobs: u64,
    pub halving: Option<HalvingSpec>,
    /// The block, for diagnostics.
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}

/// One swept key of a `sweep` block: `optimizer.lr 1e-3 3e-3`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweptKey {
    /// As written (`optimizer.lr`), located.
    pub key: Spanned<String>,
    /// Each value as `--set` takes it, located.
    pub values: Vec<Spanned<String>>,
}

/// `halving min-epochs=2 eta=3 stage="train"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HalvingSpec {
    pub min_epochs: u64,
    pub eta: u64,
    pub stage: Option<Spanned<String>>,
    #[serde(skip)]
    pub span: Option<SourceSpan>,
}
