//! A small seeded generator (SplitMix64) for data order and splits.
//!
//! Pure Rust and independent of libtorch, so the same seed gives the same split and the
//! same batch order on every machine and every libtorch version.

/// SplitMix64: fast, statistically good enough for shuffling, trivially seedable.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// A generator derived from `seed` and a stream number (e.g. the epoch).
    pub fn derived(seed: u64, stream: u64) -> Self {
        let mut rng = Rng::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (unbiased, by rejection).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// The generator of `sample`'s augmentation in `epoch`: one stream per (seed, epoch,
    /// sample), so a sample's transforms do not depend on the batch it is in, the process
    /// that reads it or where a resumed run started.
    pub fn augmentation(seed: u64, epoch: u64, sample: u64) -> Self {
        let mut mix = Rng::derived(seed ^ 0x5DEE_CE66_D1CE_4E5B, epoch);
        Rng::derived(mix.next_u64(), sample)
    }

    /// Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

impl manifests::transforms::Uniform for Rng {
    /// The top 53 bits as a double in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_permutation_and_it_is_a_permutation() {
        let mut a: Vec<usize> = (0..100).collect();
        let mut b = a.clone();
        Rng::new(7).shuffle(&mut a);
        Rng::new(7).shuffle(&mut b);
        assert_eq!(a, b);
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        let mut c: Vec<usize> = (0..100).collect();
        Rng::derived(7, 1).shuffle(&mut c);
        assert_ne!(a, c);
    }
}
