//! Resuming a training on another number of processes: a snapshot taken by N processes
//! continues with M when the global batch (batch size × accumulation × processes) is the
//! same, as the samples of each optimizer step then are (`crate::sampler`: batch k of
//! every process together is batch k of one process with a batch N times bigger).
//!
//! A stage's key holds the process count, the per-process batch, the strategy and the
//! CPU threads (each changes the bits of the result), so a snapshot is found by its
//! *reshard lineage* instead: the key without them, the global batch in their place
//! ([`Lineages::exact`]). A snapshot of another global batch is found by the key without
//! the batch at all ([`Lineages::any`]): continuing from it (`pipeline run --reshard`)
//! changes the order of samples from the resume on.

use crate::fingerprint::StageKey;
use serde::{Deserialize, Serialize};

/// The reshard lineages of a `train` stage's key, and how it is laid out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineages {
    /// The key without processes, per-process batch, strategy and threads, with the global
    /// batch: snapshots that continue exactly.
    pub exact: String,
    /// The same without the global batch.
    pub any: String,
    /// Processes, each one's batch, and samples per optimizer step over all of them.
    pub processes: u64,
    pub batch: u64,
    pub global_batch: u64,
}

impl Lineages {
    /// The lineages of `key`, a `train` stage's; `None` for another kind.
    pub fn of(key: &StageKey) -> Option<Lineages> {
        let mut key = key.clone();
        let processes = key.environment.processes.max(1);
        key.environment.processes = 1;
        key.environment.threads = None;
        let accelerator = key.spec.get_mut("accelerator")?.as_object_mut()?;
        let accumulate = accelerator
            .remove("accumulate")
            .and_then(|a| a.as_u64())
            .unwrap_or(1)
            .max(1);
        if let Some(distributed) = accelerator
            .get_mut("distributed")
            .and_then(|d| d.as_object_mut())
        {
            distributed.remove("strategy");
        }
        let stage = key.spec.get_mut("stage")?.as_object_mut()?;
        if stage.get("kind")?.as_str()? != "train" {
            return None;
        }
        let batch = stage.remove("batch_size")?.as_u64()?;
        let global_batch = batch * accumulate * processes;
        let hash =
            |key: &StageKey| cache::hash_bytes(format!("reshard {}", key.canonical()).as_bytes());
        let any = hash(&key);
        key.spec["stage"]["global_batch"] = global_batch.into();
        Some(Lineages {
            exact: hash(&key),
            any,
            processes,
            batch,
            global_batch,
        })
    }
}

/// The batches of an epoch a resumed training has done, from those a training laid out
/// otherwise had done (`batches` of `from_batch` samples over all its processes): the
/// batches of `batch` samples over all processes whose samples are all done, down to an
/// optimizer step of `accumulate` batches. With the same global batch it is exact; only
/// `--reshard` across global batches rounds down.
pub fn batches_done(batches: u64, from_batch: u64, batch: u64, accumulate: u64) -> u64 {
    let done = batches * from_batch / batch.max(1);
    done - done % accumulate.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{tests::keys, Fingerprint};

    /// A train stage's key with `accelerator`, on `processes` of `threads` threads each.
    fn train_key(accelerator: &str, batch: u64, processes: u64, threads: u64) -> Fingerprint {
        let mut key = keys(&format!(
            "seed 1\ndata {{ source \"d.csv\"; }}\nmodel {{ linear 8; relu; linear 3; }}\nloss \"cross-entropy\"\noptimizer \"adam\" lr=0.001\n{accelerator}\ntrain batch-size={batch}\n"
        ))
        .remove(0);
        key.key.environment.processes = processes;
        key.key.environment.threads = Some(threads);
        key.hash = key.key.fingerprint();
        key
    }

    #[test]
    fn the_same_global_batch_on_other_processes_is_the_same_exact_lineage() {
        let two = train_key("accelerator strategy=\"ddp\"", 32, 2, 1);
        let one = train_key("", 64, 1, 2);
        let zero1 = train_key("accelerator strategy=\"zero1\"", 16, 4, 1);
        let accumulated = train_key("accelerator accumulate=2", 32, 1, 2);
        assert_ne!(two.hash, one.hash, "the stage keys differ");
        let lineages = [&two, &one, &zero1, &accumulated].map(|k| Lineages::of(&k.key).unwrap());
        assert!(lineages.iter().all(|l| l.exact == lineages[0].exact));
        assert!(lineages.iter().all(|l| l.global_batch == 64));
        assert_eq!(lineages[0].processes, 2);
        assert_eq!(lineages[0].batch, 32);
        // Another global batch: the same `any`, another `exact`.
        let other = Lineages::of(&train_key("", 32, 1, 2).key).unwrap();
        assert_eq!(other.any, lineages[0].any);
        assert_ne!(other.exact, lineages[0].exact);
        assert_eq!(other.global_batch, 32);
        // Anything else is another lineage.
        let seed = train_key("", 64, 1, 2);
        let mut key = seed.key.clone();
        key.seed = 2;
        assert_ne!(Lineages::of(&key).unwrap().any, lineages[0].any);
    }

    #[test]
    fn a_position_maps_to_the_batches_whose_samples_are_done() {
        // 2 processes × 32 → 1 × 64: the same steps.
        assert_eq!(batches_done(3, 64, 64, 1), 3);
        // 1 × 64 → 1 × 32 accumulating 2: twice the batches, the same steps.
        assert_eq!(batches_done(3, 64, 32, 2), 6);
        // --reshard to a global batch of 128: the steps whose samples are all done.
        assert_eq!(batches_done(3, 64, 128, 1), 1);
        assert_eq!(batches_done(3, 64, 64, 2), 2);
    }
}
