//! The files a run writes where the manifest says (a `checkpoint` stage's `path`, and its
//! metadata beside it: the same name with `.json`; the predictions of a `predict` or
//! `eval` stage's `output`), and
//! what keeps them from replacing anything that is not theirs.
//!
//! - [`check`], at `pipeline check`: two outputs never share a path, an output is never an
//!   input of the pipeline (the manifest itself, the data, an NPY labels file, a stage's
//!   `init` or `source`), and never a file that is not a regular one (`/dev/null`, a FIFO,
//!   a directory, a link): located diagnostics.
//! - [`may_replace`], at run time, just before a file is written: a file already at an
//!   output's path is replaced only if it is a regular file that `pipeline` wrote itself
//!   and not an input reached under another name. Weights prove it by a marker in their
//!   safetensors header ([`WRITTEN_BY`]), metadata by its `"tool"` field. Predictions
//!   (CSV, NPY) have no room for a marker: [`record_written`] notes the content hash of
//!   each one written in `.pipeline/written.json` beside the manifest, and a file is
//!   `pipeline`'s while it still has that content. Anything else is refused, and nothing
//!   is written.
//!
//! Honest limit: the proof is a marker or a note, not a signature; a file that carries
//! it was written by `pipeline` or made to look so on purpose.

use crate::stages::{self, Delivery};
use manifests::{Diagnostic, Manifest, Spanned};
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

/// A file a stage writes at a path the manifest names.
struct Output<'a> {
    stage: &'a str,
    path: PathBuf,
    span: Option<SourceSpan>,
    what: &'static str,
    /// What the diagnostics' codes and help call it: `checkpoint`, `predictions`.
    kind: &'static str,
}

impl Output<'_> {
    fn code(&self, problem: &str) -> &'static str {
        match (self.kind, problem) {
            ("predictions", "same_path") => "pipeline::predictions::same_path",
            ("predictions", "overwrites_input") => "pipeline::predictions::overwrites_input",
            ("predictions", _) => "pipeline::predictions::not_a_file",
            (_, "same_path") => "pipeline::checkpoint::same_path",
            (_, "overwrites_input") => "pipeline::checkpoint::overwrites_input",
            _ => "pipeline::checkpoint::not_a_file",
        }
    }

    fn help(&self) -> &'static str {
        match self.kind {
            "predictions" => {
                "write the predictions to a path of their own, e.g. `output \"predictions.csv\"`"
            }
            _ => "write the checkpoint to a path of its own, e.g. `path \"model.safetensors\"`",
        }
    }
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
    if let Some(script) = manifest.loss.kind.script() {
        all.push(Input {
            role: "the TorchScript loss".into(),
            path: normal(base, &script.path.value),
            span: script.path.span,
        });
    }
    if let Some(script) = &manifest.schedule.script {
        all.push(Input {
            role: "the TorchScript schedule".into(),
            path: normal(base, &script.path.value),
            span: script.path.span,
        });
    }
    for metric in &manifest.metrics {
        all.push(Input {
            role: format!("the TorchScript metric `{}`", metric.name.value),
            path: normal(base, &metric.script.path.value),
            span: metric.script.path.span,
        });
    }
    for stage in &manifest.stages {
        if let Some(own) = stages::member(&stage.config).own_input() {
            all.push(Input {
                role: format!("{} of stage `{}`", own.role, stage.name()),
                path: normal(base, &own.path.value),
                span: own.path.span,
            });
        }
    }
    all
}

fn outputs(manifest: &Manifest) -> Vec<Output<'_>> {
    let mut all = Vec::new();
    for stage in &manifest.stages {
        let mut add = |written: &Spanned<PathBuf>, path: PathBuf, what, kind| {
            all.push(Output {
                stage: stage.name(),
                path,
                span: path_span(stage, written.span),
                what,
                kind,
            })
        };
        match stages::member(&stage.config).delivery() {
            Delivery::Checkpoint {
                path: Some(written),
            } => {
                let weights = normal(&manifest.base_dir, &written.value);
                let metadata = metadata_path(&weights);
                add(written, weights, "its weights", "checkpoint");
                add(written, metadata, "its metadata", "checkpoint");
            }
            Delivery::Predictions {
                output: Some(written),
                ..
            } => {
                let path = normal(&manifest.base_dir, &written.value);
                add(written, path, "its predictions", "predictions");
            }
            // Written in the run directory, which is the run's own.
            Delivery::Checkpoint { path: None } | Delivery::Predictions { output: None, .. } => {}
            Delivery::Nothing => {}
        }
    }
    all
}

/// The span of a checkpoint's `path`, else the stage's name.
fn path_span(stage: &manifests::StageSpec, path: Option<SourceSpan>) -> Option<SourceSpan> {
    path.or(stage.name.span)
}

/// Every path the manifest names, with its role and whether it may be a URL (an object
/// in storage): a `checkpoint` stage's `path` and a `train` stage's `init`; the data and
/// the rest are read from files.
fn named_paths(manifest: &Manifest) -> Vec<(String, &Spanned<PathBuf>, bool)> {
    let data = &manifest.data;
    let mut all = vec![("the data file".to_string(), &data.source, false)];
    all.extend(
        data.labels_file
            .iter()
            .map(|p| ("the labels file".into(), p, false)),
    );
    all.extend(
        data.text
            .iter()
            .map(|t| ("the tokenizer".into(), &t.tokenizer, false)),
    );
    all.extend(
        data.extra_inputs
            .iter()
            .map(|i| (format!("input `{}`", i.name), &i.source, false)),
    );
    all.extend(
        manifest
            .model
            .torchscript
            .iter()
            .map(|t| ("the TorchScript model".into(), &t.path, false)),
    );
    all.extend(
        manifest
            .loss
            .kind
            .script()
            .map(|t| ("the TorchScript loss".into(), &t.path, false)),
    );
    all.extend(
        manifest
            .schedule
            .script
            .iter()
            .map(|t| ("the TorchScript schedule".into(), &t.path, false)),
    );
    all.extend(manifest.metrics.iter().map(|m| {
        (
            format!("the TorchScript metric `{}`", m.name.value),
            &m.script.path,
            false,
        )
    }));
    for stage in &manifest.stages {
        let of = |what: &str| format!("{what} of stage `{}`", stage.name());
        let member = stages::member(&stage.config);
        if let Some(own) = member.own_input() {
            all.push((of(own.role), own.path, own.may_be_url));
        }
        // A checkpoint may be sent to storage; predictions are written to a file.
        let delivery = member.delivery();
        let to_storage = matches!(delivery, Delivery::Checkpoint { .. });
        if let Some((what, path)) = delivery.named_path() {
            all.push((of(what), path, to_storage));
        }
    }
    all
}

/// The URLs among the manifest's paths that cannot be used: where only a file can be,
/// with a scheme no place is registered for, or naming no object (`s3://bucket`).
fn urls(manifest: &Manifest) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for (role, path, may_be_url) in named_paths(manifest) {
        let text = path.value.to_string_lossy();
        let Some(scheme) = cache::io::scheme(&text) else {
            continue;
        };
        let registered = cache::io::members().iter().any(|m| m.scheme == scheme);
        let why = if !may_be_url {
            format!("{role} is read from a file, not from `{text}`")
        } else if !registered {
            let known: Vec<String> = cache::io::members()
                .iter()
                .map(|m| format!("`{}://`", m.scheme))
                .collect();
            format!(
                "no place is registered for `{scheme}://` (registered: {})",
                known.join(", ")
            )
        } else if cache::io::split_object(&text).is_none() {
            format!("`{text}` names no object: write `{scheme}://bucket/key`")
        } else {
            continue;
        };
        diags.push(
            Diagnostic::error("pipeline::manifest::bad_url", why)
                .label_opt(path.span, "this URL")
                .help("only a `checkpoint` stage's `path` and a `train` stage's `init` may name an object in storage (`s3://bucket/key`); give a file for the rest"),
        );
    }
    diags
}

/// The rules on where checkpoints are written, for `pipeline check`; `manifest_path` is
/// the manifest's own file.
pub fn check(manifest: &Manifest, manifest_path: Option<&Path>) -> Vec<Diagnostic> {
    let mut diags = urls(manifest);
    let outputs = outputs(manifest);
    for pair in outputs.windows(2) {
        if let [weights, metadata] = pair {
            if weights.stage == metadata.stage && weights.path == metadata.path {
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
                        a.code("same_path"),
                        format!(
                            "stages `{}` and `{}` would write the same file {}",
                            a.stage,
                            b.stage,
                            a.path.display()
                        ),
                    )
                    .label_opt(a.span, format!("{} go here", a.what))
                    .label_opt(b.span, format!("and {} too", b.what))
                    .help(match (a.kind, b.kind) {
                        ("checkpoint", "checkpoint") => "give each checkpoint a `path` of its own",
                        _ => "give each stage's output a path of its own",
                    }),
                );
            }
        }
    }
    let inputs = inputs(manifest, manifest_path);
    for out in &outputs {
        if let Some(input) = inputs.iter().find(|i| same_file(&out.path, &i.path)) {
            let mut d = Diagnostic::error(
                out.code("overwrites_input"),
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
            diags.push(d.help(out.help()));
        } else if let Some(kind) = not_regular(&out.path) {
            diags.push(
                Diagnostic::error(
                    out.code("not_a_file"),
                    format!(
                        "stage `{}` would write {} to {}, which is {kind}",
                        out.stage,
                        out.what,
                        out.path.display()
                    ),
                )
                .label_opt(out.span, "not a regular file")
                .help(out.help()),
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

/// Sends checkpoint stage `index`'s files (`weights`, `metadata`) to `url` in object
/// storage (`s3://bucket/key.safetensors`, its metadata beside it as `key.json`), unless
/// they are there already: the metadata there names `fingerprint`. The weights go first,
/// the metadata last, so metadata naming a fingerprint is never beside other weights.
/// Refuses to replace an object that `pipeline` did not write (one without pipeline's
/// metadata beside it). The URLs of the two objects.
pub fn send_checkpoint(
    manifest: &Manifest,
    index: usize,
    url: &str,
    (weights, metadata): (&Path, &Path),
    fingerprint: &str,
) -> Result<Vec<PathBuf>, Diagnostic> {
    let stage = &manifest.stages[index];
    let delivery = stages::member(&stage.config).delivery();
    let span = path_span(stage, delivery.named_path().and_then(|(_, p)| p.span));
    let fail = |why: String| {
        Diagnostic::error(
            "pipeline::checkpoint::upload_failed",
            format!("stage `{}`: {why}", stage.name()),
        )
        .label_opt(span, "sent here")
        .help(format!(
            "the checkpoint is kept in {}; check the endpoint and credentials \
             (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), or give another `path`",
            weights.display()
        ))
    };
    let (parent, name) = cache::io::split_object(url)
        .ok_or_else(|| fail(format!("`{url}` names no object (write `s3://bucket/key`)")))?;
    let io = cache::io::open(parent).map_err(|e| fail(e.to_string()))?;
    let meta_name = metadata_path(Path::new(name))
        .to_string_lossy()
        .into_owned();
    let sent = vec![
        PathBuf::from(url),
        PathBuf::from(format!("{parent}/{meta_name}")),
    ];
    let there = io
        .read_bytes(&meta_name)
        .map_err(|e| fail(e.to_string()))?
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let ours = there.as_ref().is_some_and(|v| {
        v["tool"]
            .as_str()
            .is_some_and(|t| t.starts_with("pipeline "))
    });
    let weights_there = io.size(name).map_err(|e| fail(e.to_string()))?;
    if weights_there.is_some() && !ours {
        return Err(fail(format!(
            "will not replace {url}: no checkpoint metadata of pipeline's is beside it ({})",
            sent[1].display()
        )));
    }
    let same = there
        .as_ref()
        .is_some_and(|v| v["fingerprint"] == fingerprint)
        && weights_there == std::fs::metadata(weights).ok().map(|m| m.len());
    if !same {
        for (key, file) in [(name, weights), (meta_name.as_str(), metadata)] {
            let mut source = std::fs::File::open(file)
                .map_err(|e| fail(format!("cannot read {}: {e}", file.display())))?;
            io.write(key, &mut source)
                .map_err(|e| fail(e.to_string()))?;
        }
    }
    Ok(sent)
}

/// Puts the files stage `index` produced where the manifest says, and says where they are:
/// a checkpoint's weights and metadata at its `path` (or sent to it in object storage),
/// predictions at their `output`, each copied there, atomically, from `stored(name)` (the
/// stage's file by its name in the store: the cache's copy, or the private one the stage
/// wrote) when the file there is missing or differs, and only where [`may_replace`]
/// allows it. A file with no declared path is copied into `default_dir` as
/// `<stage>.<extension>` (a run directory), or with `None` stays where `stored` has it.
///
/// A stage's outputs are only ever copied out of what it stored, never read back from a
/// user's path: two runs writing the same path leave the file of one of them there, and
/// each its own result in the cache.
pub fn place(
    manifest: &Manifest,
    index: usize,
    stored: &dyn Fn(&str) -> Result<PathBuf, Diagnostic>,
    default_dir: Option<&Path>,
    fingerprint: &str,
) -> Result<Vec<PathBuf>, Diagnostic> {
    let stage = &manifest.stages[index];
    let default = |extension: &str, from: PathBuf| -> Result<PathBuf, Diagnostic> {
        match default_dir {
            Some(dir) => {
                let to = dir.join(format!("{}.{extension}", stage.name()));
                copy_out(&from, &to)?;
                Ok(to)
            }
            None => Ok(from),
        }
    };
    let path = match stages::member(&stage.config).delivery() {
        Delivery::Nothing => return Ok(Vec::new()),
        Delivery::Predictions { output, format } => {
            let from = stored(stages::predictions_output(format))?;
            return Ok(vec![match output {
                Some(path) => {
                    let path = manifest.resolve(&path.value);
                    if !same_content(&from, &path) {
                        may_replace(manifest, index, &path)?;
                        copy_out(&from, &path)?;
                        record_written(manifest, &path)?;
                    }
                    path
                }
                None => default(format.as_str(), from)?,
            }]);
        }
        Delivery::Checkpoint { path } => path,
    };
    let weights = stored(stages::CHECKPOINT_OUTPUT)?;
    let metadata = stored(stages::CHECKPOINT_METADATA)?;
    match path {
        Some(url) if is_url(&url.value) => send_checkpoint(
            manifest,
            index,
            &url.value.to_string_lossy(),
            (&weights, &metadata),
            fingerprint,
        ),
        Some(path) => {
            let path = manifest.resolve(&path.value);
            let meta_path = metadata_path(&path);
            if !same_content(&weights, &path) || !same_content(&metadata, &meta_path) {
                may_replace(manifest, index, &path)?;
                copy_out(&weights, &path)?;
                copy_out(&metadata, &meta_path)?;
            }
            Ok(vec![path, meta_path])
        }
        None => {
            let weights = default("safetensors", weights)?;
            let meta_path = metadata_path(&weights);
            if default_dir.is_some() {
                copy_out(&metadata, &meta_path)?;
                Ok(vec![weights, meta_path])
            } else {
                Ok(vec![weights, metadata])
            }
        }
    }
}

/// Whether regular file `to` holds what `from` holds.
fn same_content(from: &Path, to: &Path) -> bool {
    fs::symlink_metadata(to).is_ok_and(|m| m.is_file())
        && fs::metadata(from).ok().map(|m| m.len()) == fs::metadata(to).ok().map(|m| m.len())
        && cache::hash_file(from).ok() == cache::hash_file(to).ok()
}

/// Copies `from` to `to` (through a temporary file renamed into place) unless `to`
/// already has the same content.
fn copy_out(from: &Path, to: &Path) -> Result<(), Diagnostic> {
    if same_content(from, to) {
        return Ok(());
    }
    cache::write_atomic_with(to, |tmp| fs::copy(from, tmp).map(drop)).map_err(|e| {
        // A directory on the way that is a file says more than the system's "File exists".
        let file_on_the_way = to
            .ancestors()
            .skip(1)
            .find(|a| !a.as_os_str().is_empty() && fs::metadata(a).is_ok_and(|m| !m.is_dir()));
        let (why, help) = match file_on_the_way {
            Some(file) => (
                format!("{} is a file, not a directory", file.display()),
                "move that file away, or give the output another path",
            ),
            None => (
                e.to_string(),
                "check that the directory is writable and the disk is not full",
            ),
        };
        Diagnostic::error(
            "pipeline::run::write_failed",
            format!("cannot write {}: {why}", to.display()),
        )
        .help(help)
    })
}

/// Whether a path from the manifest names an object in storage (`s3://bucket/key`)
/// rather than a file.
pub fn is_url(path: &Path) -> bool {
    cache::io::is_url(&path.to_string_lossy())
}

/// Whether stage `index` may write its files at `path`: a checkpoint's weights there and
/// its metadata beside them, or a `predict` stage's predictions. `Err` says why not, as a
/// diagnostic on the stage's path.
pub fn may_replace(manifest: &Manifest, index: usize, path: &Path) -> Result<(), Diagnostic> {
    let stage = &manifest.stages[index];
    let delivery = stages::member(&stage.config).delivery();
    let span = path_span(stage, delivery.named_path().and_then(|(_, p)| p.span));
    let metadata = metadata_path(path);
    // The code and help of a refusal, and each file with what proves that `pipeline`
    // wrote it.
    let (code, help, files) = match delivery {
        Delivery::Predictions { .. } => (
            "pipeline::predictions::refused",
            "move that file away or remove it if you no longer need it, or give the predictions another `output`",
            vec![(path, Proof::Noted)],
        ),
        Delivery::Checkpoint { .. } => (
            "pipeline::checkpoint::refused",
            "move that file away or remove it if you no longer need it, or give the checkpoint another `path`",
            vec![(path, Proof::Marker), (metadata.as_path(), Proof::Tool)],
        ),
        // A stage that delivers nothing writes nothing here: weights are what it keeps.
        Delivery::Nothing => (
            "pipeline::checkpoint::refused",
            "move that file away or remove it if you no longer need it",
            vec![(path, Proof::Marker), (metadata.as_path(), Proof::Tool)],
        ),
    };
    let refuse = |path: &Path, why: String| {
        Err(Diagnostic::error(
            code,
            format!(
                "stage `{}`: will not replace {}: {why}",
                stage.name(),
                path.display()
            ),
        )
        .label_opt(span, "written here")
        .help(help))
    };
    let inputs = inputs(manifest, None);
    for (path, proof) in files {
        let ours = |path: &Path| match proof {
            Proof::Marker => weights_written_by_pipeline(path),
            Proof::Tool => metadata_written_by_pipeline(path),
            Proof::Noted => written_here(manifest, path),
        };
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

/// What proves that `pipeline` wrote a file.
enum Proof {
    /// Weights: [`WRITTEN_BY`] in their safetensors header.
    Marker,
    /// Checkpoint metadata: its `"tool"` field.
    Tool,
    /// Predictions: [`record_written`]'s note of their content.
    Noted,
}

/// The note of the files without a marker that `pipeline` wrote for this manifest's
/// stages: `.pipeline/written.json` beside it, a JSON object of path → blake3.
fn written_notes(manifest: &Manifest) -> PathBuf {
    let base = match manifest.base_dir.as_os_str().is_empty() {
        true => Path::new("."),
        false => manifest.base_dir.as_path(),
    };
    base.join(".pipeline").join("written.json")
}

/// How a file is named in the note: its absolute path with links resolved.
fn noted_name(path: &Path) -> Option<String> {
    Some(fs::canonicalize(path).ok()?.to_string_lossy().into_owned())
}

fn read_notes(manifest: &Manifest) -> serde_json::Map<String, serde_json::Value> {
    fs::read(written_notes(manifest))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Whether `path` holds what `pipeline` last wrote there ([`record_written`]).
fn written_here(manifest: &Manifest, path: &Path) -> bool {
    let Some(name) = noted_name(path) else {
        return false;
    };
    let noted = read_notes(manifest);
    let Some(hash) = noted.get(&name).and_then(|h| h.as_str()) else {
        return false;
    };
    cache::hash_file(path).is_ok_and(|h| h == hash)
}

/// Notes that `pipeline` wrote `path` (as it is now), so that a later run may replace it.
/// Two runs noting at once may lose one note: the file is then refused, never lost.
pub fn record_written(manifest: &Manifest, path: &Path) -> Result<(), Diagnostic> {
    let notes = written_notes(manifest);
    let failed = |e: std::io::Error| {
        Diagnostic::error(
            "pipeline::run::write_failed",
            format!("cannot write {}: {e}", notes.display()),
        )
        .help("check that the directory is writable and the disk is not full")
    };
    let name = noted_name(path).ok_or_else(|| {
        failed(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} is gone", path.display()),
        ))
    })?;
    let hash = cache::hash_file(path).map_err(failed)?;
    let mut noted = read_notes(manifest);
    // Files since removed are forgotten.
    noted.retain(|p, _| Path::new(p).exists());
    noted.insert(name, serde_json::Value::from(hash));
    if let Some(dir) = notes.parent() {
        fs::create_dir_all(dir).map_err(failed)?;
    }
    let text = serde_json::to_string_pretty(&noted).expect("json");
    cache::write_atomic(&notes, text.as_bytes()).map_err(failed)
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
