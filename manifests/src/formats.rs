//! The data formats a program registers (`pipeline_core::formats::register_data_format`):
//! what a manifest and `check` know of one without reading a file, its name, what it is
//! and the extensions `format "auto"` knows it by. Its reading is core's
//! (`pipeline_core::formats::FileFormat`), libtorch-free, so `check` can read it too.
//! The built-in formats (CSV, Parquet, the array files, images) are [`crate::DataFormat`]'s
//! other variants: each has keys of its own (columns, dialect, arrays, transforms).

use crate::registry::{Member, Registry};
use crate::DataFormat;

/// A registered data format: a file of samples, read into features and, when the file
/// holds them, labels.
#[derive(Debug)]
pub struct FormatDescription {
    /// What `data.format` names it.
    pub name: &'static str,
    /// What `pipeline explain data.format` says of it.
    pub doc: &'static str,
    /// The file name endings `format "auto"` reads as it (`.svm`), lowercase.
    pub extensions: &'static [&'static str],
}

impl Member for FormatDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn registry() -> &'static Registry<Self> {
        &FORMATS
    }
}

/// The registered data formats (the built-ins are [`DataFormat`]'s variants).
pub static FORMATS: Registry<FormatDescription> = Registry::new(Vec::new, |f| f.name);

/// Adds `member`; refused, with why, when its name is `auto` or another format's, or an
/// extension is not a lowercase `.ending` or is another format's already.
pub fn register(member: &'static FormatDescription) -> Result<(), String> {
    let name = member.name;
    if name == crate::schema::AUTO_FORMAT || DataFormat::ALL.iter().any(|f| f.as_str() == name) {
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
        if let Some(other) = DataFormat::of_name(std::path::Path::new(&format!("x{ending}"))) {
            return Err(format!(
                "`{ending}` (of the data format `{name}`) is already `{}`'s",
                other.as_str()
            ));
        }
    }
    FORMATS.register(member)
}
