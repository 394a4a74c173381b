//! Splitting sample indices into train / val / test, seeded.

use crate::rng::Rng;
use manifests::{SplitName, SplitSpec};

/// The sample indices of each split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splits {
    pub train: Vec<usize>,
    pub val: Vec<usize>,
    pub test: Vec<usize>,
}

impl Splits {
    /// Shuffles `0..n` with the split's seed (unless `shuffle` is off), then cuts it:
    /// train first, then val, and test takes the rest (so rounding never loses a sample).
    pub fn new(n: usize, spec: &SplitSpec) -> Splits {
        let mut order: Vec<usize> = (0..n).collect();
        if spec.shuffle {
            Rng::new(spec.seed).shuffle(&mut order);
        }
        let n_train = ((n as f64) * spec.train).round() as usize;
        let n_val = (((n as f64) * spec.val).round() as usize).min(n - n_train.min(n));
        let n_train = n_train.min(n);
        let test = order.split_off(n_train + n_val);
        let val = order.split_off(n_train);
        Splits {
            train: order,
            val,
            test,
        }
    }

    pub fn get(&self, split: SplitName) -> &[usize] {
        match split {
            SplitName::Train => &self.train,
            SplitName::Val => &self.val,
            SplitName::Test => &self.test,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_sample_once() {
        let spec = SplitSpec {
            train: 0.7,
            val: 0.1,
            test: 0.2,
            seed: 3,
            shuffle: true,
        };
        let s = Splits::new(1797, &spec);
        assert_eq!(s.train.len(), 1258);
        assert_eq!(s.val.len(), 180);
        assert_eq!(s.test.len(), 1797 - 1258 - 180);
        let mut all: Vec<usize> = s
            .train
            .iter()
            .chain(&s.val)
            .chain(&s.test)
            .copied()
            .collect();
        all.sort();
        assert_eq!(all, (0..1797).collect::<Vec<_>>());
        assert_eq!(Splits::new(1797, &spec), s);
        let in_order = Splits::new(
            10,
            &SplitSpec {
                shuffle: false,
                ..spec
            },
        );
        assert_eq!(in_order.train, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(in_order.test, [8, 9]);
    }
}
