//! Which images a data set holds, and their labels: an ImageFolder tree (one
//! sub-directory per class, in sorted order, as torchvision's `ImageFolder` finds them)
//! or a CSV listing (a column of paths, relative to the listing, and label columns).
//!
//! The same listing drives the stage key (every image's content hash, through the hash
//! memo, and the listing's own) and the loader, so that what is hashed is what is
//! trained on. No libtorch, and no image is decoded here.

use crate::image::{is_image, is_unread_image, Image};
use crate::table::{self, TableError};
use cache::HashMemo;
use manifests::{DataSpec, Diagnostic, FormatKind, Manifest};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// The images of a data set, in sample order, with their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageListing {
    /// What the paths are relative to: the folder, or the listing's directory.
    pub root: PathBuf,
    /// Each image's path under `root`.
    pub files: Vec<PathBuf>,
    pub labels: ListingLabels,
}

/// The labels of a listing's images.
#[derive(Debug, Clone, PartialEq)]
pub enum ListingLabels {
    /// ImageFolder: each image's class index among the sorted class directories.
    Classes {
        classes: Vec<String>,
        index: Vec<usize>,
    },
    /// A listing's label cells (per label column, as written), with the columns' names and
    /// each row's line.
    Cells {
        columns: Vec<Vec<Option<String>>>,
        names: Vec<String>,
        lines: Vec<usize>,
        listing: PathBuf,
    },
    /// A `predict` stage's images: none.
    Unlabelled,
}

fn error(spec: &DataSpec, message: String, help: &str) -> Diagnostic {
    Diagnostic::error("pipeline::data::bad_image_set", message)
        .label_opt(spec.source.span, "image data")
        .help(help.to_string())
}

impl ImageListing {
    /// The images of `manifest`'s data (`image-folder` or `image-list`).
    pub fn of(manifest: &Manifest) -> Result<ImageListing, Diagnostic> {
        let spec = &manifest.data;
        let path = manifest.resolve(&spec.source.value);
        match spec.format.kind() {
            FormatKind::Images { listed: true } => list(spec, &path),
            _ => folder(spec, &path),
        }
    }

    /// The content hash of the data set: blake3 over each image's relative path and
    /// content hash (memoised in `memo`), and the listing file's.
    pub fn content_hash(&self, memo: &mut HashMemo) -> Result<String, (PathBuf, io::Error)> {
        let mut all = blake3::Hasher::new();
        all.update(b"pipeline image set 1\n");
        if let ListingLabels::Cells { listing, .. } = &self.labels {
            let h = memo.hash(listing).map_err(|e| (listing.clone(), e))?;
            all.update(format!("listing\0{h}\n").as_bytes());
        }
        for (file, h) in self
            .files
            .iter()
            .zip(memo.hash_all(&self.root, &self.files)?)
        {
            all.update(file.as_os_str().as_encoded_bytes());
            all.update(format!("\0{h}\n").as_bytes());
        }
        Ok(all.finalize().to_hex().to_string())
    }

    /// Where image `i` is, for messages: its path, and the listing's line.
    pub fn at(&self, i: usize) -> String {
        let path = self.root.join(&self.files[i]);
        match &self.labels {
            ListingLabels::Cells { listing, lines, .. } => {
                format!(
                    "{} (listed at {}:{})",
                    path.display(),
                    listing.display(),
                    lines[i]
                )
            }
            ListingLabels::Classes { .. } | ListingLabels::Unlabelled => path.display().to_string(),
        }
    }
}

/// An ImageFolder tree: the class directories (hidden ones skipped, unlike torchvision,
/// so that `.ipynb_checkpoints` is no class), sorted, each walked recursively in
/// torchvision's order for `.png`, `.jpg` and `.jpeg` files; other files are not images
/// and are skipped, images of the formats torchvision reads besides are an error.
fn folder(spec: &DataSpec, root: &Path) -> Result<ImageListing, Diagnostic> {
    let io_error = |path: &Path, e: io::Error| {
        error(
            spec,
            format!("cannot read {}: {e}", path.display()),
            "check that the image folder exists and can be read",
        )
    };
    let meta = std::fs::metadata(root).map_err(|e| io_error(root, e))?;
    if !meta.is_dir() {
        return Err(error(
            spec,
            format!(
                "{} is not a directory: an image folder holds one directory of images per class",
                root.display()
            ),
            "name the folder in `source`, or give the file's format (`format \"csv\"`)",
        ));
    }
    let classes = class_dirs(root).map_err(|e| io_error(root, e))?;
    if classes.is_empty() {
        return Err(error(
            spec,
            format!("{} holds no class directory", root.display()),
            "put the images of each class in a directory of its own: `cat/1.png`, `dog/2.png`",
        ));
    }
    let mut files = Vec::new();
    let mut index = Vec::new();
    for (k, class) in classes.iter().enumerate() {
        let before = files.len();
        walk(root, Path::new(class), &mut files).map_err(|(p, e)| io_error(&p, e))?;
        if let Some(unread) = files[before..].iter().find(|f| !is_image(f)) {
            return Err(error(
                spec,
                format!(
                    "{}: only PNG and JPEG images are read",
                    root.join(unread).display()
                ),
                "convert the image to PNG, or move it out of the folder",
            ));
        }
        if files.len() == before {
            return Err(error(
                spec,
                format!(
                    "the class directory {} holds no image (.png, .jpg, .jpeg)",
                    root.join(class).display()
                ),
                "add its images, or remove the directory",
            ));
        }
        index.resize(files.len(), k);
    }
    let classes = classes
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    Ok(ImageListing {
        root: root.to_path_buf(),
        files,
        labels: ListingLabels::Classes { classes, index },
    })
}

impl ImageListing {
    /// The images to predict under `dir` (a `predict` stage's `source` of image data):
    /// every one below it, in torchvision's walk order (as a class directory's), without
    /// labels. `Err`: what is wrong, and what to do.
    pub fn unlabelled(dir: &Path) -> Result<ImageListing, (String, &'static str)> {
        let read = |path: &Path, e: io::Error| {
            (
                format!("cannot read {}: {e}", path.display()),
                "check that the directory exists and can be read",
            )
        };
        let meta = std::fs::metadata(dir).map_err(|e| read(dir, e))?;
        if !meta.is_dir() {
            return Err((
                format!("{} is not a directory of images", dir.display()),
                "name a directory: every image below it is predicted",
            ));
        }
        let mut files = Vec::new();
        walk(dir, Path::new(""), &mut files).map_err(|(p, e)| read(&p, e))?;
        if let Some(unread) = files.iter().find(|f| !is_image(f)) {
            return Err((
                format!(
                    "{}: only PNG and JPEG images are read",
                    dir.join(unread).display()
                ),
                "convert the image to PNG, or move it out of the directory",
            ));
        }
        if files.is_empty() {
            return Err((
                format!("{} holds no image (.png, .jpg, .jpeg)", dir.display()),
                "put the images to predict in it",
            ));
        }
        Ok(ImageListing {
            root: dir.to_path_buf(),
            files,
            labels: ListingLabels::Unlabelled,
        })
    }
}

/// The class directories of an image folder: its sub-directories that are not hidden, by
/// their names as the file system has them (not necessarily UTF-8), sorted by bytes.
fn class_dirs(root: &Path) -> io::Result<Vec<OsString>> {
    let mut classes = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name();
        if !name.as_encoded_bytes().starts_with(b".") && is_dir(&entry) {
            classes.push(name);
        }
    }
    classes.sort();
    Ok(classes)
}

/// Whether a directory entry is a directory, links followed (as `os.walk(followlinks=True)`);
/// only a link costs a `stat`.
fn is_dir(entry: &std::fs::DirEntry) -> bool {
    match entry.file_type() {
        Ok(t) if t.is_symlink() => entry.path().is_dir(),
        Ok(t) => t.is_dir(),
        Err(_) => entry.path().is_dir(),
    }
}

/// Appends the images under `root/dir` (and images of formats not read, which the caller
/// refuses) in torchvision's order: `sorted(os.walk(…))`, the directories sorted by their
/// path, then each one's files sorted by name. A directory reached twice (a link to one
/// above it) is an error: following it would list its images again, under another class.
fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), (PathBuf, io::Error)> {
    let mut dirs: Vec<(PathBuf, Vec<OsString>)> = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(dir) = pending.pop() {
        let full = root.join(&dir);
        let here = std::fs::canonicalize(&full).map_err(|e| (full.clone(), e))?;
        if !seen.insert(here) {
            return Err((
                full,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a link leads back to a directory already listed (a loop)",
                ),
            ));
        }
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&full).map_err(|e| (full.clone(), e))? {
            let entry = entry.map_err(|e| (full.clone(), e))?;
            let name = entry.file_name();
            if name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            match is_dir(&entry) {
                true => pending.push(dir.join(&name)),
                false => files.push(name),
            }
        }
        files.sort();
        dirs.push((dir, files));
    }
    // Python sorts the paths as strings: by their bytes, `/` included.
    dirs.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    for (dir, files) in dirs {
        for name in files {
            let path = dir.join(name);
            if is_image(&path) || is_unread_image(&path) {
                out.push(path);
            }
        }
    }
    Ok(())
}

/// A CSV listing: the path column (`features`, default the first that is not a label)
/// and the label columns, read with the data's dialect.
fn list(spec: &DataSpec, listing: &Path) -> Result<ImageListing, Diagnostic> {
    let t = table::read_cells(listing, spec, &spec.features, "the image paths").map_err(
        |e| match e {
            TableError::Io(m) => error(
                spec,
                format!("cannot read {}: {m}", listing.display()),
                "check the listing file",
            ),
            TableError::Line { line, message } => error(
                spec,
                format!("{}:{line}: {message}", listing.display()),
                "every row of the listing needs the same fields",
            ),
            TableError::Columns(m) => error(
                spec,
                format!("{}: {m}", listing.display()),
                "set `features` (the column of image paths) and `label` to columns the listing has",
            ),
        },
    )?;
    let mut files = Vec::with_capacity(t.lines.len());
    for (row, cell) in t.column.iter().enumerate() {
        let Some(cell) = cell else {
            return Err(error(
                spec,
                format!(
                    "{}:{}: the image path is missing",
                    listing.display(),
                    t.lines[row]
                ),
                "give every row an image path",
            ));
        };
        files.push(PathBuf::from(cell));
    }
    // Paths are relative to the listing's directory (`.` for a bare file name).
    let root = match listing.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(ImageListing {
        root,
        files,
        labels: ListingLabels::Cells {
            columns: t.labels,
            names: t.label_names,
            lines: t.lines,
            listing: listing.to_path_buf(),
        },
    })
}

/// The first image of the data set, found without listing the rest: the first file of
/// the first class directory, or the listing's first row.
fn first_image(manifest: &Manifest) -> Option<PathBuf> {
    let spec = &manifest.data;
    let path = manifest.resolve(&spec.source.value);
    match spec.format.kind() {
        FormatKind::Images { listed: true } => {
            let listing = list(spec, &path).ok()?;
            Some(listing.root.join(listing.files.first()?))
        }
        _ => {
            let classes = class_dirs(&path).ok()?;
            let mut files = Vec::new();
            walk(&path, Path::new(classes.first()?), &mut files).ok()?;
            Some(path.join(files.first()?))
        }
    }
}

/// The shape of one sample (`[channels, height, width]`) as `check` can know it: the
/// transforms applied to the first image's size (read from its header), or to none when
/// it cannot be read (the run says why) and the transforms fix the size. An error when
/// a transform cannot take the first image, located at the transform.
pub fn sample_shape(manifest: &Manifest) -> Result<Option<Vec<i64>>, Diagnostic> {
    let Some(images) = manifest.data.images.as_ref() else {
        return Ok(None);
    };
    let first = first_image(manifest).and_then(|p| Some((Image::dimensions(&p)?, p)));
    let size = match &first {
        Some((size, path)) => images.size(Some(*size)).map_err(|(t, e)| {
            Diagnostic::error(
                "pipeline::data::bad_transform",
                format!("{}: {}", path.display(), e.message),
            )
            .label_opt(t.span, format!("for an image of {}×{}", size.0, size.1))
            .help(e.help)
        })?,
        None => images.size(None).ok().flatten(),
    };
    Ok(size.map(|(h, w)| vec![images.channels as i64, h as i64, w as i64]))
}
