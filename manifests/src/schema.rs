//! The schema of the manifest language: every node and key, its type, default and
//! one-line documentation, in one table.
//!
//! Lowering (`lower.rs`) is driven by this table, so a key cannot be accepted without
//! being documented here; "did you mean" suggestions and `pipeline explain` read it too.
//!
//! A section's keys may be written as properties (`optimizer "adam" lr=1e-3`) or as
//! child nodes (`optimizer "adam" { lr 1e-3 }`); positional arguments fill the keys
//! named in [`Section::args`] in order.
//!
//! The `Ty::Choice` lists are the `NAMES` of the enums the values lower to (`choice!`,
//! `manifest.rs`), so a name cannot be accepted here and be unknown to lowering.

use crate::accelerator::Family;
use crate::manifest::{
    CommBackend, Delimiter, Encoding, Join, Load, LossScale, Missing, Mode, PaddingSide,
    Projection, SamplerName, Scale, ShardRemainder, StageKind,
};

/// A node of the manifest: a top-level section, a stage kind, or a model layer.
#[derive(Debug)]
pub struct Section {
    pub name: &'static str,
    pub doc: &'static str,
    /// Keys filled by positional arguments, in order. A list-typed key takes the rest.
    pub args: &'static [&'static str],
    pub keys: &'static [Key],
    /// Whether the node's children are keys or model layers.
    pub children: Children,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    Keys,
    /// Model nodes: layers, structures (`residual`, `repeat`, `parallel`), block uses.
    Layers,
    /// `branch { … }` nodes (a `parallel` block's).
    Branches,
    /// Image transforms (`data.images`'), applied in order.
    Transforms,
    /// Model inputs from files of their own (`data.inputs`'), each node named after one.
    Inputs,
    /// Swept manifest keys (`sweep`'s `grid` and `random`), each node named by the key as
    /// `--set` writes it, its values after it.
    Swept,
    /// Keys, and nodes of these sections as often as written, each read on its own
    /// (`optimizer`'s `group` nodes, `data`'s `categorical` and `date` nodes).
    Repeated(&'static [&'static Section]),
}

/// Sections are the statics of the schema: one is another when it is the same static.
impl PartialEq for Section {
    fn eq(&self, other: &Section) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Section {}

/// One key of a [`Section`].
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    pub doc: &'static str,
    pub ty: Ty,
    /// The value used when the key is absent; `None` means "absent" is meaningful.
    pub default: Option<Val>,
    pub required: bool,
    /// When not empty: the values of the section's `kind` key this key applies to.
    pub only_for: &'static [&'static str],
}

/// A bound of a numeric range.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    None,
    Inclusive(f64),
    Exclusive(f64),
}

/// The type of a key's value.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    /// An integer from `min` to `max`, both included: every integer key has a maximum,
    /// so a value that could not be meant (or would overflow later) stops at `check`.
    Int {
        min: i64,
        max: i64,
    },
    Float {
        min: Bound,
        max: Bound,
    },
    Bool,
    Text,
    /// A file path, relative to the manifest's directory.
    Path,
    /// One of a fixed set of strings (integers are accepted by their decimal text).
    Choice(&'static [&'static str]),
    /// The name of a registered member of an open set (`crate::accelerator`): the
    /// built-ins and what a library user registered.
    Member(Family),
    /// `auto`, or a registered accelerator (`cpu`, `cuda`, `cuda:N`).
    Device,
    /// One or more columns: 0-based indices, header names, `first`, `last`, or
    /// half-open ranges of indices (`"2..10"`).
    Columns,
    /// One or more strings (all remaining arguments).
    Texts,
    /// One or more names of registered members of an open set (all remaining
    /// arguments): `callbacks "epochs-csv" "wandb"`.
    Members(Family),
    /// One or more metric names (all remaining arguments): the metrics `pipeline_core`
    /// computes and those a program registered there, which this crate cannot list.
    Metrics,
    /// One or more integers from 1 to `max` (all remaining arguments).
    Ints {
        max: i64,
    },
    /// One or more numbers within bounds (all remaining arguments, or the values of a
    /// child node: `mean 0.485 0.456 0.406`).
    Floats {
        min: Bound,
        max: Bound,
    },
    /// `"balanced"`, or one or more positive numbers (class weights).
    Weights,
    /// A nested section, written as a child node with its own keys.
    Section(&'static Section),
}

/// A default value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(&'static str),
}

impl Ty {
    /// Words for "what this key wants", used in type-mismatch messages.
    pub fn describe(&self) -> String {
        match self {
            Ty::Int { min, max } => format!("an integer from {min} to {max}"),
            Ty::Float { min, max } => format!("a number{}", range_words(*min, *max)),
            Ty::Floats { min, max } => {
                format!("one or more numbers{}", range_words(*min, *max))
            }
            Ty::Bool => "#true or #false".into(),
            Ty::Text => "a string".into(),
            Ty::Path => "a file path (a string)".into(),
            Ty::Choice(choices) => one_of(choices),
            Ty::Member(family) => one_of(&family.names()),
            Ty::Device => {
                let mut names: Vec<String> = crate::accelerator::ACCELERATORS
                    .all()
                    .iter()
                    .map(|a| match a.indexed {
                        true => format!("\"{0}\", \"{0}:N\"", a.name),
                        false => format!("\"{}\"", a.name),
                    })
                    .collect();
                names.push("or \"auto\"".into());
                names.join(", ").replace(", or", " or")
            }
            Ty::Columns => format!(
                "one or more columns: an index (0 to {MAX_FEATURE_INDEX}), a header name, \"first\", \"last\", or a range \"2..10\" (columns 2 to 9)"
            ),
            Ty::Texts => "one or more strings".into(),
            Ty::Members(family) => match family.names() {
                names if names.is_empty() => "one or more names of registered members".into(),
                names => format!("one or more names, each {}", one_of(&names)),
            },
            Ty::Metrics => "one or more metric names".into(),
            Ty::Ints { max } => format!("one or more integers from 1 to {max}"),
            Ty::Weights => "\"balanced\", or one or more numbers > 0".into(),
            Ty::Section(s) => format!("a `{}` block", s.name),
        }
    }
}

impl Ty {
    /// The names a `Choice`, `Member` or `Members` key takes (none for other types).
    pub fn names(&self) -> Vec<&'static str> {
        match self {
            Ty::Choice(names) => names.to_vec(),
            Ty::Member(family) | Ty::Members(family) => family.names(),
            Ty::Int { .. }
            | Ty::Float { .. }
            | Ty::Bool
            | Ty::Text
            | Ty::Path
            | Ty::Device
            | Ty::Columns
            | Ty::Texts
            | Ty::Metrics
            | Ty::Ints { .. }
            | Ty::Floats { .. }
            | Ty::Weights
            | Ty::Section(_) => Vec::new(),
        }
    }
}

/// `one of "a", "b"`.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|c| format!("\"{c}\"")).collect();
    format!("one of {}", quoted.join(", "))
}

/// ` ≥ 0 and < 1`, ` > 0`, or nothing: the bounds of a number, in words.
fn range_words(min: Bound, max: Bound) -> String {
    let lo = match min {
        Bound::None => None,
        Bound::Inclusive(v) => Some(format!("≥ {v}")),
        Bound::Exclusive(v) => Some(format!("> {v}")),
    };
    let hi = match max {
        Bound::None => None,
        Bound::Inclusive(v) => Some(format!("≤ {v}")),
        Bound::Exclusive(v) => Some(format!("< {v}")),
    };
    match (lo, hi) {
        (Some(lo), Some(hi)) => format!(" {lo} and {hi}"),
        (Some(b), None) | (None, Some(b)) => format!(" {b}"),
        (None, None) => String::new(),
    }
}

impl Section {
    pub fn key(&self, name: &str) -> Option<&'static Key>
    where
        Self: 'static,
    {
        self.keys.iter().find(|k| k.name == name)
    }

    pub fn key_names(&self) -> Vec<&'static str> {
        self.keys.iter().map(|k| k.name).collect()
    }
}

// ---- helpers that keep the table below readable -------------------------------------

pub const fn key(name: &'static str, ty: Ty, default: Option<Val>, doc: &'static str) -> Key {
    Key {
        name,
        doc,
        ty,
        default,
        required: false,
        only_for: &[],
    }
}

pub const fn required(name: &'static str, ty: Ty, doc: &'static str) -> Key {
    Key {
        name,
        doc,
        ty,
        default: None,
        required: true,
        only_for: &[],
    }
}

pub const fn only(mut k: Key, kinds: &'static [&'static str]) -> Key {
    k.only_for = kinds;
    k
}

pub const fn int(min: i64, max: i64) -> Ty {
    Ty::Int { min, max }
}

// The largest values integer keys accept. Generous for any real run, small enough that
// nothing computed from them overflows and that a typo of a few extra digits is caught.

/// Seeds: any non-negative 64-bit signed integer.
pub const MAX_SEED: i64 = i64::MAX;
/// Epochs, warm-up and decay epochs, and snapshot intervals in epochs.
pub const MAX_EPOCHS: i64 = 1_000_000;
/// Snapshot intervals in optimizer steps.
pub const MAX_STEPS: i64 = 1_000_000_000;
/// Samples per batch.
pub const MAX_BATCH: i64 = 16_777_216;
/// Micro-batches per optimizer step, and buckets of the bucketed sampler.
pub const MAX_ACCUMULATE: i64 = 65_536;
/// CPU threads.
pub const MAX_THREADS: i64 = 1024;
/// A feature's index within a sample, and a CSV column's index.
pub const MAX_FEATURE_INDEX: i64 = 16_777_215;
/// Lines `data.skip-rows` may skip.
pub const MAX_SKIP_ROWS: i64 = 1_000_000;
/// Features of a `linear` layer's output, and the size of one dimension of `reshape`.
pub const MAX_FEATURES: i64 = 1_048_576;
/// Channels of a convolution's output, and the size of an embedding vector.
pub const MAX_CHANNELS: i64 = 65_536;
/// Kernel sizes, strides and paddings of convolutions and pools.
pub const MAX_KERNEL: i64 = 1024;
/// Distinct token ids of an embedding.
pub const MAX_TOKENS: i64 = 16_777_216;
/// Seconds of `accelerator.timeout` (a week).
pub const MAX_TIMEOUT: f64 = 604_800.0;
/// The N of `cuda:N`.
pub const MAX_CUDA_INDEX: usize = 1023;

pub const POSITIVE: Ty = Ty::Float {
    min: Bound::Exclusive(0.0),
    max: Bound::None,
};
pub const NON_NEGATIVE: Ty = Ty::Float {
    min: Bound::Inclusive(0.0),
    max: Bound::None,
};
pub(crate) const FRACTION: Ty = Ty::Float {
    min: Bound::Inclusive(0.0),
    max: Bound::Inclusive(1.0),
};
pub const PROBABILITY_BELOW_ONE: Ty = Ty::Float {
    min: Bound::Inclusive(0.0),
    max: Bound::Exclusive(1.0),
};

pub(crate) const fn section(
    name: &'static str,
    args: &'static [&'static str],
    keys: &'static [Key],
    doc: &'static str,
) -> Section {
    Section {
        name,
        doc,
        args,
        keys,
        children: Children::Keys,
    }
}

// ---- top-level sections -------------------------------------------------------------

pub const PIPELINE: Section = section(
    "pipeline",
    &["name"],
    &[required(
        "name",
        Ty::Text,
        "The pipeline's name, shown in summaries and checkpoint metadata.",
    )],
    "Names the pipeline.",
);

pub const SEED: Section = section(
    "seed",
    &["value"],
    &[key(
        "value",
        int(0, MAX_SEED),
        Some(Val::Int(0)),
        "Seed for the data split, data order, initialisation and dropout.",
    )],
    "The random seed that makes a run reproducible.",
);

/// The most folds of `split folds=K`.
pub const MAX_FOLDS: i64 = 100;

pub const SPLIT: Section = section(
    "split",
    &[],
    &[
        key(
            "train",
            FRACTION,
            Some(Val::Float(0.8)),
            "Fraction of the samples used for training (with `folds`: cut into the folds, `1 - test` unless written).",
        ),
        key(
            "val",
            FRACTION,
            Some(Val::Float(0.0)),
            "Fraction held out for validation after every epoch.",
        ),
        key(
            "test",
            FRACTION,
            Some(Val::Float(0.2)),
            "Fraction held out for `eval` stages (with `folds`: 0 unless written).",
        ),
        key(
            "seed",
            int(0, MAX_SEED),
            None,
            "Seed of the shuffle before splitting (default: the pipeline's seed).",
        ),
        key(
            "shuffle",
            Ty::Bool,
            Some(Val::Bool(true)),
            "Shuffle before splitting; #false keeps the file's order (train first, then val, then test).",
        ),
        key(
            "stratify",
            Ty::Bool,
            Some(Val::Bool(false)),
            "Split each class in the same fractions, so that every split has the classes in the data's proportions (classification only).",
        ),
        key(
            "folds",
            int(2, MAX_FOLDS),
            None,
            "k-fold cross-validation: the samples outside `test` are cut into this many folds (as scikit-learn's `KFold`, or `StratifiedKFold` with `stratify`), and each `train` stage trains once per fold (`NAME.fold-1`, …), validating on the fold it holds out. An `eval` stage that needs it evaluates every fold's model (without `split`: on its held-out fold) and reports the folds' mean and standard deviation. `test` is 0 unless written; there is no `val`.",
        ),
    ],
    "How the samples are shuffled and split into train / val / test, or into folds.",
);

/// The longest window (`data.window`'s `length`), horizon and stride.
pub const MAX_WINDOW: i64 = 1 << 20;

pub const WINDOW: Section = section(
    "window",
    &[],
    &[
        required(
            "length",
            int(1, MAX_WINDOW),
            "Rows per sample: a sample is `length` consecutive rows of the features, a (length × features) sequence.",
        ),
        key(
            "horizon",
            int(0, MAX_WINDOW),
            Some(Val::Int(1)),
            "How many rows after the window's last row its label is read: 1, the next row's; 0, the last row's own.",
        ),
        key(
            "stride",
            int(1, MAX_WINDOW),
            Some(Val::Int(1)),
            "Rows from one window's start to the next's.",
        ),
        key(
            "time",
            Ty::Text,
            None,
            "A column (by the header's name) whose values, numbers or dates and times, order the rows before they are windowed (rows of the same time keep the file's order); a missing or unreadable value is an error naming its row. It stays a feature if `features` reads it (a date's parts); list `features` to leave it out. Default: the file's order.",
        ),
    ],
    "Time-series windows (tables and `.npy` rows): `window length=24 horizon=1 stride=1` turns the rows, in the file's order (or `time`'s), into samples of `length` consecutive rows, each labelled with the label column `horizon` rows after its last row. The split is in time order (the windows cut train first, then val, then test, by where their labels lie), so no split gives a window whose label lies in an earlier one; `shuffle` does not apply. Filling and scaling are fitted on the training windows' rows. `data.inputs` and columns encoded by index are windowed alike. A prediction is made for every complete window of the file predicted (its `row`: the window's last row).",
);

/// The `data.format` that goes by the file name's extension.
pub const AUTO_FORMAT: &str = "auto";

pub const DATA: Section = Section {
    children: Children::Repeated(&[&CATEGORICAL, &DATE]),
    ..section(
    "data",
    &["source"],
    &[
        required(
            "source",
            Ty::Path,
            "The data: a .csv, .csv.gz, .npy, .npz, .safetensors or .parquet file, `.npy` shards named by a pattern (`\"shards/x-*.npy\"`: every match, in name order, one data set; a labels file may be a pattern too), a directory of images with one sub-directory per class (`image-folder`), or a CSV listing images (`image-list`); relative to the manifest.",
        ),
        key(
            "format",
            Ty::Member(Family::DataFormat),
            Some(Val::Text(AUTO_FORMAT)),
            "The data's format; `auto` goes by the file name's extension, and a name without one is an `image-folder`. `image-list` (a CSV listing images: `features` names the column of paths, relative to the listing, default the first that is not a label; `label` the label column, default the last) must be written.",
        ),
        key(
            "header",
            Ty::Bool,
            Some(Val::Bool(false)),
            "CSV only (the data, or a CSV labels file): whether the first line (after `skip-rows`) names the columns.",
        ),
        key(
            "delimiter",
            Ty::Choice(Delimiter::NAMES),
            Some(Val::Text(Delimiter::Auto.as_str())),
            "CSV only (the data, or a CSV labels file): what separates fields; `auto` tells `,` `;` or tab from the first 32 lines (of those that split every line into the same number of fields, the one giving the most), else runs of whitespace (`whitespace`: spaces and tabs, no quoting). Fields may be quoted (`\"a, b\"`).",
        ),
        key(
            "skip-rows",
            int(0, MAX_SKIP_ROWS),
            Some(Val::Int(0)),
            "CSV only (the data, or a CSV labels file): lines skipped at the start, before the header: a metadata line whose field count differs from the rows.",
        ),
        key(
            "comment",
            Ty::Text,
            None,
            "CSV only (the data, or a CSV labels file): lines starting with this character are skipped (`comment \"#\"`).",
        ),
        key(
            "label",
            Ty::Columns,
            Some(Val::Text("last")),
            "CSV and Parquet: the label column, or several (multi-output regression); text labels (`yes`, class names) become class indices in sorted order, recorded in every checkpoint's metadata as `classes`. Not with a `labels` file.",
        ),
        key(
            "features",
            Ty::Columns,
            None,
            "CSV and Parquet: the feature columns, by name, index or range (`\"0..13\"`); default: every column that is not a label. NPZ / safetensors: the name of the features array (default `x`).",
        ),
        key(
            "labels",
            Ty::Text,
            None,
            "A separate labels file for any format: `.csv`, `.csv.gz` (every column a label, read like the data), `.parquet` (every column a label) or `.npy`, one row per sample, relative to the manifest. NPZ / safetensors: a name without such an extension is the labels array inside `source` (default `y`).",
        ),
        key(
            "missing",
            Ty::Choice(Missing::NAMES),
            Some(Val::Text(Missing::Error.as_str())),
            "A missing feature (an empty cell, `NA`, `N/A`, `NaN`, `nan`, `null`, `?`, or NaN in an array): `error` names the row and column; `drop-row` leaves the row out; `mean` / `median` fill it with the column's statistic over the training split.",
        ),
        key(
            "scale",
            Ty::Choice(Scale::NAMES),
            Some(Val::Text(Scale::None.as_str())),
            "Feature scaling, fitted on the training split only.",
        ),
        key(
            "scale-label",
            Ty::Choice(Scale::NAMES),
            Some(Val::Text(Scale::None.as_str())),
            "Regression only: the labels' scaling (each label column on its own), fitted on the training split. The loss trains on the scaled labels (`loss` and `val.loss` are in scaled units); every other metric (`mse`, `mae`, `rmse`, `r2`), each prediction and the checkpoint's `label_scaling` speak in the labels' own units.",
        ),
        key(
            "split",
            Ty::Section(&SPLIT),
            None,
            "The train / val / test split.",
        ),
        key(
            "window",
            Ty::Section(&WINDOW),
            None,
            "Time-series windows: each sample is some consecutive rows (`pipeline explain data.window`).",
        ),
        key(
            "text",
            Ty::Section(&TEXT),
            None,
            "CSV and Parquet: a text column tokenised into the features (`pipeline explain data.text`).",
        ),
        key(
            "images",
            Ty::Section(&IMAGES),
            None,
            "Image data: the channels images are read as, and the transforms applied to each (`pipeline explain data.images`).",
        ),
        key(
            "inputs",
            Ty::Section(&INPUTS),
            None,
            "More model inputs, each from a file of its own (`pipeline explain data.inputs`).",
        ),
        key(
            "load",
            Ty::Choice(Load::NAMES),
            Some(Val::Text(Load::Auto.as_str())),
            "How the features are held while training. `memory`: read whole (onto the device; images decoded once and held as 8-bit pixels). `stream`: `.npy` data (one file or shards) read per batch with positional reads, Parquet decoded once at the start into an unnamed float32 file and read from it the same way, or images decoded per batch, ahead of the math (`workers`, `prefetch`), so memory does not grow with the data set; labels and `data.inputs` stay in memory. For `.npy` and Parquet, two passes before training check every value and fit `scale` and `missing \"mean\"` (not `median`, not `padding-id`, not `text`); images are all decoded once at load to name a bad one. `auto`: `stream` when the features as float32 (images: their held pixels) pass 1 GiB and streaming can read them, else `memory`. Streamed `.npy` and Parquet scaling differs from the in-memory one in the last bits, so the cache key holds what `auto` resolves to; streamed images are the same pixels, so their key does not change.",
        ),
        key(
            "workers",
            int(0, 256),
            None,
            "Threads that assemble batches (read streamed features; decode, augment and collate images) while the model computes; default: one per core. 0 assembles each batch in the training thread when it is needed. The batches are the same whatever the count: not in the cache key.",
        ),
        key(
            "prefetch",
            int(1, 1024),
            Some(Val::Int(2)),
            "Batches assembled ahead of the one training (with `workers` above 0): memory holds this many batches more, and one being assembled. Not in the cache key.",
        ),
        key(
            "padding-id",
            int(0, MAX_TOKEN_ID),
            None,
            "Token ids stored as numbers (an integer `.npy`, say): the features are ids, and this one pads a sequence. The model then gets two inputs, `tokens` and `mask` (1 for a token, 0 for padding), as with `text`.",
        ),
        key(
            "max-categories",
            int(2, MAX_CATEGORIES),
            Some(Val::Int(50)),
            "CSV, JSON and Parquet: the most distinct values a categorical column may hold (a column of text, or one named by `categorical`); one with more (an id, a free-text name) is refused, naming the column and its count. Not in the cache key: it only refuses.",
        ),
    ],
    "Where the samples come from and how they are prepared.",
)
};

/// A `date` node inside `data`: columns of dates read as numbers.
pub static DATE: Section = section(
    "date",
    &["columns"],
    &[
        required(
            "columns",
            Ty::Columns,
            "The feature columns, by name, index or range.",
        ),
        key(
            "parts",
            Ty::Texts,
            Some(Val::Text("year month day-of-year")),
            "What each date gives, a feature each, in this order: `year`, `month` (1–12), `day` (of the month), `day-of-year` (1–366), `day-of-week` (0 for Monday … 6, as pandas' `dayofweek`), `hour`, `minute`, `days` (since 1970-01-01, with the time of day as a fraction).",
        ),
    ],
    "Feature columns of dates (CSV, JSON and Parquet, whose typed dates and timestamps are dates without being named): `date \"when\" parts=\"year month day-of-week\"` (or `date \"when\" { parts \"year\" \"month\" \"day-of-week\"; }`). A column whose every value is a date or a date-time (`2024-03-01`, `2024/03/01`, `2024-03-01 12:30:00`, ISO 8601 `2024-03-01T12:30:00Z`) is one without being named here, with the year, the month and the day of the year; name one to choose its parts, or to have a bad value refused. A column of dates with a few values that are not dates is refused, naming the first. A missing date is missing in every part (`data.missing`).",
);

/// The most distinct values `data.max-categories` may allow.
pub const MAX_CATEGORIES: i64 = 1 << 20;

/// A `categorical` node inside `data`: feature columns read as categories.
pub static CATEGORICAL: Section = section(
    "categorical",
    &["columns"],
    &[
        required(
            "columns",
            Ty::Columns,
            "The feature columns, by name, index or range (`\"0..3\"`).",
        ),
        key(
            "encoding",
            Ty::Choice(Encoding::NAMES),
            Some(Val::Text(Encoding::OneHot.as_str())),
            "`one-hot`: one feature per value seen in the training split (sorted, so the same data gives the same features), after the numeric ones; a value not seen in training is a row of zeros. `index`: the value's id (1 … K in sorted order; 0 for a value not seen in training) as a model input of its own, named after the column (`input`), of one id per sample, for an `embedding` of at least K + 1 ids.",
        ),
        key(
            "input",
            Ty::Text,
            None,
            "`index` of one column: the model input's name (default: the column's name).",
        ),
    ],
    "Feature columns read as categories (CSV, JSON and Parquet): `categorical \"island\" encoding=\"index\"`. A column whose values are text is categorical without being named here (one-hot); name one to read a column of codes (`1`, `2`, `3`) as categories, or to encode it by index. The values are kept as written (trimmed); the missing markers are missing, and `data.missing` applies to them as to numbers (`mean` and `median` fill with the training split's most frequent value). `check` says which columns are categorical and how many values it sees; the checkpoint's metadata records each column's values.",
);

pub const INPUTS: Section = Section {
    name: "inputs",
    doc: "More model inputs, each from a file of its own with one row per sample in the data's order, one node each named after the input: `inputs { meta \"meta.csv\" scale=\"standard\" { features \"age\" \"income\"; } }`. A model reads one by name, from a branch: `parallel { branch { … } branch input=\"meta\" { … } }`; a TorchScript module by its `forward`'s argument names. A row whose value is missing or not finite is an error naming it.",
    args: &[],
    keys: &[],
    children: Children::Inputs,
};

pub const INPUT: Section = section(
    "input",
    &["source"],
    &[
        required(
            "source",
            Ty::Path,
            "The file, relative to the manifest: .npy, .npz or .safetensors (one array), .csv or .csv.gz (read with the data's `header`, `delimiter`, `skip-rows` and `comment`), or .parquet.",
        ),
        key(
            "features",
            Ty::Columns,
            None,
            "CSV and Parquet: the columns, by name, index or range (default: every column); NPZ and safetensors: the array's name (default `x`).",
        ),
        key(
            "scale",
            Ty::Choice(Scale::NAMES),
            Some(Val::Text(Scale::None.as_str())),
            "Scaling of this input, fitted on the training split only.",
        ),
    ],
    "One model input from a file of its own, named by its node: `meta \"meta.csv\" features=\"age\"`, or with several columns `meta \"meta.csv\" { features \"age\" \"income\"; }`.",
);

/// The largest token id (2^53: a float64 holds every id below it exactly).
pub const MAX_TOKEN_ID: i64 = 1 << 53;

/// The most tokens a text is padded or truncated to.
pub const MAX_TEXT_LENGTH: i64 = 65_536;

pub const TEXT: Section = section(
    "text",
    &["column"],
    &[
        required(
            "column",
            Ty::Columns,
            "The column of texts: a header name or an index.",
        ),
        required(
            "tokenizer",
            Ty::Path,
            "A Hugging Face `tokenizer.json` (what `tokenizer.save(…)` or `save_pretrained` writes), relative to the manifest; its content is in the cache key.",
        ),
        required(
            "max-length",
            int(1, MAX_TEXT_LENGTH),
            "Every text becomes this many token ids: longer ones are truncated, shorter ones padded with the tokenizer's padding token (its padding settings, else `[PAD]`, `<pad>` or `<|pad|>`).",
        ),
        key(
            "padding-side",
            Ty::Choice(PaddingSide::NAMES),
            Some(Val::Text(PaddingSide::Right.as_str())),
            "Where the padding goes: `right` (after the text, Hugging Face's default) or `left` (before it, so a recurrent layer's last step is the text's own).",
        ),
        key(
            "add-special-tokens",
            Ty::Bool,
            Some(Val::Bool(true)),
            "Whether the tokenizer's post-processor adds its special tokens (`[CLS] … [SEP]`), as `tokenizer(text)` does by default.",
        ),
    ],
    "A text column tokenised with a Hugging Face tokenizer (the `tokenizers` crate): each sample's features are `max-length` token ids, the input of an `embedding` layer. The padding is tokens the model sees (masks come with named inputs).",
);

/// The channel counts images may be read as.
pub const IMAGE_CHANNELS: &[&str] = &["1", "3"];

pub const IMAGES: Section = Section {
    name: "images",
    doc: "How images (`image-folder`, `image-list`; PNG and JPEG) become samples: read as `channels`, then the transforms written inside, in order, as torchvision's `Compose` applies them. Random transforms (augmentation) draw anew for every sample and epoch, from the seed, so a resumed run sees the same images; evaluation and prediction use their deterministic form. Pixels become floats as `x / 255`, or as `normalize` says (last).",
    args: &[],
    keys: &[key(
        "channels",
        Ty::Choice(IMAGE_CHANNELS),
        Some(Val::Text("3")),
        "1: grey (`L = 0.299 R + 0.587 G + 0.114 B`, as PIL's `convert(\"L\")`); 3: RGB (a grey image's value in every channel; an alpha channel is dropped, as PIL's `convert(\"RGB\")`).",
    )],
    children: Children::Transforms,
};

pub const ACCELERATOR: Section = section(
    "accelerator",
    &[],
    &[
        key(
            "device",
            Ty::Device,
            Some(Val::Text("auto")),
            "Where to train: `cpu`, `cuda`, `cuda:N`, or `auto` (CUDA when available).",
        ),
        key(
            "precision",
            Ty::Member(Family::Precision),
            Some(Val::Text("32")),
            "Numerics: the dtypes of the weights and of the computation, one of the precisions below (each with what it does); checkpoints are saved in fp32. A program built on pipeline may register more (`docs/extending.md`).",
        ),
        key(
            "loss-scale",
            Ty::Choice(LossScale::NAMES),
            None,
            "Loss scaling for `16-mixed`: `dynamic` (the default there: start at 2^16, double after 2000 steps without overflow, halve and skip the step on inf/NaN gradients) or `off`.",
        ),
        key(
            "accumulate",
            int(1, MAX_ACCUMULATE),
            Some(Val::Int(1)),
            "Micro-batches per optimizer step (gradient accumulation): the loss is divided by N and the optimizer steps every N batches and at the end of an epoch.",
        ),
        key(
            "max-norm",
            POSITIVE,
            None,
            "Clip the gradients' total norm to this value before each optimizer step.",
        ),
        key(
            "norm-type",
            POSITIVE,
            Some(Val::Float(2.0)),
            "The p of the p-norm `max-norm` clips (2: Euclidean).",
        ),
        key(
            "clip-value",
            POSITIVE,
            None,
            "Clamp every gradient element to [-value, value] before each optimizer step.",
        ),
        key(
            "deterministic",
            Ty::Bool,
            Some(Val::Bool(false)),
            "Use only deterministic algorithms (libtorch's `use_deterministic_algorithms`); an operation without one fails the run.",
        ),
        key(
            "strategy",
            Ty::Member(Family::Strategy),
            Some(Val::Text("none")),
            "How the processes share the training, one of the strategies below. Start the processes with `pipeline run FILE --nproc-per-node N`, torchrun or srun. A program built on pipeline may register more (`docs/extending.md`).",
        ),
        key(
            "backend",
            Ty::Choice(CommBackend::NAMES),
            Some(Val::Text(CommBackend::Auto.as_str())),
            "The engine that carries the processes' collectives: `gloo` (CPU tensors), `nccl` (CUDA tensors, one GPU per process) or `auto` (NCCL when the device is CUDA, Gloo otherwise, as torch.distributed).",
        ),
        key(
            "sync-batch-norm",
            Ty::Bool,
            Some(Val::Bool(false)),
            "Under `ddp` and `zero1`, batch-norm layers normalise with the statistics of the whole batch, all processes' shares of it (torch's SyncBatchNorm: one all-reduce per layer forward and backward), so that N processes with batch b train like one with batch N×b. Off, each process normalises its own share.",
        ),
        key(
            "shard-remainder",
            Ty::Choice(ShardRemainder::NAMES),
            Some(Val::Text(ShardRemainder::Pad.as_str())),
            "Under `ddp`, when the training split does not divide by the number of processes: `pad` (repeat samples from the start of the epoch's order) or `drop` (leave the last ones out).",
        ),
        key(
            "sampler",
            Ty::Choice(SamplerName::NAMES),
            Some(Val::Text(SamplerName::Distributed.as_str())),
            "How the training samples are dealt to the processes: `distributed` (each takes every N-th of the epoch's order) or `bucketed` (samples sorted by `bucket-by` and cut into `buckets`; at every step all processes train on one bucket, as Stoke's BucketedDistributedSampler).",
        ),
        key(
            "bucket-by",
            int(0, MAX_FEATURE_INDEX),
            None,
            "The feature (its index within a sample's flattened features) the `bucketed` sampler sorts by, such as a sequence length.",
        ),
        key(
            "buckets",
            int(1, MAX_ACCUMULATE),
            Some(Val::Int(4)),
            "How many buckets the `bucketed` sampler cuts the sorted samples into.",
        ),
        key(
            "bucket-mb",
            Ty::Float {
                min: Bound::Exclusive(0.0),
                max: Bound::Inclusive(1e6),
            },
            Some(Val::Float(25.0)),
            "Under `ddp`, gradients are averaged in buckets of at most this many megabytes (one all-reduce per bucket).",
        ),
        key(
            "timeout",
            Ty::Float {
                min: Bound::Exclusive(0.0),
                max: Bound::Inclusive(MAX_TIMEOUT),
            },
            Some(Val::Float(30.0)),
            "Seconds a process waits for the others (to start, or in a collective) before the run fails with an error naming the cause, instead of hanging.",
        ),
        key(
            "threads",
            int(1, MAX_THREADS),
            None,
            "CPU threads libtorch computes on (default: `OMP_NUM_THREADS` when set, else every core the process may use). In every stage's key on the CPU: another count sums in another order, so the trained bits differ.",
        ),
    ],
    "The hardware and numerics the run uses.",
);

pub const LOGGING: Section = section(
    "logging",
    &[],
    &[
        key(
            "tensorboard",
            Ty::Bool,
            Some(Val::Bool(true)),
            "Write TensorBoard event files under the run directory (`.pipeline/runs/RUN/tensorboard/STAGE/`): each `train` stage's training and validation metrics and learning rate by optimizer step, and its hyper-parameters with the final metrics for TensorBoard's HParams tab. `tensorboard --logdir .pipeline/runs` compares runs.",
        ),
        key(
            "log-every-steps",
            int(0, MAX_STEPS),
            Some(Val::Int(50)),
            "Write a step record to `metrics.jsonl` (and TensorBoard) every N optimizer steps: the mean training loss (and accuracy) since the last one, the learning rate, the gradients' norm (when clipping computes it, or with `grad-norm`), the loss scale under `16-mixed`, and samples per second. The device is read only at those steps. 0: epoch records only.",
        ),
        key(
            "grad-norm",
            Ty::Bool,
            Some(Val::Bool(false)),
            "Put the gradients' total 2-norm into every step record even when no `clip max-norm` computes it (computed at logged steps only).",
        ),
    ],
    "What a run records besides `metrics.jsonl`. Not in any cache key: a run that only records more is still cached.",
);

/// Points of one sweep: more would be a typo (a grid of 1000 × 1000).
pub const MAX_POINTS: i64 = 100_000;
/// Points a sweep runs at once.
pub const MAX_JOBS: i64 = 1024;

pub const SWEEP: Section = section(
    "sweep",
    &[],
    &[
        key(
            "grid",
            Ty::Section(&GRID),
            None,
            "Swept keys and their values, one node each named by the key as `--set` writes it: `grid { optimizer.lr 1e-3 3e-3; test.batch-size 100 300; }`. The points are every combination.",
        ),
        key(
            "random",
            Ty::Section(&RANDOM),
            None,
            "Keys drawn at random for each of `trials` points, one node each: `random trials=8 seed=0 { optimizer.lr \"log(1e-4,1e-2)\"; }` (`log(a,b)`, `uniform(a,b)`, `int(a,b)`, `choice(v1,v2,…)`). With a `grid`, every grid point gets every draw.",
        ),
        key(
            "monitor",
            Ty::Text,
            None,
            "The metric the points are ranked by, `STAGE.METRIC` (`test.accuracy`, `train.val_loss`); default: the first eval stage's accuracy (loss for a regression), else the last train stage's loss.",
        ),
        key(
            "mode",
            Ty::Choice(Mode::NAMES),
            None,
            "Whether the best is the lowest or the highest; default: highest for accuracy, F1, precision, recall, AUROC and R², else lowest.",
        ),
        key(
            "jobs",
            int(1, MAX_JOBS),
            Some(Val::Int(1)),
            "Points run at once, the cores divided between them.",
        ),
        key(
            "halving",
            Ty::Section(&HALVING),
            None,
            "Successive halving: `halving min-epochs=2 eta=3`.",
        ),
    ],
    "What `pipeline sweep FILE` runs: the manifest at every point of a grid (and every random draw), each point checked by `pipeline check`. The command line's `--grid`, `--random`, `--monitor`, `--mode`, `--jobs` and `--halving` add to it or replace it. In no stage's cache key: `pipeline run` ignores it.",
);

pub const GRID: Section = Section {
    name: "grid",
    doc: "Swept keys, one node each named by the key as `--set` writes it, followed by its values: `optimizer.lr 1e-3 3e-3`. Each value is checked as `--set KEY=VALUE` would be.",
    args: &[],
    keys: &[],
    children: Children::Swept,
};

pub const RANDOM: Section = Section {
    name: "random",
    doc: "Keys drawn at random, one node each named by the key, followed by how it is drawn: `optimizer.lr \"log(1e-4,1e-2)\"`, `uniform(a,b)`, `int(a,b)` (both ends included) or `choice(v1,v2,…)`; real numbers to four significant digits.",
    args: &[],
    keys: &[
        required(
            "trials",
            int(1, MAX_POINTS),
            "How many points are drawn.",
        ),
        key(
            "seed",
            int(0, MAX_SEED),
            Some(Val::Int(0)),
            "The seed of the draws: the same seed, the same points.",
        ),
    ],
    children: Children::Swept,
};

pub const HALVING: Section = section(
    "halving",
    &[],
    &[
        required(
            "min-epochs",
            int(1, MAX_EPOCHS),
            "The epochs every point trains in the first rung.",
        ),
        key(
            "eta",
            int(2, 1000),
            Some(Val::Int(3)),
            "Each rung keeps the best 1/`eta` of the points and trains them `eta` × as many epochs, up to the stage's `epochs`.",
        ),
        key(
            "stage",
            Ty::Text,
            None,
            "The `train` stage whose epochs are the budget; default: the last train stage.",
        ),
    ],
    "Successive halving: every point trains `min-epochs`, the best 1/`eta` continue to `eta` × as many epochs from where they were (a longer training extends the cached shorter one), and so on up to the stage's `epochs`.",
);

pub(crate) const MODE_DOC: &str = "`min` (the value improves by going down) or `max` (by going up); default: the metric's own direction (`min` for losses and errors, `max` for accuracies, scores and R²).";

pub static MODEL: Section = Section {
    name: "model",
    doc: "The network: a stack of layers applied in order (`nn.Sequential`); input sizes are inferred from the data. Besides layers it may hold `residual`, `repeat` and `parallel` blocks, and uses of named `block`s; or it is one `torchscript` module written in Python.",
    args: &[],
    keys: &[],
    children: Children::Layers,
};

/// The most copies one `repeat` makes.
pub const MAX_REPEAT: i64 = 1024;
/// The most layers a model may hold once repeats and blocks are expanded.
pub const MAX_MODEL_LAYERS: u64 = 100_000;

pub const RESIDUAL: Section = Section {
    name: "residual",
    doc: "A residual block: its layers, then their output plus the block's input (`body(x) + x`). When the body changes the shape, the input is projected to it (a 1×1 convolution with the stride that matches the sizes, or a linear map of the last dimension; neither has a bias), unless `projection \"none\"`.",
    args: &[],
    keys: &[key(
        "projection",
        Ty::Choice(Projection::NAMES),
        Some(Val::Text(Projection::Auto.as_str())),
        "`auto`: project the input when the body's output has another shape; `none`: the shapes must match (otherwise an error on both ends of the block, before any training).",
    )],
    children: Children::Layers,
};

pub const REPEAT: Section = Section {
    name: "repeat",
    doc: "Its layers, N times in a row; each copy has weights of its own (`nn.Sequential(*[body() for _ in range(N)])`).",
    args: &["times"],
    keys: &[required("times", int(1, MAX_REPEAT), "How many copies.")],
    children: Children::Layers,
};

pub const PARALLEL: Section = Section {
    name: "parallel",
    doc: "Branches that each take the block's input, their outputs joined: `concat` along `dim` (the other dimensions must match) or `add` (the shapes must match). Its children are `branch { … }` blocks.",
    args: &["join"],
    keys: &[
        key(
            "join",
            Ty::Choice(Join::NAMES),
            Some(Val::Text(Join::Concat.as_str())),
            "How the branches' outputs become one.",
        ),
        key(
            "dim",
            int(-8, 7),
            Some(Val::Int(0)),
            "The dimension of a sample `concat` joins along: 0 is the first after the batch (channels, or features); -1 the last.",
        ),
    ],
    children: Children::Branches,
};

pub const BRANCH: Section = Section {
    name: "branch",
    doc: "One branch of a `parallel` block: layers applied in order to the block's input, or with `input=\"name\"` to that model input (`branch input=\"image\" { … }`), so that a model takes several inputs of the data.",
    args: &[],
    keys: &[key(
        "input",
        Ty::Text,
        None,
        "The model input the branch starts from, by name (`pipeline explain data` lists what each kind of data gives); default: the `parallel` block's input.",
    )],
    children: Children::Layers,
};

pub const TORCHSCRIPT: Section = Section {
    name: "torchscript",
    doc: "A module scripted or traced in Python, as the whole model: `torchscript \"net.pt\"`, written by `torch.jit.script(model).save(\"net.pt\")` (or `torch.jit.trace(model, example).save(…)`). Its `forward` takes the batch and returns one tensor; its parameters are trained, its buffers (batch-norm statistics) kept, and checkpoints use its own state-dict names. The file's content is in the cache key.",
    args: &["path"],
    keys: &[required(
        "path",
        Ty::Path,
        "The TorchScript archive, relative to the manifest's directory (not a `torch.save` pickle: script or trace the module first).",
    )],
    children: Children::Keys,
};

/// The structures a model may hold besides layers.
pub const STRUCTURES: &[&Section] = &[&RESIDUAL, &REPEAT, &PARALLEL, &TORCHSCRIPT];

pub const BLOCK: Section = Section {
    name: "block",
    doc: "A named, reusable group of layers, defined once at the top level and used in `model` (or another block) like a layer: `block \"down\" \"channels\" stride=2 { conv2d $channels kernel=3 stride=$stride padding=1; relu }` then `down 64`. String arguments after the name are parameters a use must give; properties are parameters with a default; `$name` in the body stands for the value. Each use has weights of its own.",
    args: &["name"],
    keys: &[required("name", Ty::Text, "The block's name, used as a layer name.")],
    children: Children::Layers,
};

pub const METRIC: Section = section(
    "metric",
    &["name"],
    &[
        required("name", Ty::Text, "The metric's name, used wherever metrics are named: `eval`'s `metrics`, `validate`, and monitors as `val.NAME`."),
        required("torchscript", Ty::Path, "The module, scripted in Python: `torch.jit.script(Brier()).save(\"brier.pt\")`. Its `forward(self, output, target)` returns the metric over the whole split as one number: `output` holds the predictions as the built-in metrics read them (float64: the class probabilities for a classification loss, each label's probability for `labels`, the outputs for regression), `target` the truth (class indices as int64, else float64 of the output's shape). libtorch runs it, not Python; the file's content is in the cache key of every stage that measures it."),
        required("mode", Ty::Choice(Mode::NAMES), "Whether the metric improves by going down (`min`: an error, a loss, a Brier score) or up (`max`: an accuracy, a score): the direction of a monitor that watches it."),
    ],
    "A metric written in Python and scripted, defined once at the top level and then named like a built-in one: `metric \"brier\" { torchscript \"brier.pt\"; mode \"min\" }`, then `eval \"test\" { metrics \"accuracy\" \"brier\" }`, `validate { metrics \"brier\" }` or `early-stop monitor=\"val.brier\"`. It is computed over the whole split (under `ddp`, on the predictions gathered from every process), on the CPU. `run` refuses a `forward` that does not take two tensors, or returns more than one number.",
);

/// The schema of a node that may appear in a `model` (or a block body): a layer or a
/// structure.
pub fn model_node(name: &str) -> Option<&'static Section> {
    layer(name).or_else(|| STRUCTURES.iter().copied().find(|s| s.name == name))
}

/// Sections written at most once at the top level, in the order the docs list them
/// (`loss` built from its registry, with every member's keys).
pub fn sections() -> [&'static Section; 10] {
    [
        &PIPELINE,
        &SEED,
        &DATA,
        &MODEL,
        crate::losses::section(),
        crate::optimizers::section(),
        crate::schedules::section(),
        &ACCELERATOR,
        &LOGGING,
        &SWEEP,
    ]
}

/// The schema of the stage kind `kind`.
pub const fn stage(kind: StageKind) -> &'static Section {
    match kind {
        StageKind::Train => &crate::stages::train::SECTION,
        StageKind::Eval => &crate::stages::eval::SECTION,
        StageKind::Checkpoint => &crate::stages::checkpoint::SECTION,
        StageKind::Predict => &crate::stages::predict::SECTION,
    }
}

/// Stage kinds: top-level nodes that may appear many times, each a stage of the DAG.
/// [`stage`] of each of [`StageKind::ALL`], in that order.
pub const STAGES: &[&Section] = &{
    let mut all = [&crate::stages::train::SECTION; StageKind::ALL.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = stage(StageKind::ALL[i]);
        i += 1;
    }
    all
};

// ---- model layers -------------------------------------------------------------------

// Each layer's schema lives with the layer (`layers/`); this is the list of them.
pub use crate::layers::{layer, LAYERS};

/// The `bias` key of the layers that have one.
pub(crate) const BIAS: Key = key(
    "bias",
    Ty::Bool,
    Some(Val::Bool(true)),
    "Whether the layer adds a learned bias.",
);

/// Every top-level node name: sections, stage kinds and `block`.
pub fn top_level_names() -> Vec<&'static str> {
    sections()
        .into_iter()
        .chain(STAGES.iter().copied())
        .map(|s| s.name)
        .chain([BLOCK.name, METRIC.name])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_sections() -> Vec<&'static Section> {
        let mut all: Vec<&'static Section> = sections()
            .into_iter()
            .chain(STAGES.iter().copied())
            .collect();
        all.extend(LAYERS.iter().copied());
        all.extend(STRUCTURES.iter().copied());
        all.extend([&SPLIT, &BRANCH, &BLOCK, &METRIC]);
        all
    }

    #[test]
    fn every_key_is_documented_and_every_arg_is_a_key() {
        for s in all_sections() {
            assert!(!s.doc.is_empty(), "{} has no doc", s.name);
            for k in s.keys {
                assert!(!k.doc.is_empty(), "{}.{} has no doc", s.name, k.name);
                assert!(
                    !(k.required && k.default.is_some()),
                    "{}.{} is required and has a default",
                    s.name,
                    k.name
                );
            }
            for a in s.args {
                assert!(
                    s.key(a).is_some(),
                    "{}: argument `{a}` is not a key",
                    s.name
                );
            }
        }
    }

    #[test]
    fn every_integer_key_is_bounded_and_its_default_is_in_range() {
        for s in all_sections() {
            for k in s.keys {
                if let Ty::Int { min, max } = k.ty {
                    assert!(min <= max, "{}.{}", s.name, k.name);
                    if let Some(Val::Int(d)) = k.default {
                        assert!((min..=max).contains(&d), "{}.{}", s.name, k.name);
                    }
                }
            }
        }
    }

    #[test]
    fn the_stage_kinds_are_the_stage_sections_in_order() {
        let names: Vec<&str> = STAGES.iter().map(|s| s.name).collect();
        assert_eq!(names, StageKind::NAMES);
        for kind in StageKind::ALL {
            assert_eq!(stage(*kind).name, kind.as_str());
        }
    }

    #[test]
    fn data_formats_are_auto_and_the_formats() {
        assert_eq!(
            Family::DataFormat.names(),
            [
                "auto",
                "csv",
                "npy",
                "npz",
                "safetensors",
                "parquet",
                "json",
                "image-folder",
                "image-list"
            ]
        );
    }

    #[test]
    fn kind_specific_keys_name_real_kinds() {
        for s in all_sections() {
            let Some(Ty::Choice(kinds)) = s.key("kind").map(|k| &k.ty) else {
                continue;
            };
            for k in s.keys {
                for kind in k.only_for {
                    assert!(
                        kinds.contains(kind),
                        "{}.{}: unknown kind {kind}",
                        s.name,
                        k.name
                    );
                }
            }
        }
    }
}
