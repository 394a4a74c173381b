//! Which samples each process trains on, epoch by epoch, and in what order.
//!
//! - [`Sampler::Distributed`] is PyTorch's `DistributedSampler`: the epoch's order (seeded,
//!   the same in every process) padded to a multiple of the processes, or truncated; then
//!   every `world`-th sample from the process's rank. Batch k of every process together is
//!   batch k of one process with a `world` times bigger batch.
//! - [`Sampler::Bucketed`] is Stoke's `BucketedDistributedSampler`: the samples sorted by a
//!   key (a sequence length, a declared column) and cut into buckets of neighbours; each
//!   epoch every bucket is shuffled and cut into global batches (`batch × world` samples of
//!   one bucket), the global batches are shuffled, and each process takes its slice of each.
//!   So at every step all processes train on samples of the same bucket.
//!
//! Both are functions of the seed and the epoch only, so every process computes the same
//! plan without talking to the others.

use crate::rng::Rng;

#[derive(Debug, Clone)]
pub enum Sampler {
    Distributed {
        drop: bool,
    },
    /// `buckets`: sample indices, each bucket sorted by key.
    Bucketed {
        buckets: Vec<Vec<usize>>,
        drop: bool,
    },
}

/// A stream of the seeded generator per epoch that does not collide with the others the
/// training uses (`Rng::derived(seed, epoch)` shuffles the epoch's order).
const BUCKET_STREAM: u64 = 1 << 40;

impl Sampler {
    /// Buckets `samples` by `key` (ties broken by index): `count` buckets of neighbours, as
    /// equal in size as the samples allow.
    pub fn bucketed(
        samples: &[usize],
        key: impl Fn(usize) -> f64,
        count: usize,
        drop: bool,
    ) -> Sampler {
        let mut sorted: Vec<usize> = samples.to_vec();
        sorted.sort_by(|&a, &b| key(a).total_cmp(&key(b)).then(a.cmp(&b)));
        let count = count.clamp(1, sorted.len().max(1));
        let buckets = (0..count)
            .map(|b| sorted[b * sorted.len() / count..(b + 1) * sorted.len() / count].to_vec())
            .filter(|b| !b.is_empty())
            .collect();
        Sampler::Bucketed { buckets, drop }
    }

    /// This process's samples for `epoch`, in training order. `order` is the epoch's
    /// order of all training samples (already shuffled or not); the bucketed sampler
    /// shuffles within buckets itself when `shuffle`.
    #[allow(clippy::too_many_arguments)]
    pub fn epoch(
        &self,
        order: &[usize],
        seed: u64,
        epoch: u64,
        shuffle: bool,
        batch: usize,
        rank: usize,
        world: usize,
    ) -> Vec<usize> {
        match self {
            Sampler::Distributed { drop } => shard(order, rank, world, *drop),
            Sampler::Bucketed { buckets, drop } => {
                let global = batch * world;
                let mut batches: Vec<Vec<usize>> = Vec::new();
                for (b, bucket) in buckets.iter().enumerate() {
                    let mut items = bucket.clone();
                    if shuffle {
                        Rng::derived(seed, BUCKET_STREAM + epoch * 1_000_003 + b as u64)
                            .shuffle(&mut items);
                    }
                    for chunk in items.chunks(global) {
                        if chunk.len() == global {
                            batches.push(chunk.to_vec());
                        } else if !drop {
                            // Pad from the same bucket, so the batch stays pure.
                            let padding = items.iter().cycle().take(global - chunk.len());
                            batches.push(chunk.iter().chain(padding).copied().collect());
                        }
                    }
                }
                if shuffle {
                    Rng::derived(seed, BUCKET_STREAM + epoch).shuffle(&mut batches);
                }
                batches
                    .iter()
                    .flat_map(|g| g[rank * batch..(rank + 1) * batch].iter().copied())
                    .collect()
            }
        }
    }
}

/// The batch size and the number of batches of an epoch of `n` samples (per process):
/// batches of `batch_size` (smaller when there are fewer samples), the last one partial
/// or, with `drop_last`, left out.
pub fn batches_per_epoch(n: u64, batch_size: u64, drop_last: bool) -> (u64, u64) {
    let batch = batch_size.min(n.max(1));
    let batches = if drop_last {
        n / batch
    } else {
        n.div_ceil(batch)
    };
    (batch, batches)
}

/// Samples per process of a split of `n` among `world` processes: padded up to a
/// multiple of `world`, or the remainder dropped.
pub fn shard_len(n: usize, world: usize, drop: bool) -> usize {
    if drop {
        n / world
    } else {
        n.div_ceil(world)
    }
}

/// This process's share of an epoch's `order`: padded by repeating from the start (or
/// truncated), then every `world`-th sample from `rank`.
pub fn shard(order: &[usize], rank: usize, world: usize, drop: bool) -> Vec<usize> {
    if world == 1 {
        return order.to_vec();
    }
    let total = shard_len(order.len(), world, drop) * world;
    order
        .iter()
        .cycle()
        .take(total)
        .skip(rank)
        .step_by(world)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_every_sample_once_with_padding_accounted_for() {
        let order: Vec<usize> = (0..10).map(|i| i * 3).collect();
        let shards: Vec<Vec<usize>> = (0..3).map(|r| shard(&order, r, 3, false)).collect();
        assert!(shards.iter().all(|s| s.len() == 4), "{shards:?}");
        let mut all: Vec<usize> = shards.concat();
        all.sort();
        let mut expected = order.clone();
        expected.extend([0, 3]); // two samples padded from the start
        expected.sort();
        assert_eq!(all, expected);
        let dropped: Vec<usize> = (0..3).flat_map(|r| shard(&order, r, 3, true)).collect();
        assert_eq!(dropped.len(), 9);
        assert!(!dropped.contains(&27), "the remainder is dropped");
        assert_eq!(shard(&order, 0, 1, false), order);
    }

    #[test]
    fn bucketed_batches_are_bucket_pure_across_processes_and_reshuffled_each_epoch() {
        let samples: Vec<usize> = (0..103).collect();
        let key = |i: usize| ((i * 37) % 103) as f64; // a length per sample
        let sampler = Sampler::bucketed(&samples, key, 4, false);
        let Sampler::Bucketed { buckets, .. } = &sampler else {
            unreachable!()
        };
        let bucket_of = |i: usize| buckets.iter().position(|b| b.contains(&i)).unwrap();
        let (batch, world) = (4, 2);
        let plan = |epoch| -> Vec<Vec<usize>> {
            (0..world)
                .map(|r| sampler.epoch(&samples, 9, epoch, true, batch, r, world))
                .collect()
        };
        let first = plan(1);
        assert_eq!(first[0].len(), first[1].len());
        for k in 0..first[0].len() / batch {
            let mut step: Vec<usize> = Vec::new();
            for rank_order in &first {
                step.extend(&rank_order[k * batch..(k + 1) * batch]);
            }
            let b = bucket_of(step[0]);
            assert!(
                step.iter().all(|&i| bucket_of(i) == b),
                "step {k} mixes buckets: {step:?}"
            );
        }
        let mut seen: Vec<usize> = first.concat();
        seen.sort();
        seen.dedup();
        assert_eq!(
            seen, samples,
            "every sample at least once (padding repeats a few)"
        );
        assert_eq!(plan(1), first, "the same plan in every process");
        assert_ne!(plan(2), first, "reshuffled each epoch");
        let dropped = Sampler::bucketed(&samples, key, 4, true);
        let n: usize = (0..world)
            .map(|r| dropped.epoch(&samples, 9, 1, true, batch, r, world).len())
            .sum();
        assert_eq!(n % (batch * world), 0);
        assert!(n <= samples.len());
    }
}
