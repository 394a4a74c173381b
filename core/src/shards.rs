//! Several `.npy` files as one data set: `source "shards/x-*.npy"` (and a labels file
//! named the same way) is every file the pattern matches, in the order of their names,
//! one after another. Each shard's header is read for its shape before anything runs, so
//! a shard of another shape is named by `check`.
//!
//! A pattern is a shell pattern (`*`, `?`, `[…]`) relative to the manifest, told from the
//! path as written (the manifest's own directory may hold such characters: it is matched
//! literally), unless a file has that very name (`model[best].npy` is that file); only
//! regular files (or links to them) match, and a pattern that matches none is an error.

use crate::npy;
use manifests::{DataFormat, Diagnostic, FormatKind, Manifest};
use std::path::{Path, PathBuf};

/// Whether a manifest path as written (relative to `base`, the manifest's directory) is a
/// pattern rather than one file: it holds `*`, `?` or `[`, and no file has that very name.
pub fn is_pattern(base: &Path, written: &Path) -> bool {
    written
        .to_str()
        .is_some_and(|p| p.contains(['*', '?', '[']))
        && std::fs::symlink_metadata(base.join(written)).is_err()
}

/// The files the pattern `written` (relative to `base`, the manifest's directory, which
/// is matched literally) matches, sorted by name; `Err` says why there are none.
pub fn expand(base: &Path, written: &Path) -> Result<Vec<PathBuf>, String> {
    let utf8 = |p: &Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{}: a pattern's path must be UTF-8", p.display()))
    };
    let pattern = utf8(written)?;
    let text = match (written.is_absolute(), utf8(base)?) {
        (true, _) => pattern.clone(),
        (false, base) if base.is_empty() => pattern.clone(),
        (false, base) => format!("{}/{pattern}", glob::Pattern::escape(&base)),
    };
    let paths = glob::glob(&text).map_err(|e| format!("`{pattern}` is not a pattern: {e}"))?;
    let mut files = Vec::new();
    for path in paths {
        let path = path.map_err(|e| e.to_string())?;
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(format!("no file matches `{pattern}`"));
    }
    files.sort();
    Ok(files)
}

/// One `.npy` shard: its file, header and place among the data set's samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub path: PathBuf,
    pub header: npy::Header,
    /// The data set's index of the shard's first sample.
    pub first: u64,
}

impl Shard {
    pub fn rows(&self) -> u64 {
        self.header.shape.first().copied().unwrap_or(0) as u64
    }
}

/// Why a set of shards is not one data set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardError {
    /// No file, or no pattern.
    None(String),
    /// A file that is not an NPY array this can read.
    Unreadable { path: PathBuf, why: String },
    /// A shard whose sample shape or element type differs from the first shard's.
    Differs {
        path: PathBuf,
        first: PathBuf,
        /// `samples of shape` or `elements of type`.
        what: &'static str,
        this: String,
        theirs: String,
    },
}

impl std::fmt::Display for ShardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardError::None(why) => f.write_str(why),
            ShardError::Unreadable { path, why } => write!(f, "{}: {why}", path.display()),
            ShardError::Differs {
                path,
                first,
                what,
                this,
                theirs,
            } => write!(
                f,
                "{}: {what} {this}, but the first shard, {}, has {theirs}",
                path.display(),
                first.display()
            ),
        }
    }
}

/// The headers of `files` (one file, or a pattern's matches), checked to hold samples of
/// one shape and element type.
pub fn open(files: &[PathBuf]) -> Result<Vec<Shard>, ShardError> {
    let mut shards: Vec<Shard> = Vec::with_capacity(files.len());
    let mut first = 0;
    for path in files {
        let header = npy::read_header(path).map_err(|why| ShardError::Unreadable {
            path: path.clone(),
            why,
        })?;
        if header.shape.is_empty() {
            return Err(ShardError::Unreadable {
                path: path.clone(),
                why: "a 0-d array holds no samples".into(),
            });
        }
        if let Some(one) = shards.first() {
            let differs = |what, this, theirs| ShardError::Differs {
                path: path.clone(),
                first: one.path.clone(),
                what,
                this,
                theirs,
            };
            if one.header.shape[1..] != header.shape[1..] {
                let shape = |h: &npy::Header| format!("{:?}", &h.shape[1..]);
                return Err(differs(
                    "samples of shape",
                    shape(&header),
                    shape(&one.header),
                ));
            }
            if one.header.descr != header.descr {
                let descr = |h: &npy::Header| format!("`{}`", h.descr);
                return Err(differs(
                    "elements of type",
                    descr(&header),
                    descr(&one.header),
                ));
            }
        }
        let shard = Shard {
            path: path.clone(),
            header,
            first,
        };
        first += shard.rows();
        shards.push(shard);
    }
    Ok(shards)
}

/// The files of a manifest path as written (relative to `base`, the manifest's
/// directory): a pattern's matches, else the one file.
pub fn files_of(base: &Path, written: &Path) -> Result<Vec<PathBuf>, ShardError> {
    match is_pattern(base, written) {
        true => expand(base, written).map_err(ShardError::None),
        false => Ok(vec![base.join(written)]),
    }
}

impl ShardError {
    /// The diagnostic code of this error, and what to do about it.
    pub fn code_and_help(&self) -> (&'static str, &'static str) {
        match self {
            ShardError::None(_) => (
                "pipeline::data::no_shards",
                "check the pattern: it is relative to the manifest, and `*` does not cross a `/`",
            ),
            ShardError::Unreadable { .. } => (
                "pipeline::data::unreadable",
                "every shard must be an `.npy` array (`numpy.save`)",
            ),
            ShardError::Differs { .. } => (
                "pipeline::data::shard_differs",
                "every shard holds samples of one shape and element type: rewrite this one, or leave it out of the pattern",
            ),
        }
    }
}

/// `check`'s rules for NPY data given as shards (or as one file with an NPY labels file):
/// a pattern matches files, they are NPY arrays of one sample shape and element type,
/// and the labels have as many rows as the features. Each error names the file.
pub fn check(manifest: &Manifest) -> Vec<Diagnostic> {
    let data = &manifest.data;
    let labels = data.labels_file.as_ref();
    let labels_pattern = labels.filter(|l| is_pattern(&manifest.base_dir, &l.value));
    if data.format.kind() != FormatKind::Array {
        let mut diags = Vec::new();
        if is_pattern(&manifest.base_dir, &data.source.value) {
            diags.push(not_npy(data.source.span, "source"));
        }
        if let Some(l) = labels_pattern {
            diags.push(not_npy(l.span, "labels"));
        }
        return diags;
    }
    let shards_error = |e: ShardError, span, what: &str| {
        let (code, help) = e.code_and_help();
        Diagnostic::error(code, e.to_string())
            .label_opt(span, what.to_string())
            .help(help)
    };
    // Only patterns are opened here: one missing or unreadable file is the run's to report
    // (with the cache's hashing, which names the key).
    let open_all = |written: &Path| -> Option<Result<Vec<Shard>, ShardError>> {
        let pattern = is_pattern(&manifest.base_dir, written);
        if !pattern && !std::fs::metadata(manifest.resolve(written)).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let opened = files_of(&manifest.base_dir, written).and_then(|files| open(&files));
        match (pattern, opened) {
            (false, Err(_)) => None,
            (_, opened) => Some(opened),
        }
    };
    let mut diags = Vec::new();
    let features = open_all(&data.source.value);
    let features = match features {
        Some(Err(e)) => {
            diags.push(shards_error(e, data.source.span, "these shards"));
            None
        }
        Some(Ok(shards)) => Some(shards),
        None => None,
    };
    let Some(file) = labels
        .filter(|l| DataFormat::of_name(&l.value).is_some_and(|f| f.kind() == FormatKind::Array))
    else {
        return diags;
    };
    let labels = open_all(&file.value);
    match (features, labels) {
        (_, Some(Err(e))) => diags.push(shards_error(e, file.span, "these labels")),
        (Some(features), Some(Ok(labels))) => {
            let rows = |s: &[Shard]| s.iter().map(Shard::rows).sum::<u64>();
            let (n, m) = (rows(&features), rows(&labels));
            if n != m {
                let files = |s: &[Shard]| match s {
                    [one] => one.path.display().to_string(),
                    many => format!("{} shards", many.len()),
                };
                diags.push(
                    Diagnostic::error(
                        "pipeline::data::labels_length",
                        format!(
                            "{n} samples of features ({}) but {m} rows of labels ({})",
                            files(&features),
                            files(&labels)
                        ),
                    )
                    .label_opt(data.source.span, format!("{n} samples"))
                    .label_opt(file.span, format!("{m} labels"))
                    .help("features and labels need the same number of samples, in the same order"),
                );
            }
        }
        _ => {}
    }
    diags
}

fn not_npy(span: Option<miette::SourceSpan>, key: &str) -> Diagnostic {
    Diagnostic::error(
        "pipeline::data::shards_not_npy",
        format!("`data.{key}` is a pattern, and only `.npy` files are read as shards"),
    )
    .label_opt(span, "a pattern")
    .help("name one file, or save the data as `.npy` shards (`numpy.save` per part)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(path: &Path, descr: &str, shape: &str) {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let mut header = dict.into_bytes();
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(b' ');
        }
        header.push(b'\n');
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header);
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn shards_are_sorted_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        npy(&dir.path().join("x-1.npy"), "<f4", "(3, 4)");
        npy(&dir.path().join("x-0.npy"), "<f4", "(2, 4)");
        std::fs::write(dir.path().join("x-9.txt"), "").unwrap();
        let files = files_of(dir.path(), Path::new("x-*.npy")).unwrap();
        let shards = open(&files).unwrap();
        let names: Vec<_> = shards
            .iter()
            .map(|s| (s.path.file_name().unwrap().to_str().unwrap(), s.first))
            .collect();
        assert_eq!(names, [("x-0.npy", 0), ("x-1.npy", 2)]);
        // The files hold a header only: the data starts where they end.
        let length = std::fs::metadata(&shards[1].path).unwrap().len();
        assert_eq!(shards[1].header.data_offset, length);
        assert_eq!(shards[1].header.descr, "<f4");
        let base = dir.path();
        assert!(
            is_pattern(base, Path::new("a/[ab].npy")) && !is_pattern(base, Path::new("a/b.npy"))
        );
        // A file whose very name holds pattern characters is that file.
        std::fs::write(dir.path().join("x[1].npy"), "").unwrap();
        assert!(!is_pattern(base, Path::new("x[1].npy")));
    }

    #[test]
    fn the_manifests_directory_is_matched_literally() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("exp[2]");
        std::fs::create_dir(&base).unwrap();
        npy(&base.join("x-0.npy"), "<f4", "(2, 4)");
        let files = files_of(&base, Path::new("x-*.npy")).unwrap();
        assert_eq!(files, [base.join("x-0.npy")]);
        assert_eq!(
            files_of(&base, Path::new("y.npy")).unwrap(),
            [base.join("y.npy")]
        );
    }

    #[test]
    fn a_shard_of_another_shape_or_type_is_named() {
        let dir = tempfile::tempdir().unwrap();
        npy(&dir.path().join("x-0.npy"), "<f4", "(2, 4)");
        npy(&dir.path().join("x-1.npy"), "<f4", "(2, 5)");
        npy(&dir.path().join("y-0.npy"), "<f4", "(2, 4)");
        npy(&dir.path().join("y-1.npy"), "<f8", "(2, 4)");
        let shapes = open(&files_of(dir.path(), Path::new("x-*.npy")).unwrap()).unwrap_err();
        assert!(shapes.to_string().ends_with(&format!(
            "x-1.npy: samples of shape [5], but the first shard, {}, has [4]",
            dir.path().join("x-0.npy").display()
        )));
        let types = open(&files_of(dir.path(), Path::new("y-*.npy")).unwrap()).unwrap_err();
        assert!(types
            .to_string()
            .contains("elements of type `<f8`, but the first shard"));
        let none = files_of(dir.path(), Path::new("z-*.npy")).unwrap_err();
        assert!(none.to_string().starts_with("no file matches"));
    }
}
