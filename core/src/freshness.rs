//! Which stages of a plan the cache already holds, and why the others must run, in the
//! words `pipeline status` shows: `optimizer.lr changed 0.001 → 0.0003`,
//! `data file digits.csv.gz changed`, `upstream stage train is stale`.
//!
//! A stage is fresh when the store has an intact entry under its fingerprint and it is not
//! forced. The reasons for a stale stage come from comparing its key with the key it had
//! when it last ran (kept per manifest in [`LastKeys`]).

use crate::extend::{self, Extension};
use crate::fingerprint::{
    explain_change, fingerprints, stage_inputs, Environment, Fingerprint, SOURCE_ROLE,
};
use crate::image_listing::ImageListing;
use crate::stages;
use crate::stale::Reason;
use cache::{Entry, HashMemo, HashedFile, LastKeys, Lookup, Store};
use manifests::{Diagnostic, Manifest, StageConfig};
use miette::SourceSpan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The cache as one run or `status` sees it: the store, and what this manifest's stages
/// were when they last ran.
pub struct Cache {
    pub store: Store,
    pub last: LastKeys,
}

#[derive(Debug, Clone)]
pub enum Freshness {
    /// The store holds the stage's outputs: nothing to do.
    Fresh(Entry),
    /// The stage must run, for these reasons.
    Stale(Vec<Reason>),
}

#[derive(Debug, Clone)]
pub struct StageState {
    pub index: usize,
    pub fingerprint: Fingerprint,
    pub freshness: Freshness,
    /// Rerun by `--force`, whatever the cache holds.
    pub forced: bool,
    /// A stale `train` stage that continues a cached shorter training ([`crate::extend`]).
    pub extends: Option<Extension>,
    /// The files the stage's key hashed, each as the version hashed: a stage that ran is
    /// stored only while they are still those ([`StageState::changed_input`]).
    pub read: Vec<HashedFile>,
}

impl StageState {
    pub fn is_fresh(&self) -> bool {
        matches!(self.freshness, Freshness::Fresh(_))
    }

    /// An input file of the stage that is no longer the version its key hashed (written
    /// to, replaced or removed since the run was planned), and how; `None` when every one
    /// is unchanged. What a stage computed is stored only when this is `None`.
    pub fn changed_input(&self) -> Option<(&Path, String)> {
        changed_input(&self.read, true)
    }
}

/// The first of `files` that is no longer the version hashed, and how: by its stamp, and
/// with `content` also by its content where the stamp cannot vouch for it.
pub fn changed_input(files: &[HashedFile], content: bool) -> Option<(&Path, String)> {
    files
        .iter()
        .find_map(|f| Some((f.path.as_path(), f.changed(content)?)))
}

/// The error of stage `stage` whose input `file` changed (`how`) while it ran: nothing
/// is stored.
pub fn changed_during_run(stage: &str, file: &Path, how: &str) -> Diagnostic {
    Diagnostic::error(
        "pipeline::data::changed_during_run",
        format!(
            "stage `{stage}`: {} changed while the stage ran ({how}); its result was not stored",
            file.display()
        ),
    )
    .help("run again once nothing writes to the stage's input files any more")
}

/// Fingerprints the stages of `order` (input files hashed through `memo`, which the caller
/// saves once the run has started) and looks each
/// up in `cache` (`None`: the cache is off, every stage is stale). `forced` stages are
/// stale whatever the cache holds. `Err` when an input file cannot be read.
pub fn assess(
    manifest: &Manifest,
    order: &[usize],
    environment: &Environment,
    cache: Option<&Cache>,
    memo: &mut HashMemo,
    forced: &BTreeSet<usize>,
) -> Result<Vec<StageState>, Diagnostic> {
    // Image data is a set of files: its hash is over the listing and every image.
    let source = manifest.resolve(&manifest.data.source.value);
    let images = match manifest.data.format.is_images() {
        true if !source.exists() => return Err(missing_input(manifest, "data", &source, None)),
        true => Some(ImageListing::of(manifest)?),
        false => None,
    };
    let mut image_set_hash = None;
    // The directories of images `predict` stages read: hashed as a set of images too.
    let predicted_images = predicted_image_dirs(manifest);
    // `.npy` shards named by a pattern (the data's, the labels'): where the stage inputs
    // name them, and the pattern as written.
    let data = &manifest.data;
    let patterns: Vec<(std::path::PathBuf, &Path)> = std::iter::once(&data.source)
        .chain(data.labels_file.as_ref())
        .filter(|p| crate::shards::is_pattern(&manifest.base_dir, &p.value))
        .map(|p| (manifest.resolve(&p.value), p.value.as_path()))
        .collect();
    // The files each input path stands for, as the memo lists them (from, to).
    let mut read_of: BTreeMap<std::path::PathBuf, (usize, usize)> = BTreeMap::new();
    let all = fingerprints(manifest, order, environment, |path| {
        let from = memo.hashed().len();
        let hash = if let Some((_, written)) = patterns.iter().find(|(p, _)| p == path) {
            shards_hash(&manifest.base_dir, written, memo).map_err(InputError::Io)?
        } else {
            match &images {
                Some(listing) if path == source => {
                    if image_set_hash.is_none() {
                        let hash = listing.content_hash(memo).map_err(|(file, e)| {
                            // A listed image is named with the listing's line too.
                            let at = listing
                                .files
                                .iter()
                                .position(|f| listing.root.join(f) == file)
                                .map_or_else(|| file.display().to_string(), |i| listing.at(i));
                            unreadable_image(manifest, &at, e)
                        })?;
                        image_set_hash = Some(hash);
                    }
                    image_set_hash.clone().expect("just set")
                }
                _ if predicted_images.contains_key(path) => {
                    let span = predicted_images[path];
                    let listing = ImageListing::unlabelled(path).map_err(|(why, help)| {
                        InputError::Image(
                            Diagnostic::error("pipeline::stage::bad_source", why)
                                .label_opt(span, "images to predict")
                                .help(help),
                        )
                    })?;
                    listing.content_hash(memo).map_err(|(file, e)| {
                        InputError::Image(
                            Diagnostic::error(
                                "pipeline::stage::bad_source",
                                format!("cannot read the image {}: {e}", file.display()),
                            )
                            .label_opt(span, "images to predict")
                            .help("check the image: it must be a regular file that can be read"),
                        )
                    })?
                }
                _ => memo.hash(path).map_err(InputError::Io)?,
            }
        };
        read_of
            .entry(path.to_path_buf())
            .or_insert((from, memo.hashed().len()));
        Ok(hash)
    })
    .map_err(|(index, role, e)| match e {
        InputError::Io(e) => unreadable_input(manifest, index, &role, e),
        InputError::Image(d) => d,
    })?;
    // Each stage's files, as the versions its key hashed.
    let read = |index: usize| -> Vec<HashedFile> {
        stage_inputs(manifest, index)
            .values()
            .filter_map(|path| read_of.get(path))
            .flat_map(|&(from, to)| memo.hashed()[from..to].iter().cloned())
            .collect()
    };

    let mut states: Vec<StageState> = Vec::with_capacity(order.len());
    for &index in order {
        let fingerprint = all[&index].clone();
        let mut extends = None;
        let freshness = match cache {
            None => Freshness::Stale(vec![Reason::CacheOff]),
            Some(_) if forced.contains(&index) => Freshness::Stale(vec![Reason::Forced]),
            Some(Cache { store, last }) => match store.get_requiring(
                &fingerprint.hash,
                stages::member(&manifest.stages[index].config).required_outputs(),
            ) {
                Lookup::Hit(entry) => Freshness::Fresh(entry),
                Lookup::Corrupt(why) => Freshness::Stale(vec![Reason::Unusable(why)]),
                Lookup::Miss => {
                    Freshness::Stale(match extend::find(store, manifest, index, &fingerprint) {
                        Ok(extension) => {
                            let epochs = extension.epochs;
                            extends = Some(extension);
                            vec![Reason::Extends { epochs }]
                        }
                        Err(why) => {
                            let mut reasons =
                                why_stale(manifest, index, &fingerprint, &states, &all, last);
                            reasons.extend(why.map(Reason::Retrains));
                            reasons
                        }
                    })
                }
            },
        };
        states.push(StageState {
            index,
            fingerprint,
            freshness,
            forced: forced.contains(&index),
            extends,
            read: read(index),
        });
    }
    Ok(states)
}

/// The directories of images the `predict` stages of image data read (resolved), with
/// where each is named.
pub fn predicted_image_dirs(manifest: &Manifest) -> BTreeMap<PathBuf, Option<SourceSpan>> {
    if !manifest.data.format.is_images() {
        return BTreeMap::new();
    }
    manifest
        .stages
        .iter()
        .filter_map(|stage| match &stage.config {
            StageConfig::Predict(p) => Some((manifest.resolve(&p.source.value), p.source.span)),
            _ => None,
        })
        .collect()
}

/// The content hash of the `.npy` shards a pattern (`written`, relative to `base`)
/// names: over each shard's content hash, in the order they are read (their names and
/// place are not in it, as a data file's are not). A shard that cannot be hashed is named.
fn shards_hash(base: &Path, written: &Path, memo: &mut HashMemo) -> std::io::Result<String> {
    let files = crate::shards::expand(base, written)
        .map_err(|why| std::io::Error::new(std::io::ErrorKind::NotFound, why))?;
    let mut listing = String::new();
    for file in files {
        let hash = memo
            .hash(&file)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
        listing.push_str(&hash);
        listing.push('\n');
    }
    Ok(cache::hash_bytes(listing.as_bytes()))
}

/// Why an input could not be hashed: a file, or an image of the data set (said already).
enum InputError {
    Io(std::io::Error),
    Image(Diagnostic),
}

/// An image of the data set that cannot be hashed (gone since it was listed, not a
/// regular file, unreadable).
fn unreadable_image(manifest: &Manifest, at: &str, e: std::io::Error) -> InputError {
    InputError::Image(
        Diagnostic::error(
            "pipeline::data::unreadable",
            format!("data.source: cannot read the image {at}: {e}"),
        )
        .label_opt(manifest.data.source.span, "image data")
        .help("check the image: it must be a regular file that can be read"),
    )
}

/// The reasons a stage missing from the store must run.
fn why_stale(
    manifest: &Manifest,
    index: usize,
    now: &Fingerprint,
    earlier: &[StageState],
    all: &BTreeMap<usize, Fingerprint>,
    last: &LastKeys,
) -> Vec<Reason> {
    let stage = &manifest.stages[index];
    let needed: Vec<(&str, Option<&StageState>)> = stage
        .needs
        .iter()
        .map(|n| {
            let state = earlier
                .iter()
                .find(|s| manifest.stages[s.index].name.value == n.value);
            (n.value.as_str(), state)
        })
        .collect();
    let mut reasons: Vec<Reason> = needed
        .iter()
        .filter(|(_, s)| s.is_some_and(|s| !s.is_fresh()))
        .map(|(name, _)| Reason::UpstreamStale(name.to_string()))
        .collect();
    let previous = last.get(stage.name()).and_then(|(fp, key)| {
        let key: crate::fingerprint::StageKey = serde_json::from_value(key.clone()).ok()?;
        Some((fp.to_string(), key))
    });
    match previous {
        None => reasons.push(Reason::NeverRun),
        Some((old_fp, old_key)) => {
            if reasons.is_empty() {
                for (name, state) in &needed {
                    if let Some(s) = state {
                        if !old_key.upstream.contains(&all[&s.index].hash) {
                            reasons.push(Reason::UpstreamChanged(name.to_string()));
                        }
                    }
                }
            }
            let changes = explain_change(&old_key, &now.key, &stage_inputs(manifest, index));
            // Longer, but not continued from the shorter training: why.
            let longer = extend::epochs(&old_key)
                .zip(extend::epochs(&now.key))
                .is_some_and(|(old, new)| old < new);
            let only_longer = changes.len() == 1 && longer;
            reasons.extend(changes);
            if let Some(why) = only_longer
                .then(|| extend::hindrance(manifest, index, now.key.environment.processes))
                .flatten()
            {
                reasons.push(Reason::Retrains(why));
            }
            if reasons.is_empty() {
                let main = stages::member(&stage.config).main_output();
                reasons.push(match (main, old_fp == now.hash) {
                    (None, true) => Reason::ResultMissing,
                    (Some(output), true) => Reason::OutputMissing(output),
                    (_, false) => Reason::NotInCache,
                });
            }
        }
    }
    reasons
}

/// The outputs an entry must hold to be served, for the stage a stored key is for
/// (`spec.stage`), for [`cache::Store::requiring`]: every lookup, by whichever crate,
/// then needs them. A key of a kind this version does not know (another version's) is
/// never looked up by a manifest of this one, and requires nothing more.
pub fn required_outputs_of_key(key: &serde_json::Value) -> &'static [&'static str] {
    let stage = &key["spec"]["stage"];
    match stage["kind"].as_str().and_then(manifests::StageKind::parse) {
        Some(kind) => (stages::kind(kind).required_of_key)(stage),
        None => &[],
    }
}

/// The input files of `manifest`'s stages that are not regular files (a FIFO, a device, a
/// directory), found without opening them, each as the located diagnostic `run` and
/// `status` give; for `pipeline check`, which reads no data. Missing files are not
/// reported here.
pub fn input_file_problems(manifest: &Manifest) -> Vec<Diagnostic> {
    let mut seen = BTreeSet::new();
    let mut problems = Vec::new();
    for index in 0..manifest.stages.len() {
        for (role, path) in stage_inputs(manifest, index) {
            // Image data is a directory or a listing, and a prediction's source of images a
            // directory: `ImageListing` reads them.
            let images =
                manifest.data.format.is_images() && (role == "data" || role == SOURCE_ROLE);
            if !seen.insert(path.clone()) || images {
                continue;
            }
            if let Err(e) = cache::require_regular(&path) {
                if e.kind() == std::io::ErrorKind::InvalidInput {
                    problems.push(unreadable_input(manifest, index, &role, e));
                }
            }
        }
    }
    problems
}

/// The manifest key that names the input file of `role` (see [`stage_inputs`]).
pub fn input_key(role: &str) -> &'static str {
    match role {
        "labels" => "data.labels",
        "init" => "train.init",
        "model" => "model.torchscript",
        "loss" => "loss.torchscript",
        "tokenizer" => "data.text.tokenizer",
        SOURCE_ROLE => "source",
        _ if role.starts_with("source input ") => "input",
        _ if role.starts_with("metric ") => "metric.torchscript",
        _ if role.starts_with("input ") => "data.inputs",
        _ => "data.source",
    }
}

fn unreadable_input(
    manifest: &Manifest,
    index: usize,
    role: &str,
    e: std::io::Error,
) -> Diagnostic {
    let path = &stage_inputs(manifest, index)[role];
    let stage_span = stages::member(&manifest.stages[index].config)
        .own_input()
        .and_then(|own| own.path.span);
    input_error(manifest, role, path, stage_span, e)
}

/// `Ok` when the input file of `role` (as in [`stage_inputs`]) at `path` is a regular
/// file (links followed), else the diagnostic `run` and `status` give; for readers that
/// open inputs themselves (the data loader, `init`), since opening a FIFO blocks.
pub fn regular_input(
    manifest: &Manifest,
    role: &str,
    path: &Path,
    init_span: Option<SourceSpan>,
) -> Result<(), Diagnostic> {
    cache::require_regular(path)
        .map(drop)
        .map_err(|e| input_error(manifest, role, path, init_span, e))
}

fn input_error(
    manifest: &Manifest,
    role: &str,
    path: &Path,
    init_span: Option<SourceSpan>,
    e: std::io::Error,
) -> Diagnostic {
    if e.kind() == std::io::ErrorKind::NotFound {
        return missing_input(manifest, role, path, init_span);
    }
    let span = match role {
        "init" | SOURCE_ROLE => init_span,
        "model" => script_span(manifest),
        "labels" => labels_span(manifest),
        "tokenizer" => tokenizer_span(manifest),
        _ if role.starts_with("input ") => input_span(manifest, role),
        _ => manifest.data.source.span,
    };
    let key = input_key(role);
    if e.kind() == std::io::ErrorKind::InvalidInput {
        // A FIFO, a device, a directory: refused before it is opened (cache::hash_file).
        return Diagnostic::error(
            if role == "init" {
                "pipeline::train::init_not_a_file"
            } else if role == "model" {
                "pipeline::model::not_a_file"
            } else {
                "pipeline::data::not_a_file"
            },
            format!("{key}: {e}"),
        )
        .label_opt(span, "not a regular file")
        .help(format!(
            "name a regular file in `{key}` (a link to one is fine): pipeline hashes its \
             inputs for the cache and reads them again to train, so a pipe or a device \
             cannot be one; copy the data into a file first"
        ));
    }
    Diagnostic::error(
        "pipeline::data::unreadable",
        format!("{key}: cannot read {}: {e}", path.display()),
    )
    .label_opt(span, "this file")
    .help("check the file's permissions")
}

/// Where the manifest names its labels file.
fn labels_span(manifest: &Manifest) -> Option<SourceSpan> {
    let data = &manifest.data;
    data.labels_file
        .as_ref()
        .and_then(|l| l.span)
        .or(data.span)
        .or(data.source.span)
}

/// Where the manifest names its tokenizer.
fn tokenizer_span(manifest: &Manifest) -> Option<SourceSpan> {
    let text = manifest.data.text.as_ref()?;
    text.tokenizer.span.or(text.span)
}

/// Where the manifest names the file of the input of `role` (`input NAME`).
fn input_span(manifest: &Manifest, role: &str) -> Option<SourceSpan> {
    let name = role.strip_prefix("input ")?;
    let input = manifest.data.extra_inputs.iter().find(|i| i.name == name)?;
    input.source.span.or(input.span)
}

/// Where the manifest names its TorchScript model.
fn script_span(manifest: &Manifest) -> Option<SourceSpan> {
    manifest
        .model
        .torchscript
        .as_ref()
        .and_then(|s| s.path.span.or(manifest.model.span))
}

/// The diagnostic for an input file that does not exist; `role` is as in
/// [`stage_inputs`] (`data`, `labels`, `init`, `model`, `source`), `init_span` points at a
/// stage's `init` or `source`.
pub fn missing_input(
    manifest: &Manifest,
    role: &str,
    path: &Path,
    init_span: Option<SourceSpan>,
) -> Diagnostic {
    let relative = format!(
        "paths are relative to the manifest's directory ({})",
        match manifest.base_dir.to_str() {
            Some("") => ".",
            Some(dir) => dir,
            None => "?",
        }
    );
    let source = manifest.data.source.span;
    match role {
        "labels" => Diagnostic::error(
            "pipeline::data::missing_file",
            format!("the labels file {} does not exist", path.display()),
        )
        .label_opt(labels_span(manifest), "file not found")
        .help(relative.clone()),
        "init" => Diagnostic::error(
            "pipeline::train::missing_init",
            format!("the starting weights {} do not exist", path.display()),
        )
        .label_opt(init_span, "starting weights")
        .help(relative),
        "model" => Diagnostic::error(
            "pipeline::model::missing_torchscript",
            format!("the TorchScript model {} does not exist", path.display()),
        )
        .label_opt(script_span(manifest), "file not found")
        .help(format!(
            "{relative}; write it in Python with `torch.jit.script(model).save(\"…\")`"
        )),
        "loss" => Diagnostic::error(
            "pipeline::loss::missing_torchscript",
            format!("the TorchScript loss {} does not exist", path.display()),
        )
        .label_opt(
            manifest.loss.kind.script().and_then(|s| s.path.span),
            "file not found",
        )
        .help(format!(
            "{relative}; write it in Python with `torch.jit.script(loss).save(\"…\")`"
        )),
        "schedule" => Diagnostic::error(
            "pipeline::schedule::missing_torchscript",
            format!("the TorchScript schedule {} does not exist", path.display()),
        )
        .label_opt(
            manifest.schedule.script.as_ref().and_then(|s| s.path.span),
            "file not found",
        )
        .help(format!(
            "{relative}; write it in Python with `torch.jit.script(schedule).save(\"…\")`"
        )),
        _ if role.starts_with("metric ") => {
            let metric = role
                .strip_prefix("metric ")
                .and_then(|name| manifest.scripted_metric(name));
            Diagnostic::error(
                "pipeline::metric::missing_torchscript",
                format!("the TorchScript metric {} does not exist", path.display()),
            )
            .label_opt(metric.and_then(|m| m.script.path.span), "file not found")
            .help(format!(
                "{relative}; write it in Python with `torch.jit.script(metric).save(\"…\")`"
            ))
        }
        SOURCE_ROLE => Diagnostic::error(
            "pipeline::data::missing_file",
            format!("the source {} does not exist", path.display()),
        )
        .label_opt(init_span, "file not found")
        .help(relative),
        "tokenizer" => Diagnostic::error(
            "pipeline::data::missing_tokenizer",
            format!("the tokenizer {} does not exist", path.display()),
        )
        .label_opt(tokenizer_span(manifest), "file not found")
        .help(format!(
            "{relative}; a Hugging Face tokenizer is saved with `tokenizer.save(\"tokenizer.json\")`"
        )),
        _ if role.starts_with("source input ") => Diagnostic::error(
            "pipeline::data::missing_file",
            format!(
                "the file of the input `{}` for the source, {}, does not exist",
                &role["source input ".len()..],
                path.display()
            ),
        )
        .label_opt(init_span, "the stage's source")
        .help(relative),
        _ if role.starts_with("input ") => Diagnostic::error(
            "pipeline::data::missing_file",
            format!(
                "the file of the input `{}`, {}, does not exist",
                &role["input ".len()..],
                path.display()
            ),
        )
        .label_opt(input_span(manifest, role), "file not found")
        .help(relative),
        _ => Diagnostic::error(
            "pipeline::data::missing_file",
            format!("the data file {} does not exist", path.display()),
        )
        .label_opt(source, "file not found")
        .help(if manifest.data.source.value.ends_with("digits.csv.gz") {
            format!("{relative}; `scripts/setup.sh` fetches the digits data")
        } else {
            relative
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::{CHECKPOINT_OUTPUT, MODEL_OUTPUT};
    use serde_json::json;
    use std::path::PathBuf;

    /// A fresh directory for one test (core has no tempfile), removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("pipeline-freshness-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn manifest(dir: &Path, data: &str, init: Option<&str>) -> Manifest {
        let init = init.map_or(String::new(), |i| format!(" init=\"{i}\""));
        let text = format!(
            "data {{ source \"{data}\"; format \"csv\"; }}\nmodel {{ linear 3; }}\n\
             loss \"cross-entropy\"\noptimizer \"adam\"\ntrain{init}\n\
             eval \"test\" needs=\"train\"\ncheckpoint needs=\"train\"\n"
        );
        let checked = crate::load(&text, &dir.join("m.kdl"), &[]);
        checked
            .valid()
            .unwrap_or_else(|| panic!("{:#?}", checked.diagnostics))
            .clone()
    }

    fn environment() -> Environment {
        Environment {
            tool: "t".into(),
            libtorch: "2.13.0".into(),
            device: "cpu".into(),
            processes: 1,
            threads: Some(2),
        }
    }

    fn assess_all(m: &Manifest, cache: Option<&Cache>) -> Result<Vec<StageState>, Diagnostic> {
        let order = crate::Plan::new(m).order;
        assess(
            m,
            &order,
            &environment(),
            cache,
            &mut HashMemo::none(),
            &BTreeSet::new(),
        )
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_as_inputs_are_refused_naming_the_key() {
        let dir = TempDir::new("devices");
        let zero = manifest(dir.path(), "/dev/zero", None);
        let err = assess_all(&zero, None).unwrap_err();
        assert_eq!(err.code, "pipeline::data::not_a_file");
        let problems = input_file_problems(&zero);
        assert_eq!(problems.len(), 1, "one file, named once");
        assert_eq!(problems[0].message, err.message);
        assert_eq!(
            err.message,
            "data.source: /dev/zero is a character device, not a regular file"
        );
        assert_eq!(err.labels.len(), 1, "points at data.source");

        std::fs::write(dir.path().join("d.csv"), "1,0\n").unwrap();
        let fifo = dir.path().join("w.fifo");
        if std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success())
        {
            // Would block forever in open(2) if it were opened.
            let m = manifest(dir.path(), "d.csv", Some("w.fifo"));
            let err = assess_all(&m, None).unwrap_err();
            assert_eq!(input_file_problems(&m).len(), 1);
            assert_eq!(err.code, "pipeline::train::init_not_a_file");
            assert_eq!(
                err.message,
                format!(
                    "train.init: {} is a FIFO (named pipe), not a regular file",
                    fifo.display()
                )
            );
            assert!(err.help.as_deref().unwrap().contains("name a regular file"));
        }
    }

    #[test]
    fn an_entry_without_the_outputs_its_kind_requires_is_rebuilt_never_served() {
        let dir = TempDir::new("required");
        std::fs::write(dir.path().join("d.csv"), "1,0\n").unwrap();
        let m = manifest(dir.path(), "d.csv", None);
        let cache = Cache {
            store: Store::new(dir.path().join("cache")),
            last: LastKeys::none(),
        };
        let states = assess_all(&m, Some(&cache)).unwrap();
        // Entries that list no outputs (valid, checksummed): eval needs none, the others do.
        for s in &states {
            cache
                .store
                .put(&s.fingerprint.hash, &json!({}), &json!({}), &[])
                .unwrap();
        }
        let reasons: Vec<(String, Option<Vec<Reason>>)> = assess_all(&m, Some(&cache))
            .unwrap()
            .into_iter()
            .map(|s| {
                let name = m.stages[s.index].name().to_string();
                match s.freshness {
                    Freshness::Fresh(_) => (name, None),
                    Freshness::Stale(why) => (name, Some(why)),
                }
            })
            .collect();
        let unusable = |what: &str| {
            Some(vec![Reason::Unusable(format!(
                "output {what} is not in the entry"
            ))])
        };
        assert_eq!(
            reasons,
            [
                ("train".to_string(), unusable(MODEL_OUTPUT)),
                ("test".to_string(), None),
                ("checkpoint".to_string(), unusable(CHECKPOINT_OUTPUT)),
            ]
        );
    }
}
