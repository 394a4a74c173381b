//! The guard of the whole class "a setting that changes the numbers but not the key"
//! (issue 32: `accelerator.threads` was one): every key of the manifest's schema is set to
//! each of a few values other than its default, as `--set` would, and either some stage's
//! key changes, or the key is in [`OUTSIDE`], with the reason its value cannot change what
//! a stage computes. A new key that changes no stage key fails this test until it is keyed
//! or listed; a listed key that every value keys fails it too (the list stays true).
//!
//! What it reaches: the keys of every top-level section and of every stage kind, and of
//! their nested blocks (`data.split`, `train.early-stop`, …), with the values their type
//! allows (integers at their bounds and beside the default, numbers in range, both
//! booleans, every choice and registered member). A key is tried with the section's
//! `kind` set to one it applies to (`schedule.step-size` under `schedule "step"`). Paths
//! and texts are not tried: a file's content is in the key, not its path
//! (`fingerprint.rs`), and names are not settings. A value the rules refuse in this
//! manifest is skipped; a key none of whose values is accepted here is listed in the
//! failure message of [`unreached_keys_are_few`] for a human to judge.

use crate::fingerprint::{fingerprints, Environment, Fingerprint};
use manifests::schema::{Bound, Section, Ty, Val, STAGES};
use manifests::Override;
use std::collections::BTreeMap;
use std::path::Path;

/// Keys whose value cannot change what any stage computes, each with why.
const OUTSIDE: &[(&str, &str)] = &[
    ("pipeline", "the pipeline's name only labels runs and reports"),
    ("logging", "what is logged, and where, never feeds back into the math"),
    ("sweep", "a sweep's settings choose which runs happen, each run keyed by its own values"),
    ("accelerator.bucket-mb", "gradient buckets change when the all-reduce starts, not the summed values (tested equal in tests/e2e/distributed.rs)"),
    ("accelerator.timeout", "how long a process waits for the others"),
    ("accelerator.backend", "Gloo and NCCL carry the same sums; the device, which picks between them, is keyed"),
    ("data.workers", "threads assembling the same batches in the same order (tests/e2e/streaming.rs)"),
    ("data.prefetch", "how many of the same batches are assembled ahead"),
    ("data.load", "streamed and held batches are the same (tests/e2e/streaming.rs); keyed only where streamed statistics are summed in another order (`scale`, `missing \"mean\"`)"),
    ("train.snapshot-every-epochs", "snapshots are taken beside the training, which resumes bit for bit from them (tests/e2e/lifecycle.rs)"),
    ("train.snapshot-every-steps", "snapshots are taken beside the training, which resumes bit for bit from them"),
];

/// What a key needs set beside it to be accepted at all (by the prefix of its path as
/// written in [`BASE`]).
const COMPANIONS: &[(&str, &[(&str, &str)])] = &[
    ("schedule.", &[("schedule.monitor", "val.loss")]),
    (
        "optimizer.nesterov",
        &[("optimizer.momentum", "0.9"), ("optimizer.kind", "sgd")],
    ),
];

/// The manifest every key is tried in: every stage kind, a validation split.
const BASE: &str = r#"pipeline "keys"
seed 1
data {
    source "d.csv"
    split train=0.7 val=0.1 test=0.2
}
model { linear 8; relu; linear 3; }
loss "cross-entropy"
optimizer "adam" lr=0.001
train "fit" epochs=2
eval "test" needs="fit"
checkpoint "export" needs="fit" path="out.safetensors"
predict "scores" needs="fit" source="new.csv" output="p.csv"
"#;

/// The stage of each kind in [`BASE`], by the kind's section name.
fn stage_name(kind: &str) -> &'static str {
    match kind {
        "train" => "fit",
        "eval" => "test",
        "checkpoint" => "export",
        "predict" => "scores",
        other => panic!("no stage of kind {other} in BASE"),
    }
}

/// What [`BASE`] under some overrides is: the typed manifest (as JSON), and its stages'
/// fingerprints by name.
#[derive(PartialEq)]
struct Outcome {
    manifest: serde_json::Value,
    keys: BTreeMap<String, String>,
}

/// [`BASE`] under `overrides`; `None` when the manifest is refused.
fn keys(overrides: &[Override]) -> Option<Outcome> {
    let checked = crate::load(BASE, Path::new("m.kdl"), overrides);
    let m = checked.valid()?;
    let plan = crate::Plan::new(m);
    let env = Environment {
        tool: "t".into(),
        libtorch: "2.13.0".into(),
        device: "cpu".into(),
        processes: 1,
        // A machine of 4 cores, so that no value tried is this machine's own count.
        threads: Some(m.accelerator.threads.unwrap_or(4)),
    };
    let all: BTreeMap<usize, Fingerprint> = fingerprints(m, &plan.order, &env, |p| {
        Ok::<_, ()>(format!("hash of {}", p.display()))
    })
    .ok()?;
    Some(Outcome {
        manifest: serde_json::to_value(m).expect("manifests serialise"),
        keys: all
            .into_iter()
            .map(|(i, f)| (m.stages[i].name().to_string(), f.hash))
            .collect(),
    })
}

fn set(path: &str, value: &str) -> Override {
    Override::parse(&format!("{path}={value}")).expect("a well-formed override")
}

/// Values of `ty` other than `default` to try.
fn candidates(ty: &Ty, default: Option<Val>) -> Vec<String> {
    let within = |v: f64, min: Bound, max: Bound| {
        let above = match min {
            Bound::None => true,
            Bound::Inclusive(m) => v >= m,
            Bound::Exclusive(m) => v > m,
        };
        let below = match max {
            Bound::None => true,
            Bound::Inclusive(m) => v <= m,
            Bound::Exclusive(m) => v < m,
        };
        above && below
    };
    match ty {
        Ty::Int { min, max } => {
            let d = match default {
                Some(Val::Int(d)) => d,
                _ => *min,
            };
            let mut v = vec![
                *min,
                d.saturating_add(1).min(*max),
                (*min).max(d - 1),
                (*max).min(d.saturating_add(7)),
            ];
            v.sort();
            v.dedup();
            v.into_iter()
                .filter(|v| Some(Val::Int(*v)) != default)
                .map(|v| v.to_string())
                .collect()
        }
        Ty::Float { min, max } => [0.5, 0.25, 2.0, 0.01, 1e-5, 3.0, 0.9]
            .into_iter()
            .filter(|v| within(*v, *min, *max) && Some(Val::Float(*v)) != default)
            .map(|v| v.to_string())
            .collect(),
        Ty::Bool => [true, false]
            .into_iter()
            .filter(|b| Some(Val::Bool(*b)) != default)
            .map(|b| format!("#{b}"))
            .collect(),
        Ty::Choice(names) => names
            .iter()
            .filter(|n| Some(Val::Text(n)) != default)
            .map(|n| n.to_string())
            .collect(),
        Ty::Member(family) => family
            .names()
            .into_iter()
            .filter(|n| Some(Val::Text(n)) != default)
            .map(str::to_string)
            .collect(),
        // Paths, texts, devices, columns and lists: see the module's documentation.
        _ => Vec::new(),
    }
}

/// What trying one key found.
#[derive(Debug, Default)]
struct Verdict {
    /// Values that changed some stage's key.
    keyed: Vec<String>,
    /// Values that changed the manifest and no stage's key.
    unkeyed: Vec<String>,
    /// Values accepted (no-ops included).
    accepted: usize,
}

/// Tries every key of `section`, written under `path` (`data`, `fit`, `data.split`), with
/// `base` overrides already applied; nested blocks are tried under their own paths.
fn try_section(
    section: &Section,
    path: &str,
    name: &str,
    base: &[Override],
    verdicts: &mut BTreeMap<String, Verdict>,
) {
    for key in section.keys {
        let full = format!("{path}.{}", key.name);
        let shown = format!("{name}.{}", key.name);
        if let Ty::Section(inner) = key.ty {
            try_section(inner, &full, &shown, base, verdicts);
            continue;
        }
        let kinds: Vec<Option<&str>> = match key.only_for {
            [] => vec![None],
            kinds => kinds.iter().copied().map(Some).collect(),
        };
        for kind in kinds {
            let mut with_kind = base.to_vec();
            for (prefix, needs) in COMPANIONS {
                if full.starts_with(prefix) {
                    with_kind.extend(needs.iter().map(|(k, v)| set(k, v)));
                }
            }
            if let Some(kind) = kind {
                with_kind.push(set(&format!("{path}.kind"), kind));
            }
            let Some(before) = keys(&with_kind) else {
                continue;
            };
            for value in candidates(&key.ty, key.default) {
                let mut with_value = with_kind.clone();
                with_value.push(set(&full, &value));
                let Some(after) = keys(&with_value) else {
                    continue;
                };
                let verdict = verdicts.entry(shown.clone()).or_default();
                verdict.accepted += 1;
                let tried = match kind {
                    Some(k) => format!("{value} (kind {k})"),
                    None => value.clone(),
                };
                // A value that lowers to the same manifest (the default as inferred or
                // inherited, a setting the manifest drops where it has no effect)
                // changes nothing to key.
                if after.manifest == before.manifest {
                    continue;
                }
                match after.keys != before.keys {
                    true => verdict.keyed.push(tried),
                    false => verdict.unkeyed.push(tried),
                }
            }
        }
        verdicts.entry(shown).or_default();
    }
}

/// Every key tried, by the name `explain` gives it (`train.epochs` for the stage's keys).
fn verdicts() -> BTreeMap<String, Verdict> {
    let mut verdicts = BTreeMap::new();
    for section in manifests::schema::sections() {
        if section.name == "model" {
            // Every layer's settings are in the key as written (`to_value(&model)`).
            continue;
        }
        try_section(section, section.name, section.name, &[], &mut verdicts);
    }
    for stage in STAGES {
        try_section(
            stage,
            stage_name(stage.name),
            stage.name,
            &[],
            &mut verdicts,
        );
    }
    verdicts
}

/// Whether `key` is in [`OUTSIDE`], itself or under a listed section.
fn listed(key: &str) -> bool {
    OUTSIDE
        .iter()
        .any(|(k, _)| key == *k || key.starts_with(&format!("{k}.")))
}

#[test]
fn every_setting_changes_the_key_or_is_listed_with_its_reason() {
    let verdicts = verdicts();
    let holes: Vec<String> = verdicts
        .iter()
        .filter(|(key, v)| !v.unkeyed.is_empty() && !listed(key))
        .map(|(key, v)| format!("{key}: {:?} changed no stage's key", v.unkeyed))
        .collect();
    assert!(
        holes.is_empty(),
        "settings outside every stage key: key them (fingerprint.rs) or list them in OUTSIDE with why:\n{}",
        holes.join("\n")
    );
    let stale: Vec<&str> = OUTSIDE
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| {
            let under: Vec<&Verdict> = verdicts
                .iter()
                .filter(|(key, _)| key == k || key.starts_with(&format!("{k}.")))
                .map(|(_, v)| v)
                .collect();
            !under.is_empty()
                && under
                    .iter()
                    .all(|v| v.unkeyed.is_empty() && !v.keyed.is_empty())
        })
        .collect();
    assert!(
        stale.is_empty(),
        "listed in OUTSIDE but keyed by every value: {stale:?}"
    );
}

#[test]
fn unreached_keys_are_few() {
    let verdicts = verdicts();
    let unreached: Vec<&String> = verdicts
        .iter()
        .filter(|(_, v)| v.accepted == 0)
        .map(|(k, _)| k)
        .collect();
    let tried = verdicts.len() - unreached.len();
    assert!(
        tried >= 80,
        "only {tried} keys tried; not reached: {unreached:?}"
    );
    println!("{tried} keys tried; not reached here: {unreached:?}");
}
