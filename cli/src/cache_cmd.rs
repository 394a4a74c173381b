//! `pipeline cache ls | gc | verify`: look into the stage cache and tidy it.
//!
//! Every command first makes sure the directory is a cache pipeline made (its
//! `CACHEDIR.TAG`, see `cache/src/root.rs`) and refuses any other, and the store removes
//! only entries, snapshots and temporary directories it can show it wrote: a user's files
//! are never deleted, even with the cache pointed at their directory.

use crate::cli::{CacheCommand, CacheDir};
use crate::load::Loaded;
use crate::{prepare, summary};
use cache::{recorded_stages, EntryInfo, Lookup, Remote, RootState, Store};
use manifests::Diagnostic;
use manifests::Override;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub fn run(command: &CacheCommand, dir: &CacheDir) -> bool {
    if let CacheCommand::Gc {
        keep,
        older_than: None,
        max_size: None,
        ..
    } = command
    {
        if keep.is_empty() {
            eprintln!("error: say what to remove: the manifests whose entries to keep, `--older-than DAYS` or `--max-size SIZE`");
            eprintln!("  help: `pipeline cache gc pipeline.kdl` keeps what pipeline.kdl uses now and removes the rest");
            return false;
        }
    }
    let base = match command {
        CacheCommand::Gc { keep, .. } => keep
            .first()
            .and_then(|f| f.parent())
            .unwrap_or(Path::new("")),
        _ => Path::new(""),
    };
    let store = Store::new(prepare::cache_root(dir, base))
        .requiring(pipeline_core::freshness::required_outputs_of_key);
    // `cache ls --json` prints one JSON document on every path, failures included.
    let json = matches!(command, CacheCommand::Ls { json: true });
    let fail = |d: Diagnostic| {
        eprintln!("{}", crate::render::human(&d, None));
        if json {
            println!("{}", crate::render::json_failure(&[d], None));
        }
        false
    };
    if let Some(shared) = prepare::cache_remote(dir) {
        let opened = Remote::open(&shared.location)
            .map(|r| r.requiring(pipeline_core::freshness::required_outputs_of_key))
            .and_then(|r| r.check().map(|()| r))
            .and_then(|r| r.list().map(|e| (r, e)));
        return match opened {
            Ok((remote, entries)) => {
                // The stages that used each entry are recorded in the local cache; the
                // keys `gc` keeps are computed without fetching anything.
                let local = CacheDir {
                    local_only: true,
                    ..dir.clone()
                };
                let users = users_of(&prepare::cache_root(dir, base));
                dispatch(command, &Place::Shared(&remote), entries, &users, &local)
            }
            Err(e) => fail(prepare::remote_unavailable(e, &shared)),
        };
    }
    match store.check_root() {
        Err(e) => return fail(prepare::not_a_cache(e)),
        Ok(RootState::Absent) if !matches!(command, CacheCommand::Ls { .. }) => {
            println!(
                "{}: no cache there yet, nothing to do",
                store.root().display()
            );
            return true;
        }
        // An earlier pipeline's cache: tagged now, so that its entries can be tidied.
        Ok(RootState::Legacy) => {
            if let Err(e) = store.ensure_root() {
                return fail(Diagnostic::error(
                    "pipeline::cache::unwritable",
                    format!(
                        "cannot mark {} as a pipeline cache: {e}",
                        store.root().display()
                    ),
                ));
            }
        }
        Ok(_) => {}
    }
    let entries = match store.list() {
        Ok(e) => e,
        Err(e) => {
            return fail(Diagnostic::error(
                "pipeline::cache::unreadable",
                format!("cannot read the cache {}: {e}", store.root().display()),
            ))
        }
    };
    let users = users_of(store.root());
    dispatch(command, &Place::Local(&store), entries, &users, dir)
}

/// `cache ls | gc | verify` on `place`'s `entries`; `users` are the stages that last used
/// each, `dir` where the keys `gc` keeps are computed.
fn dispatch(
    command: &CacheCommand,
    place: &Place,
    entries: Vec<EntryInfo>,
    users: &BTreeMap<String, Vec<String>>,
    dir: &CacheDir,
) -> bool {
    match command {
        CacheCommand::Ls { json } => list(&place.describe(), users, &entries, *json),
        CacheCommand::Gc {
            keep,
            set,
            older_than,
            max_size,
            dry_run,
        } => gc(
            place,
            entries,
            (keep, set),
            *older_than,
            *max_size,
            *dry_run,
            dir,
        ),
        CacheCommand::Verify { remove } => verify(place, &entries, *remove),
    }
}

/// `1.2 MB`, `340 kB`, `17 B`.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} kB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn age(t: Option<SystemTime>) -> Duration {
    t.and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default()
}

/// `3 s`, `12 min`, `5 h`, `2 d` ago.
fn ago(t: Option<SystemTime>) -> String {
    let s = age(t).as_secs();
    match s {
        s if s < 120 => format!("{s} s ago"),
        s if s < 7200 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// The stages (`manifest.kdl: train`) whose last run used each fingerprint, from the
/// record in the local cache `root`.
fn users_of(root: &Path) -> BTreeMap<String, Vec<String>> {
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (manifest, stage, fp) in recorded_stages(root) {
        let name = Path::new(&manifest)
            .file_name()
            .map_or(manifest.clone(), |n| n.to_string_lossy().into_owned());
        users
            .entry(fp)
            .or_default()
            .push(format!("{name}: {stage}"));
    }
    users
}

/// `cache ls`'s table (or JSON) of `entries` at `place`.
fn list(
    place: &str,
    users: &BTreeMap<String, Vec<String>>,
    entries: &[EntryInfo],
    json: bool,
) -> bool {
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    if json {
        let list: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "fingerprint": e.fingerprint,
                    "kind": e.kind,
                    "bytes": e.bytes,
                    "last_used_seconds_ago": age(e.last_used).as_secs(),
                    "stages": users.get(&e.fingerprint).cloned().unwrap_or_default(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "cache": place, "bytes": total, "entries": list })
        );
        return true;
    }
    let mut rows = vec![[
        "fingerprint",
        "kind",
        "size",
        "last used",
        "stage (last run)",
    ]
    .map(String::from)
    .to_vec()];
    for e in entries {
        rows.push(vec![
            e.fingerprint[..16.min(e.fingerprint.len())].to_string(),
            e.kind.clone(),
            size(e.bytes),
            ago(e.last_used),
            users
                .get(&e.fingerprint)
                .map_or(String::new(), |u| u.join(", ")),
        ]);
    }
    println!("{place} · {} entries · {}", entries.len(), size(total));
    if !entries.is_empty() {
        print!("{}", summary::columns(&rows));
    }
    true
}

/// The fingerprints the stages of `file` (with the `--set` overrides `set`) have now, on
/// either kind of device.
fn reachable(file: &Path, set: &[Override], dir: &CacheDir) -> Result<BTreeSet<String>, ()> {
    let loaded = Loaded::read_to_run(file, set, dir);
    let manifest = loaded.report().ok_or(())?;
    let mut keep = BTreeSet::new();
    for device in ["cpu", "cuda"] {
        let prepared = prepare::prepare(file, manifest, None, None, Some(dir), device, None)
            .map_err(|d| {
                eprintln!("{}", crate::render::human(&d, loaded.source.as_ref()));
            })?;
        keep.extend(prepared.states.into_iter().map(|s| s.fingerprint.hash));
    }
    Ok(keep)
}

fn gc(
    place: &Place,
    mut entries: Vec<EntryInfo>,
    (keep_files, set): (&[PathBuf], &[Override]),
    older_than: Option<f64>,
    max_size: Option<u64>,
    dry_run: bool,
    dir: &CacheDir,
) -> bool {
    let mut keep = BTreeSet::new();
    for file in keep_files {
        match reachable(file, set, dir) {
            Ok(k) => keep.extend(k),
            Err(()) => return false,
        }
    }
    // Snapshots of unfinished stages go the same way as entries.
    if let Place::Local(store) = place {
        entries.extend(store.snapshots());
    }
    let mut doomed: Vec<EntryInfo> = Vec::new();
    // Oldest first, so `--max-size` removes the least recently used.
    entries.sort_by_key(|e| std::cmp::Reverse(age(e.last_used)));
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    for e in entries {
        let unreachable = !keep_files.is_empty() && !keep.contains(&e.fingerprint);
        let old = older_than.is_some_and(|days| age(e.last_used).as_secs_f64() > days * 86_400.0);
        let too_big = max_size.is_some_and(|max| total > max) && !keep.contains(&e.fingerprint);
        if unreachable || old || too_big {
            total -= e.bytes;
            doomed.push(e);
        }
    }
    let freed: u64 = doomed.iter().map(|e| e.bytes).sum();
    let verb = if dry_run { "would remove" } else { "removed" };
    let mut ok = true;
    for e in &doomed {
        if !dry_run {
            let removed = place.remove(e);
            if let Err(err) = removed {
                eprintln!("error: cannot remove entry {}: {err}", e.fingerprint);
                ok = false;
                continue;
            }
        }
        eprintln!(
            "{verb} {} ({}, {})",
            &e.fingerprint[..16.min(e.fingerprint.len())],
            e.kind,
            size(e.bytes)
        );
    }
    if !dry_run {
        if let Err(e) = place.tidy() {
            eprintln!("error: {e}");
            ok = false;
        }
    }
    println!(
        "{verb} {} entries ({}); {} left",
        doomed.len(),
        size(freed),
        size(total)
    );
    ok
}

fn verify(place: &Place, entries: &[EntryInfo], remove: bool) -> bool {
    let mut corrupt = 0;
    for e in entries {
        let why = match place.corrupt(&e.fingerprint) {
            Ok(why) => why,
            Err(err) => {
                eprintln!("error: {err}");
                return false;
            }
        };
        if let Some(why) = why {
            corrupt += 1;
            let fate = match remove.then(|| place.remove(e)) {
                Some(Ok(())) => "; removed, the next run that needs it rebuilds it",
                Some(Err(_)) => "; could not be removed",
                None => "; the next run that needs it rebuilds it",
            };
            eprintln!("corrupt: {} ({}): {why}{fate}", e.fingerprint, e.kind);
        }
    }
    println!("{} entries checked, {corrupt} corrupt", entries.len());
    corrupt == 0 || remove
}

/// The cache a command works on: the local directory, or the shared one it names.
enum Place<'a> {
    Local(&'a Store),
    Shared(&'a Remote),
}

impl Place<'_> {
    /// The place in messages.
    fn describe(&self) -> String {
        match self {
            Place::Local(store) => store.root().display().to_string(),
            Place::Shared(remote) => remote.describe(),
        }
    }

    fn remove(&self, e: &EntryInfo) -> std::io::Result<()> {
        match (self, e.kind.as_str()) {
            (Place::Local(store), "snapshot") => store.remove_snapshot(&e.fingerprint),
            (Place::Local(store), _) => store.remove(&e.fingerprint),
            (Place::Shared(remote), _) => Ok(remote.remove(&e.fingerprint)?),
        }
    }

    /// Why entry `fingerprint` is corrupt, every output re-hashed; `None` when intact.
    fn corrupt(&self, fingerprint: &str) -> Result<Option<String>, cache::io::IoError> {
        match self {
            Place::Local(store) => Ok(match store.get(fingerprint) {
                Lookup::Corrupt(why) => Some(why),
                _ => None,
            }),
            Place::Shared(remote) => remote.verify(fingerprint),
        }
    }

    /// After removing entries: what crashed writers left a day ago or more (in the
    /// shared cache, also the outputs no entry names any more).
    fn tidy(&self) -> Result<(), cache::io::IoError> {
        match self {
            Place::Local(store) => {
                store.clean_tmp(Duration::from_secs(24 * 3600));
            }
            Place::Shared(remote) => {
                let (objects, bytes) = remote.sweep(cache::GRACE)?;
                if objects > 0 {
                    eprintln!("removed {objects} objects no entry names ({})", size(bytes));
                }
            }
        }
        Ok(())
    }
}
