//! `data.format`: a registry of members, one file each. A member here is what a manifest
//! and `check` know of a format without reading a file: its name, documentation, the
//! file name endings `format "auto"` knows it by, and its [`FormatKind`] (a table of
//! named columns, one array, named arrays, images, or samples its code reads), which
//! decides the keys of `data` it reads. Its reading is core's
//! (`pipeline_core::formats`: libtorch-free, so `check` reads a sample's shape as the
//! run does). A program built on the library adds a format with
//! `pipeline_core::formats::register_data_format`, which registers both.

mod csv;
mod image_folder;
mod image_list;
mod json;
mod npy;
mod npz;
mod parquet;
mod safetensors;

pub use csv::CSV;
pub use image_folder::IMAGE_FOLDER;
pub use image_list::IMAGE_LIST;
pub use json::JSON;
pub use npy::NPY;
pub use npz::NPZ;
pub use parquet::PARQUET;
pub use safetensors::SAFETENSORS;

use crate::registry::{Chosen, Member, Registry};
use std::path::Path;

/// A data format: what a file of it holds, and how a manifest names it.
#[derive(Debug)]
pub struct FormatDescription {
    /// What `data.format` names it.
    pub name: &'static str,
    /// How a message names it (`CSV`, `Parquet`).
    pub title: &'static str,
    /// What `pipeline explain data.format` says of it.
    pub doc: &'static str,
    /// The file name endings `format "auto"` reads as it (`.svm`), lowercase.
    pub extensions: &'static [&'static str],
    pub kind: FormatKind,
}

/// What a file of a format holds, which decides the keys of `data` that apply to it
/// and how the run reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatKind {
    /// Rows of named columns, a row per sample: `label` and `features` choose the
    /// columns, a text column can be tokenised, and a labels file may be one.
    Table {
        /// A text file read with the dialect keys (`header`, `delimiter`, `skip-rows`,
        /// `comment`), its rows located by line; else its columns are named in the file,
        /// its rows located by index.
        text: bool,
        /// Whether `load "stream"` can read its features per batch.
        streams: bool,
    },
    /// One array of the features, samples first (or shards of it, `x-*.npy`): the
    /// labels come from a labels file, which may be one.
    Array,
    /// Named arrays in one file: `features` and `labels` name them (`x` and `y`).
    Arrays,
    /// Images: a folder of class directories, or (`listed`) a table naming the images'
    /// files and their labels.
    Images { listed: bool },
    /// Samples its code reads, features and (when the file holds them) labels
    /// (`pipeline_core::formats::FileFormat`).
    Samples,
}

impl Member for FormatDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn registry() -> &'static Registry<Self> {
        &FORMATS
    }
}

/// Every data format: the built-ins, then those a program registered.
pub static FORMATS: Registry<FormatDescription> = Registry::new(
    || {
        vec![
            &CSV,
            &NPY,
            &NPZ,
            &SAFETENSORS,
            &PARQUET,
            &JSON,
            &IMAGE_FOLDER,
            &IMAGE_LIST,
        ]
    },
    |f| f.name,
);

/// Adds `member`; refused, with why, when its name is `auto` or another format's, or an
/// extension is not a lowercase `.ending` or is another format's already.
pub fn register(member: &'static FormatDescription) -> Result<(), String> {
    let name = member.name;
    if !matches!(member.kind, FormatKind::Table { .. } | FormatKind::Samples) {
        return Err(format!(
            "the data format `{name}` is {:?}: a program adds tables and samples its code reads; the other kinds are pipeline's own",
            member.kind
        ));
    }
    if name == crate::schema::AUTO_FORMAT || FORMATS.get(name).is_some() {
        return Err(format!("`{name}` is already a data format"));
    }
    if member.extensions.is_empty() {
        return Err(format!(
            "the data format `{name}` has no extension: `format \"auto\"` could never read it"
        ));
    }
    for ending in member.extensions {
        let plain = ending.len() > 1
            && ending.starts_with('.')
            && !ending.contains(|c: char| c.is_whitespace() || c == '/' || c.is_uppercase());
        if !plain {
            return Err(format!(
                "`{ending}` (of the data format `{name}`) is not a file name's ending: write it lowercase, with its dot (`.svm`)"
            ));
        }
        if let Some(other) = DataFormat::of_name(Path::new(&format!("x{ending}"))) {
            return Err(format!(
                "`{ending}` (of the data format `{name}`) is already `{}`'s",
                other.as_str()
            ));
        }
    }
    FORMATS.register(member)
}

/// The format of a data source, as `data.format` names it (or `auto` finds it):
/// compared by name, serialised as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct DataFormat(Chosen<FormatDescription>);

impl DataFormat {
    /// The built-in format `member`.
    pub fn builtin(member: &'static FormatDescription) -> DataFormat {
        DataFormat(Chosen(member))
    }

    /// Every format, the built-ins first.
    pub fn all() -> Vec<DataFormat> {
        FORMATS.all().into_iter().map(DataFormat::builtin).collect()
    }

    /// The format `data.format` names.
    pub fn parse(text: &str) -> Option<DataFormat> {
        Chosen::named(text).map(DataFormat)
    }

    /// What `data.format` names it.
    pub fn as_str(self) -> &'static str {
        self.0.as_str()
    }

    pub fn describe(self) -> &'static FormatDescription {
        self.0.describe()
    }

    /// How a message names it (`CSV`).
    pub fn title(self) -> &'static str {
        self.describe().title
    }

    /// What `pipeline explain data.format` says of it.
    pub fn doc(self) -> &'static str {
        self.describe().doc
    }

    pub fn kind(self) -> FormatKind {
        self.describe().kind
    }

    /// The format a file's name says (an extension of a format's, any case): what
    /// `format "auto"` reads, and how a labels file is told apart from an array's name.
    pub fn of_name(path: &Path) -> Option<DataFormat> {
        let name = path.to_string_lossy().to_ascii_lowercase();
        let format = FORMATS
            .all()
            .into_iter()
            .find(|f| f.extensions.iter().any(|e| name.ends_with(e)))?;
        Some(DataFormat::builtin(format))
    }

    /// The format `format "auto"` reads a data source as: by its name's extension
    /// ([`Self::of_name`]); a name without one (or ending in `/`) is an image folder.
    pub fn of_source(path: &Path) -> Option<DataFormat> {
        let text = path.to_string_lossy();
        let bare = text.ends_with('/')
            || path
                .file_name()
                .is_some_and(|n| Path::new(n).extension().is_none());
        DataFormat::of_name(path).or(bare.then(|| DataFormat::builtin(&IMAGE_FOLDER)))
    }

    /// Images: a folder of class directories, or a listing.
    pub fn is_images(self) -> bool {
        matches!(self.kind(), FormatKind::Images { .. })
    }

    /// A table of named columns, which `label` and `features` choose from.
    pub fn is_table(self) -> bool {
        matches!(self.kind(), FormatKind::Table { .. })
    }

    /// A text table, read with the dialect keys (CSV).
    pub fn is_text_table(self) -> bool {
        matches!(self.kind(), FormatKind::Table { text: true, .. })
    }

    /// Whether a file of it is a table whose columns have names: a text table with the
    /// dialect's `header`, or one whose file names them (Parquet).
    pub fn has_header(self, dialect: &crate::Dialect) -> bool {
        match self.kind() {
            FormatKind::Table { text: true, .. } => dialect.header,
            FormatKind::Table { text: false, .. } => true,
            FormatKind::Array
            | FormatKind::Arrays
            | FormatKind::Images { .. }
            | FormatKind::Samples => false,
        }
    }

    /// Whether a labels file may be in this format (one row, or value, per sample).
    pub fn holds_labels(self) -> bool {
        matches!(self.kind(), FormatKind::Table { .. } | FormatKind::Array)
    }

    /// Whether `load "stream"` reads its features per batch (images decide for
    /// themselves, by their pixels' size).
    pub fn streams(self) -> bool {
        matches!(
            self.kind(),
            FormatKind::Table { streams: true, .. } | FormatKind::Array
        )
    }

    /// The first ending of each format `format "auto"` reads (`.csv, .npy or .parquet`);
    /// of those that hold labels only, with `labels_only`. For messages.
    pub fn endings(labels_only: bool) -> String {
        let endings: Vec<&str> = FORMATS
            .all()
            .into_iter()
            .filter(|f| !labels_only || DataFormat::builtin(f).holds_labels())
            .filter_map(|f| f.extensions.first().copied())
            .collect();
        listed(&endings, "or")
    }
}

/// `a, b or c` (`word`: `or`, `and`).
pub fn listed(items: &[&str], word: &str) -> String {
    match items.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} {word} {last}", rest.join(", ")),
        None => String::new(),
    }
}
