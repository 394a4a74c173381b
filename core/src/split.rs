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

/// `total` samples shared out across classes of `counts` samples in proportion, each at
/// most its `room`: the floor of each class's share, then one more to the classes with
/// the largest remainders (the first class first among equals), as scikit-learn's
/// stratified splits do, so that the totals are exact and each class is off by less
/// than one sample.
fn share(total: usize, counts: &[usize], room: &[usize]) -> Vec<usize> {
    let n: usize = counts.iter().sum();
    if n == 0 {
        return vec![0; counts.len()];
    }
    let ideal: Vec<f64> = counts
        .iter()
        .map(|&m| m as f64 * total as f64 / n as f64)
        .collect();
    let mut out: Vec<usize> = ideal
        .iter()
        .zip(room)
        .map(|(&x, &r)| (x.floor() as usize).min(r))
        .collect();
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by(|&a, &b| {
        let frac = |i: usize| ideal[i] - ideal[i].floor();
        frac(b).total_cmp(&frac(a)).then(a.cmp(&b))
    });
    let mut missing = total.saturating_sub(out.iter().sum());
    while missing > 0 {
        let before = missing;
        for &i in &order {
            if missing > 0 && out[i] < room[i].min(counts[i]) {
                out[i] += 1;
                missing -= 1;
            }
        }
        if missing == before {
            break;
        }
    }
    out
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
        // The same sizes as an unstratified split, shared out across the classes.
        let sizes = cut((0..classes.len()).collect(), spec);
        let counts: Vec<usize> = by_class.values().map(Vec::len).collect();
        let train = share(sizes.train.len(), &counts, &vec![usize::MAX; counts.len()]);
        let left: Vec<usize> = counts.iter().zip(&train).map(|(m, t)| m - t).collect();
        let val = share(sizes.val.len(), &counts, &left);
        let mut rng = Rng::new(spec.seed);
        let mut all = Splits {
            train: Vec::new(),
            val: Vec::new(),
            test: Vec::new(),
        };
        for (k, (_, mut members)) in by_class.into_iter().enumerate() {
            if spec.shuffle {
                rng.shuffle(&mut members);
            }
            let test = members.split_off(train[k] + val[k]);
            let val_part = members.split_off(train[k]);
            all.train.extend(members);
            all.val.extend(val_part);
            all.test.extend(test);
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
        // Five classes of 10 in 0.7 / 0.1 / 0.2: rounding each class alone would give
        // 40 / 10 / 0; the sizes are those of the plain split, each class within one.
        let five: Vec<i64> = (0..50).map(|i| i % 5).collect();
        let spec5 = SplitSpec {
            train: 0.7,
            val: 0.1,
            test: 0.2,
            ..spec.clone()
        };
        let s5 = Splits::stratified(&five, &spec5);
        let plain = Splits::new(50, &spec5);
        assert_eq!(
            (s5.train.len(), s5.val.len(), s5.test.len()),
            (plain.train.len(), plain.val.len(), plain.test.len())
        );
        for c in 0..5 {
            let n = s5.test.iter().filter(|&&i| five[i] == c).count();
            assert!((1..=3).contains(&n), "class {c}: {n} test samples");
        }
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
