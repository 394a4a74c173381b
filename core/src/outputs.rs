//! The files a run writes where the manifest says (a `checkpoint` stage's `path`, and its
//! metadata beside it: the same name with `.json`), and what keeps them from replacing
//! anything that is not theirs.
//!
//! - [`check`], at `pipeline check`: two outputs never share a path, an output is never an
//!   input of the pipeline (the manifest itself, the data, an NPY labels file, a stage's
//!   `init`), and never a file that is not a regular one (`/dev/null`, a FIFO, a
//!   directory, a link): located diagnostics.
//! - [`may_replace`], at run time, just before a file is written: a file already at an
//!   output's path is replaced only if it is a regular file that `pipeline` wrote itself
//!   and not an input reached under another name. Weights prove it by a marker in their
//!   safetensors header ([`WRITTEN_BY`]), metadata by its `"tool"` field. Anything else
//!   is refused, and nothing is written.
//!
//! Honest limit: the proof is a marker, not a signature; a file that carries it was
//! written by `pipeline` or made to look so on purpose.

use manifests::{Diagnostic, Manifest, StageConfig};
use miette::SourceSpan;
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// The `__metadata__` entry of every safetensors file `pipeline` writes:
/// `"written_by": "pipeline"`.
pub const WRITTEN_BY: (&str, &str) = ("written_by", "pipeline");

/// The metadata file written beside a checkpoint's weights.
pub fn metadata_path(weights: &Path) -> PathBuf {
    weights.with_extension("json")
}

/// A file a checkpoint stage writes at a path the manifest names.
struct Output<'a> {
    stage: &'a str,
    path: PathBuf,
    span: Option<SourceSpan>,
    what: &'static str,
}

/// A file the pipeline reads.
struct Input {
    role: String,
    path: PathBuf,
    span: Option<SourceSpan>,
}

/// `path` resolved against `base` with `.` and `..` folded, so that two spellings of one
/// path compare equal without touching the disk.
fn normal(base: &Path, path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(path).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The device and inode of an existing file (links followed), to find one file under two
/// names.
fn identity(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || identity(a).is_some_and(|id| identity(b) == Some(id))
}

/// The files the pipeline reads, by role; `manifest_path` is the manifest's own file.
fn inputs(manifest: &Manifest, manifest_path: Option<&Path>) -> Vec<Input> {
    let base = &manifest.base_dir;
    let mut all = Vec::new();
    if let Some(path) = manifest_path {
        all.push(Input {
            role: "the manifest itself".into(),
            path: normal(Path::new(""), path),
            span: None,
        });
    }
    all.push(Input {
        role: "the data file".into(),
        path: normal(base, &manifest.data.source.value),
        span: manifest.data.source.span,
    });
    if let Some(labels) = &manifest.data.labels_file {
        all.push(Input {
            role: "the labels file".into(),
            path: normal(base, &labels.value),
            span: labels.span.or(manifest.data.span),
        });
    }
    if let Some(script) = &manifest.model.torchscript {
        all.push(Input {
            role: "the TorchScript model".into(),
            path: normal(base, &script.path.value),
            span: script.path.span,
        });
    }
    for stage in &manifest.stages {
        if let StageConfig::Train(train) = &stage.config {
            if let Some(init) = &train.init {
                all.push(Input {
                    role: format!("the starting weights of stage `{}`", stage.name()),
                    path: normal(base, &init.value),
                    span: init.span,
                });
            }
        }
    }
    all
}

fn outputs(manifest: &Manifest) -> Vec<Output<'_>> {
    let mut all = Vec::new();
    for stage in &manifest.stages {
        if let StageConfig::Checkpoint(spec) = &stage.config {
            if let Some(written) = &spec.path {
                let weights = normal(&manifest.base_dir, &written.value);
                for (what, path) in [
                    ("its weights", weights.clone()),
                    ("its metadata", metadata_path(&weights)),
                ] {
                    all.push(Output {
                        stage: stage.name(),
                        path,
                        span: path_span(stage, written.span),
                        what,
                    });
                }
            }
        }
    }
    all
}

/// The span of a checkpoint's `path`, else the stage's name.
fn path_span(stage: &manifests::StageSpec, path: Option<SourceSpan>) -> Option<SourceSpan> {
    path.or(stage.name.span)
}

/// The rules on where checkpoints are written, for `pipeline check`; `manifest_path` is
/// the manifest's own file.
pub fn check(manifest: &Manifest, manifest_path: Option<&Path>) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let outputs = outputs(manifest);
    for pair in outputs.chunks(2) {
        if let [weights, metadata] = pair {
            if weights.path == metadata.path {
                diags.push(
                    Diagnostic::error(
                        "pipeline::checkpoint::path_is_metadata",
                        format!(
                            "stage `{}` would write its weights where its metadata goes: {}",
                            weights.stage,
                            weights.path.display()
                        ),
                    )
                    .label_opt(weights.span, "ends in .json")
                    .help("the metadata is written beside the weights with `.json`: name the weights `….safetensors`"),
                );
            }
        }
    }
    let mut reported = std::collections::BTreeSet::new();
    for (i, a) in outputs.iter().enumerate() {
        for b in outputs[i + 1..].iter().filter(|b| b.stage != a.stage) {
            if same_file(&a.path, &b.path) && reported.insert((a.stage, b.stage)) {
                diags.push(
                    Diagnostic::error(
                        "pipeline::checkpoint::same_path",
                        format!(
                            "stages `{}` and `{}` would write the same file {}",
                            a.stage,
                            b.stage,
                            a.path.display()
                        ),
                    )
                    .label_opt(a.span, format!("{} go here", a.what))
                    .label_opt(b.span, format!("and {} too", b.what))
                    .help("give each checkpoint a `path` of its own"),
                );
            }
        }
    }
    let inputs = inputs(manifest, manifest_path);
    for out in &outputs {
        if let Some(input) = inputs.iter().find(|i| same_file(&out.path, &i.path)) {
            let mut d = Diagnostic::error(
                "pipeline::checkpoint::overwrites_input",
                format!(
                    "stage `{}` would overwrite {} with {}: {}",
                    out.stage,
                    input.role,
                    out.what,
                    out.path.display()
                ),
            )
            .label_opt(out.span, format!("{} go here", out.what));
            if input.span != out.span {
                d = d.label_opt(input.span, "read from here");
            }
            diags.push(d.help(
                "write the checkpoint to a path of its own, e.g. `path \"model.safetensors\"`",
            ));
        } else if let Some(kind) = not_regular(&out.path) {
            diags.push(
                Diagnostic::error(
                    "pipeline::checkpoint::not_a_file",
                    format!(
                        "stage `{}` would write {} to {}, which is {kind}",
                        out.stage,
                        out.what,
                        out.path.display()
                    ),
                )
                .label_opt(out.span, "not a regular file")
                .help(
                    "write the checkpoint to a path of its own, e.g. `path \"model.safetensors\"`",
                ),
            );
        }
    }
    diags
}

/// What `path` is when it exists and is not a regular file ("a directory", …).
fn not_regular(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = fs::symlink_metadata(path).ok()?.file_type();
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_symlink() {
        Some("a symbolic link")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else {
        Some("a socket")
    }
}

/// Whether a safetensors file carries [`WRITTEN_BY`] in its header.
fn weights_written_by_pipeline(path: &Path) -> bool {
    let read = || -> Option<bool> {
        let mut file = fs::File::open(path).ok()?;
        let mut len = [0u8; 8];
        file.read_exact(&mut len).ok()?;
        let len = u64::from_le_bytes(len);
        // safetensors headers are small; a larger one is not a header of ours.
        if len > 100 << 20 {
            return Some(false);
        }
        let mut header = vec![0u8; len as usize];
        file.read_exact(&mut header).ok()?;
        let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
        Some(header["__metadata__"][WRITTEN_BY.0] == WRITTEN_BY.1)
    };
    read().unwrap_or(false)
}

/// Whether a JSON file is checkpoint metadata `pipeline` wrote (`"tool": "pipeline …"`).
fn metadata_written_by_pipeline(path: &Path) -> bool {
    let small = fs::metadata(path).is_ok_and(|m| m.len() <= 16 << 20);
    small
        && fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| Some(v["tool"].as_str()?.starts_with("pipeline ")))
            .unwrap_or(false)
}

/// Whether the checkpoint files of stage `index` may be written at `weights` (and its
/// metadata beside it): `Err` says why not, as a diagnostic on the stage's `path`.
pub fn may_replace(manifest: &Manifest, index: usize, weights: &Path) -> Result<(), Diagnostic> {
    let stage = &manifest.stages[index];
    let span = match &stage.config {
        StageConfig::Checkpoint(spec) => path_span(stage, spec.path.as_ref().and_then(|p| p.span)),
        _ => stage.name.span,
    };
    let refuse = |path: &Path, why: String| {
        Err(Diagnostic::error(
            "pipeline::checkpoint::refused",
            format!(
                "stage `{}`: will not replace {}: {why}",
                stage.name(),
                path.display()
            ),
        )
        .label_opt(span, "written here")
        .help(
            "move that file away or remove it if you no longer need it, or give the checkpoint another `path`",
        ))
    };
    let inputs = inputs(manifest, None);
    let metadata = metadata_path(weights);
    for (path, ours) in [
        (weights, weights_written_by_pipeline as fn(&Path) -> bool),
        (metadata.as_path(), metadata_written_by_pipeline),
    ] {
        if fs::symlink_metadata(path).is_err() {
            continue; // nothing there
        }
        if let Some(kind) = not_regular(path) {
            return refuse(path, format!("it is {kind}"));
        }
        if let Some(input) = inputs.iter().find(|i| same_file(path, &i.path)) {
            return refuse(path, format!("it is {}", input.role));
        }
        if !ours(path) {
            return refuse(path, "pipeline did not write it".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_compared_after_folding_dots() {
        assert_eq!(
            normal(Path::new("a/b"), Path::new("./../b/./x.csv")),
            PathBuf::from("a/b/x.csv")
        );
        assert_eq!(
            normal(Path::new(""), Path::new("../x")),
            PathBuf::from("../x")
        );
    }

    #[test]
    fn only_files_pipeline_wrote_count_as_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let weights = dir.path().join("w.safetensors");
        let header = br#"{"__metadata__":{"written_by":"pipeline"}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        fs::write(&weights, &bytes).unwrap();
        assert!(weights_written_by_pipeline(&weights));
        let other = br#"{"__metadata__":{"format":"pt"}}"#;
        let mut bytes = (other.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(other);
        fs::write(&weights, &bytes).unwrap();
        assert!(!weights_written_by_pipeline(&weights));
        fs::write(&weights, b"x").unwrap();
        assert!(!weights_written_by_pipeline(&weights));

        let meta = dir.path().join("w.json");
        fs::write(&meta, br#"{"tool": "pipeline 0.1.0"}"#).unwrap();
        assert!(metadata_written_by_pipeline(&meta));
        fs::write(&meta, br#"{"tool": "other"}"#).unwrap();
        assert!(!metadata_written_by_pipeline(&meta));
        assert_eq!(not_regular(Path::new("/dev/null")), Some("a device"));
        assert_eq!(not_regular(dir.path()), Some("a directory"));
        assert_eq!(not_regular(&meta), None);
    }
}
