//! From `pipeline run`'s arguments to the stages a run executes: the order (`--stage`),
//! the cache (`--cache-dir`, `--no-cache`), the forced stages (`--force`), and whether
//! each stage is fresh. Shared by `pipeline` (which answers fully cached runs and
//! `status` without loading libtorch) and `pipeline-worker` (which runs the rest).

use crate::cli::{CacheDir, RunArgs};
use manifests::{suggest, Accelerator, AcceleratorSpec, DeviceSpec, Diagnostic, Manifest};
use pipeline_core::fingerprint::{cpu_threads, Environment};
use pipeline_core::freshness::{assess, Cache, StageState};
use pipeline_core::launch::Rendezvous;
use pipeline_core::Plan;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The environment variable that names a cache shared across projects.
pub const CACHE_DIR_ENV: &str = "PIPELINE_CACHE_DIR";

/// `--cache-dir`, else `$PIPELINE_CACHE_DIR`, each unless empty (an empty one would
/// otherwise make the current directory the cache), with where each came from.
fn given(dir: &CacheDir) -> impl Iterator<Item = (&'static str, PathBuf)> {
    let flag = dir.dir.clone().map(|d| ("--cache-dir", d));
    let env = std::env::var_os(CACHE_DIR_ENV).map(|d| (CACHE_DIR_ENV, PathBuf::from(d)));
    [flag, env]
        .into_iter()
        .flatten()
        .filter(|(_, d)| !d.as_os_str().is_empty())
}

/// The local cache directory: `--cache-dir`, else `$PIPELINE_CACHE_DIR`, else
/// `.pipeline/cache` in `base` (the manifest's directory). A URL among them
/// (`s3://bucket/prefix`) names the shared cache ([`cache_remote`]), not this one.
pub fn cache_root(dir: &CacheDir, base: &Path) -> PathBuf {
    given(dir)
        .map(|(_, d)| d)
        .find(|d| !cache::io::is_url(&d.to_string_lossy()))
        .unwrap_or_else(|| {
            let base = if base.as_os_str().is_empty() {
                Path::new(".")
            } else {
                base
            };
            base.join(".pipeline").join("cache")
        })
}

/// A shared cache's URL and where it was given (`--cache-dir` or the variable).
pub struct Shared {
    pub location: String,
    pub given_by: &'static str,
}

/// The shared cache behind the local one: the first of `--cache-dir` and
/// `$PIPELINE_CACHE_DIR` that is a URL (`s3://bucket/prefix`, `file:///shared/dir`).
pub fn cache_remote(dir: &CacheDir) -> Option<Shared> {
    if dir.local_only {
        return None;
    }
    given(dir)
        .map(|(given_by, d)| Shared {
            location: d.to_string_lossy().into_owned(),
            given_by,
        })
        .find(|shared| cache::io::is_url(&shared.location))
}

/// The store of `dir`: the local cache, with the shared one behind it when one is
/// given, opened and asked once whether it can be used (an unreachable endpoint, refused
/// credentials or a missing bucket is an error now, not a retraining later).
pub fn open_store(dir: &CacheDir, base: &Path) -> Result<cache::Store, Diagnostic> {
    let store = cache::Store::new(cache_root(dir, base))
        .requiring(pipeline_core::freshness::required_outputs_of_key);
    let Some(shared) = cache_remote(dir) else {
        return Ok(store);
    };
    let remote = cache::Remote::open(&shared.location)
        .and_then(|remote| remote.check().map(|()| remote))
        .map_err(|e| remote_unavailable(e, &shared))?;
    Ok(store.with_remote(remote))
}

/// The diagnostic for a shared cache that cannot be used, naming where it was given.
pub fn remote_unavailable(e: cache::io::IoError, shared: &Shared) -> Diagnostic {
    let unset = match shared.given_by {
        CACHE_DIR_ENV => format!("unset {CACHE_DIR_ENV}"),
        flag => format!("leave out {flag}"),
    };
    Diagnostic::error(
        "pipeline::cache::remote_unavailable",
        format!(
            "the shared cache given by {} cannot be used: {e}",
            shared.given_by
        ),
    )
    .help(format!(
        "check the URL, the endpoint (AWS_ENDPOINT_URL), the bucket and the credentials \
         (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), or {unset} to use the local cache alone"
    ))
}

/// What every stage key of this build shares, for a run of `manifest` by `processes` on
/// `device` (`cpu` or `cuda`).
pub fn environment(manifest: &Manifest, device: &str, processes: u64) -> Environment {
    Environment {
        tool: concat!("pipeline ", env!("CARGO_PKG_VERSION")).into(),
        libtorch: env!("PIPELINE_LIBTORCH_VERSION").into(),
        device: device.into(),
        processes,
        threads: (device == "cpu").then(|| cpu_threads(&manifest.accelerator)),
    }
}

/// The number of processes `manifest`'s stages last ran with (1 when never run), for the
/// commands that have no run's arguments (`status`, `cache gc`).
fn last_processes(manifest: &Manifest, last: &cache::LastKeys) -> u64 {
    manifest
        .stages
        .iter()
        .filter_map(|s| last.get(s.name())?.1["environment"]["processes"].as_u64())
        .max()
        .unwrap_or(1)
}

/// The kind of device a run will use, when it can be known without loading libtorch:
/// `auto` is the CPU on a machine without an NVIDIA driver, and unknown otherwise.
pub fn device_kind_without_libtorch(spec: &AcceleratorSpec) -> Option<&'static str> {
    match spec.device {
        DeviceSpec::On(accelerator, _) => Some(accelerator.as_str()),
        DeviceSpec::Auto => Accelerator::auto_without_libtorch().map(Accelerator::as_str),
    }
}

/// [`prepare`] for a look at the cache (`status`, `report`, `sweep`): every stage, on the
/// device kind a run would have (`cuda` when that needs libtorch to know), nothing forced.
pub fn prepare_to_look(
    file: &Path,
    manifest: &Manifest,
    cache: &CacheDir,
) -> Result<Prepared, Diagnostic> {
    let device = device_kind_without_libtorch(&manifest.accelerator).unwrap_or("cuda");
    prepare(file, manifest, None, None, Some(cache), device, None)
}

/// The stages to run, dependencies first: all of them, or `--stage NAME` and what it needs.
pub fn order(
    manifest: &Manifest,
    plan: &Plan,
    stage: Option<&str>,
) -> Result<Vec<usize>, Diagnostic> {
    let Some(name) = stage else {
        return Ok(plan.order.clone());
    };
    // A training of k-fold cross-validation is its folds' stages.
    let folds: Vec<usize> = (0..manifest.stages.len())
        .filter(|&i| manifest.stages[i].training() == name && manifest.stages[i].name() != name)
        .collect();
    if folds.is_empty() {
        return Ok(plan.upto(stage_index(manifest, name, "--stage")?));
    }
    let wanted: std::collections::BTreeSet<usize> =
        folds.into_iter().flat_map(|i| plan.upto(i)).collect();
    Ok(plan
        .order
        .iter()
        .copied()
        .filter(|i| wanted.contains(i))
        .collect())
}

fn stage_index(manifest: &Manifest, name: &str, flag: &str) -> Result<usize, Diagnostic> {
    manifest
        .stages
        .iter()
        .position(|s| s.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = manifest.stages.iter().map(|s| s.name()).collect();
            let mut help = suggest::help_for(name, "stage", &names);
            if name.ends_with(".kdl") {
                help = format!("write the manifest before {flag}: `pipeline run {name} {flag}`");
            }
            Diagnostic::error(
                "pipeline::run::unknown_stage",
                format!("{flag} {name}: the manifest has no such stage"),
            )
            .help(help)
        })
}

/// The stages `--force` reruns: every one (`--force`), or a stage and everything after it.
pub fn forced(
    manifest: &Manifest,
    plan: &Plan,
    force: Option<&str>,
) -> Result<BTreeSet<usize>, Diagnostic> {
    match force {
        None => Ok(BTreeSet::new()),
        Some("") => Ok((0..manifest.stages.len()).collect()),
        Some(name) => Ok(plan.downstream(stage_index(manifest, name, "--force")?)),
    }
}

/// The diagnostic for a cache directory that pipeline did not make.
pub fn not_a_cache(e: cache::NotACache) -> Diagnostic {
    Diagnostic::error(
        "pipeline::cache::not_a_cache",
        format!("{} is not a pipeline cache: {}", e.root.display(), e.why),
    )
    .help(format!(
        "pipeline writes only into a cache directory it made (one with its {}), and deletes \
         nothing elsewhere: give a new or empty directory with --cache-dir DIR or \
         {CACHE_DIR_ENV}=DIR, or leave both unset for .pipeline/cache next to the manifest",
        cache::TAG_FILE
    ))
}

/// A run, ready to execute.
pub struct Prepared {
    pub order: Vec<usize>,
    /// `None` under `--no-cache`.
    pub cache: Option<Cache>,
    /// One per stage of `order`, in that order.
    pub states: Vec<StageState>,
    /// The input hashes learnt; save it once the run has started, so a run that cannot
    /// start writes nothing.
    pub memo: cache::HashMemo,
}

/// Plans the run of `manifest` (read from `file`) on a `device` kind: the stages up to
/// `stage` (all without), `force`d as `--force` says, looked up in the cache in `cache`
/// (`None`: `--no-cache`).
pub fn prepare(
    file: &Path,
    manifest: &Manifest,
    stage: Option<&str>,
    force: Option<&str>,
    cache: Option<&CacheDir>,
    device: &str,
    processes: Option<u64>,
) -> Result<Prepared, Diagnostic> {
    let plan = Plan::new(manifest);
    let order = order(manifest, &plan, stage)?;
    let forced = forced(manifest, &plan, force)?;
    let (cache, mut memo) = match cache {
        None => (None, cache::HashMemo::none()),
        Some(dir) => {
            let store = open_store(dir, &manifest.base_dir)?;
            let root = store.root().to_path_buf();
            store.check_root().map_err(not_a_cache)?;
            let cache = Cache {
                store,
                last: cache::LastKeys::load(&root, file),
            };
            (Some(cache), cache::HashMemo::load(&root))
        }
    };
    let processes = processes
        .or_else(|| Some(last_processes(manifest, &cache.as_ref()?.last)))
        .unwrap_or(1);
    let states = assess(
        manifest,
        &order,
        &environment(manifest, device, processes),
        cache.as_ref(),
        &mut memo,
        &forced,
    )?;
    Ok(Prepared {
        order,
        cache,
        states,
        memo,
    })
}

/// [`prepare`] for `pipeline run`'s arguments.
pub fn prepare_run(
    manifest: &Manifest,
    args: &RunArgs,
    device: &str,
) -> Result<Prepared, Diagnostic> {
    let cache = (!args.no_cache).then_some(&args.cache);
    // The environment of a process started by a launcher, else the launcher's arguments.
    let processes = match Rendezvous::from_env(|k| std::env::var(k).ok()) {
        Ok(Some(r)) => r.world as u64,
        _ => (args.nproc_per_node * args.nnodes) as u64,
    };
    prepare(
        &args.file,
        manifest,
        args.stage.as_deref(),
        args.force.as_deref(),
        cache,
        device,
        Some(processes),
    )
}
