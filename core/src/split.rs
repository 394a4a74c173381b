//! Splitting sample indices into train / val / test, seeded; stratified by class when
//! `split.stratify` asks (each class cut in the same fractions).

use crate::rng::Rng;
use manifests::{SplitName, SplitSpec};

/// Cuts `order`: train first, then val, and test takes the rest (so rounding never loses
/// a sample).
fn cut(mut order: Vec<usize>, spec: &SplitSpec) -> Splits {
    let n = order.len();
    let n_train = (((n as f64) * spec.train).round() as usize).min(n);
    let n_val = (((n as f64) * spec.val).round() as usize).min(n - n_train);
    let test = order.split_off(n_train + n_val);
    let val = order.split_off(n_train);
    Splits {
        train: order,
        val,
        test,
    }
}

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
        cut(order, spec)
    }

    /// [`Splits::new`] by class: the samples of each class (`classes[i]` is sample i's)
    /// are shuffled and cut in the split's fractions, so every split holds the classes
    /// in the data's proportions (to a sample per class); each split is then shuffled,
    /// so that it is not ordered by class.
    pub fn stratified(classes: &[i64], spec: &SplitSpec) -> Splits {
        let mut by_class: std::collections::BTreeMap<i64, Vec<usize>> = Default::default();
        for (i, &c) in classes.iter().enumerate() {
            by_class.entry(c).or_default().push(i);
        }
        let mut rng = Rng::new(spec.seed);
        let mut all = Splits {
            train: Vec::new(),
            val: Vec::new(),
            test: Vec::new(),
        };
        for (_, mut members) in by_class {
            if spec.shuffle {
                rng.shuffle(&mut members);
            }
            let part = cut(members, spec);
            all.train.extend(part.train);
            all.val.extend(part.val);
            all.test.extend(part.test);
        }
        for split in [&mut all.train, &mut all.val, &mut all.test] {
            if spec.shuffle {
                rng.shuffle(split);
            } else {
                split.sort_unstable();
            }
        }
        all
    }

    /// Every split's indices, for the run directory's `split.json`, so that anyone can
    /// rebuild the same split: `{"train": [...], "val": [...], "test": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "train": self.train, "val": self.val, "test": self.test })
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
            stratify: false,
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

    #[test]
    fn a_stratified_split_keeps_each_classs_share_in_every_split() {
        // 90 samples of class 0, 10 of class 1, interleaved.
        let classes: Vec<i64> = (0..100).map(|i| i64::from(i % 10 == 0)).collect();
        let spec = SplitSpec {
            train: 0.8,
            val: 0.0,
            test: 0.2,
            seed: 1,
            shuffle: true,
            stratify: true,
        };
        let s = Splits::stratified(&classes, &spec);
        let ones = |split: &[usize]| split.iter().filter(|&&i| classes[i] == 1).count();
        assert_eq!((s.train.len(), s.test.len()), (80, 20));
        assert_eq!((ones(&s.train), ones(&s.test)), (8, 2));
        let mut all: Vec<usize> = s.train.iter().chain(&s.test).copied().collect();
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        assert_eq!(Splits::stratified(&classes, &spec), s, "seeded");
        assert!(
            s.test.windows(2).any(|w| classes[w[0]] != classes[w[1]]),
            "not ordered by class"
        );
    }
}
