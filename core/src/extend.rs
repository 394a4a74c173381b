//! Extending a finished training: when only a `train` stage's `epochs` grows, its first
//! epochs are those of the cached shorter training, so the longer one continues from the
//! state the shorter one ended in instead of starting over, and ends where a training of
//! the longer length from scratch ends, bit for bit.
//!
//! That holds when nothing in the first epochs depends on how many there are in all:
//!
//! - the learning-rate schedule does not span the training (its `Length`: `constant`,
//!   `step`, `exponential`, `reduce-on-plateau`, a `cosine` of a declared
//!   `length-epochs`, each with or without a warm-up; `cosine` without one, `linear`,
//!   `polynomial` and `one-cycle` stretch with `epochs`);
//! - the shorter training's last epoch validates in the longer one too, when a validation
//!   decides anything (`early-stop`, `reduce-on-plateau`): a training always validates at
//!   its end;
//! - the shorter training ran all its epochs (a stopped one never stores its final state);
//! - it trains in one process (each process of a distributed training holds a state of
//!   its own, which only rank 0's cache would keep);
//! - it keeps no best weights (`keep-best`'s files are not part of the final state).
//!
//! A training that could be extended stores its final state (a snapshot taken after its
//! last epoch, [`FINAL_STATE`] and [`FINAL_TENSORS`]) beside its weights, and its entry
//! joins its *lineage* in the store: the fingerprint of its key without `epochs`.

use crate::fingerprint::{Fingerprint, StageKey};
use cache::{Entry, Store};
use manifests::schedules::Length;
use manifests::{Manifest, StageConfig};

/// The final state's position and checksums (a snapshot's `snapshot.json`).
pub const FINAL_STATE: &str = "final-state.json";
/// The final state's tensors: weights, optimizer and loss-scaler state, random state.
pub const FINAL_TENSORS: &str = "final-state.safetensors";

/// Why the final state of `train` stage `index` could not be continued by a longer
/// training, in words `pipeline status` shows after "it retrains from the start:";
/// `None` when it could (the stage stores its final state).
pub fn hindrance(manifest: &Manifest, index: usize, processes: u64) -> Option<String> {
    let StageConfig::Train(train) = &manifest.stages[index].config else {
        return Some("only a train stage is extended".into());
    };
    let schedule = &manifest.schedule.kind;
    // What to add when its curve spans the training, else `None`.
    let spans = match schedule.member.describe().length {
        Length::Unbounded => None,
        Length::Training => Some(String::new()),
        Length::Key(key) if schedule.settings.get(key).is_none() => {
            Some(format!(" (declare its `{key}` to extend)"))
        }
        Length::Key(_) => None,
    };
    if let Some(declare) = spans {
        return Some(format!(
            "schedule \"{}\" spans all the epochs, so the first ones change with their number{declare}",
            schedule.name()
        ));
    }
    if train.keep_best.is_some() {
        return Some("keep-best's kept weights are not part of a training's final state".into());
    }
    if processes > 1 {
        return Some(format!(
            "it trains in {processes} processes, whose final states are not kept"
        ));
    }
    None
}

/// The lineage of a `train` stage's key: the fingerprint of the key without its number
/// of epochs, shared by the trainings that differ only in length.
pub fn lineage(key: &StageKey) -> String {
    let mut key = key.clone();
    if let Some(stage) = key.spec.get_mut("stage").and_then(|s| s.as_object_mut()) {
        stage.remove("epochs");
    }
    cache::hash_bytes(format!("lineage {}", key.canonical()).as_bytes())
}

/// A cached shorter training that a stage continues.
#[derive(Debug, Clone)]
pub struct Extension {
    /// Its entry, which holds its final state.
    pub entry: Entry,
    /// The epochs it trained.
    pub epochs: u64,
}

/// The epochs of a `train` stage's key.
pub fn epochs(key: &StageKey) -> Option<u64> {
    key.spec.get("stage")?.get("epochs")?.as_u64()
}

/// The longest cached training that `train` stage `index` (fingerprinted `now`) can
/// continue. `Err(Some(why))` when a shorter one of the same settings is cached but cannot
/// be continued (the words after "it retrains from the start:"), `Err(None)` when none is
/// cached or the stage could not continue any ([`hindrance`], which `status` says where
/// the key shows that only `epochs` grew).
pub fn find(
    store: &Store,
    manifest: &Manifest,
    index: usize,
    now: &Fingerprint,
) -> Result<Extension, Option<String>> {
    let StageConfig::Train(train) = &manifest.stages[index].config else {
        return Err(None);
    };
    if hindrance(manifest, index, now.key.environment.processes).is_some() {
        return Err(None);
    }
    // The longer training validates at the shorter one's end only where `validate`
    // falls there; that matters when a validation decides anything.
    let decides = !manifest.monitors(train).is_empty();
    let every = train.validate.every_epochs;
    let validates_at = |epoch: u64| !decides || (every > 0 && epoch.is_multiple_of(every));
    let ours = lineage(&now.key);
    let shorter: Vec<(u64, String)> = store
        .lineage(&ours)
        .into_iter()
        .filter_map(|(fingerprint, key)| {
            // The index says which entries are of the lineage; their keys must agree.
            let key: StageKey = serde_json::from_value(key).ok()?;
            let epochs = epochs(&key)?;
            (lineage(&key) == ours && epochs < train.epochs).then_some((epochs, fingerprint))
        })
        .collect();
    let (mut candidates, unfit): (Vec<_>, Vec<_>) = shorter
        .into_iter()
        .partition(|(epochs, _)| validates_at(*epochs));
    // The longest first; only the one used is read in full (its outputs hashed).
    candidates.sort_by(|a, b| b.cmp(a));
    let found = candidates.into_iter().find_map(|(epochs, fingerprint)| {
        match store.get_requiring(&fingerprint, &[FINAL_STATE, FINAL_TENSORS]) {
            cache::Lookup::Hit(entry) => Some(Extension { entry, epochs }),
            cache::Lookup::Miss | cache::Lookup::Corrupt(_) => None,
        }
    });
    found.ok_or_else(|| {
        let longest = unfit.iter().map(|u| u.0).max()?;
        Some(format!(
            "the cached {longest}-epoch training validated at its end, where a {}-epoch one does not (`validate every-epochs={every}`), and a validation decides its course",
            train.epochs
        ))
    })
}
