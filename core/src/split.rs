//! Splitting sample indices into train / val / test, seeded; stratified by class when
//! `split.stratify` asks (each class cut in the same fractions); or, with `split
//! folds=K`, into K folds and a test split ([`Folds`]), each fold held out in turn.

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

    /// The split `spec` gives `n` samples: by class when `classes` is given (each
    /// sample's), and with folds, that of fold `fold` (from 1; the first without one).
    pub fn of(n: usize, classes: Option<&[i64]>, spec: &SplitSpec, fold: Option<u64>) -> Splits {
        match (spec.folds, classes) {
            (Some(_), _) => Folds::new(n, classes, spec).split(fold.unwrap_or(1)),
            (None, Some(classes)) => Splits::stratified(classes, spec),
            (None, None) => Splits::new(n, spec),
        }
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

/// k-fold cross-validation's parts: the test split, cut first as a split of `test` and
/// no `val` is (stratified or not), then the other samples cut into folds as
/// scikit-learn's `KFold` cuts them (contiguous runs of the shuffled order, the first
/// `n % K` one longer), or by class as its `StratifiedKFold` does (each class dealt to
/// the folds in the proportions of a round-robin over the samples sorted by class).
/// Unshuffled, the folds are scikit-learn's exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folds {
    pub folds: Vec<Vec<usize>>,
    pub test: Vec<usize>,
}

impl Folds {
    pub fn new(n: usize, classes: Option<&[i64]>, spec: &SplitSpec) -> Folds {
        let k = spec.folds.unwrap_or(1).max(1) as usize;
        let outer = SplitSpec {
            train: 1.0 - spec.test,
            val: 0.0,
            folds: None,
            ..spec.clone()
        };
        let (mut rest, test) = match classes {
            Some(classes) => {
                let s = Splits::stratified(classes, &outer);
                (s.train, s.test)
            }
            None => {
                let s = Splits::new(n, &outer);
                (s.train, s.test)
            }
        };
        let folds = match classes {
            Some(classes) => {
                // Dealt by class in the samples' order; shuffling deals the folds.
                rest.sort_unstable();
                let mut rng = Rng::new(spec.seed);
                stratified_folds(&rest, classes, k, spec.shuffle.then_some(&mut rng))
            }
            None => {
                let (size, longer) = (rest.len() / k, rest.len() % k);
                let mut folds = Vec::with_capacity(k);
                let mut at = 0;
                for f in 0..k {
                    let len = size + usize::from(f < longer);
                    folds.push(rest[at..at + len].to_vec());
                    at += len;
                }
                folds
            }
        };
        Folds { folds, test }
    }

    /// Fold `fold`'s split (from 1): the other folds train, it validates.
    pub fn split(&self, fold: u64) -> Splits {
        let held = (fold.max(1) as usize - 1).min(self.folds.len().saturating_sub(1));
        let train = self
            .folds
            .iter()
            .enumerate()
            .filter(|(f, _)| *f != held)
            .flat_map(|(_, part)| part.iter().copied())
            .collect();
        Splits {
            train,
            val: self.folds.get(held).cloned().unwrap_or_default(),
            test: self.test.clone(),
        }
    }
}

/// `StratifiedKFold`'s folds of the samples `rest` (in this order): the classes numbered
/// in the order they first appear, fold `f` given as many of each class as the
/// round-robin `f, f + K, f + 2K, …` over the samples sorted by class gives it, and each
/// class's samples dealt to the folds in blocks (fold 0's first), the blocks' order
/// shuffled when `rng` is given.
fn stratified_folds(
    rest: &[usize],
    classes: &[i64],
    k: usize,
    mut rng: Option<&mut Rng>,
) -> Vec<Vec<usize>> {
    let mut codes: std::collections::HashMap<i64, usize> = Default::default();
    for &i in rest {
        let next = codes.len();
        codes.entry(classes[i]).or_insert(next);
    }
    let code = |i: usize| codes[&classes[i]];
    let mut sorted: Vec<usize> = rest.iter().map(|&i| code(i)).collect();
    sorted.sort_unstable();
    // allocation[f][c]: how many of class c fold f holds.
    let mut allocation = vec![vec![0usize; codes.len()]; k];
    for (j, &c) in sorted.iter().enumerate() {
        allocation[j % k][c] += 1;
    }
    let mut deal: Vec<Vec<usize>> = (0..codes.len())
        .map(|c| {
            let mut folds: Vec<usize> = (0..k)
                .flat_map(|f| std::iter::repeat_n(f, allocation[f][c]))
                .collect();
            if let Some(rng) = rng.as_deref_mut() {
                rng.shuffle(&mut folds);
            }
            folds.reverse();
            folds
        })
        .collect();
    let mut folds = vec![Vec::new(); k];
    for &i in rest {
        if let Some(f) = deal[code(i)].pop() {
            folds[f].push(i);
        }
    }
    folds
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
            folds: None,
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
            folds: None,
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

    /// Every sample outside `test` is in one fold; the folds' sizes are `KFold`'s, each
    /// class's share in every fold within one of `StratifiedKFold`'s; fold k's split
    /// holds it out.
    #[test]
    fn folds_share_out_the_samples_outside_test() {
        let spec = SplitSpec {
            train: 0.8,
            val: 0.0,
            test: 0.2,
            seed: 4,
            shuffle: true,
            stratify: false,
            folds: Some(3),
        };
        let f = Folds::new(103, None, &spec);
        assert_eq!(f.test.len(), 21);
        let sizes: Vec<usize> = f.folds.iter().map(Vec::len).collect();
        assert_eq!(sizes, [28, 27, 27]);
        let mut all: Vec<usize> = f.folds.concat();
        all.extend(&f.test);
        all.sort();
        assert_eq!(all, (0..103).collect::<Vec<_>>());
        let two = f.split(2);
        assert_eq!(
            (two.train.len(), two.val.len(), two.test.len()),
            (55, 27, 21)
        );
        assert_eq!(two.val, f.folds[1]);
        assert_eq!(Splits::of(103, None, &spec, Some(2)), two);
        // Unshuffled without a test split: contiguous runs, as `KFold(3)`.
        let plain = SplitSpec {
            train: 1.0,
            test: 0.0,
            shuffle: false,
            ..spec.clone()
        };
        let f = Folds::new(10, None, &plain);
        assert_eq!(f.folds, [vec![0, 1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
        // By class: 12 of class 5, 6 of class 2, interleaved.
        let classes: Vec<i64> = (0..18).map(|i| if i % 3 == 2 { 2 } else { 5 }).collect();
        let f = Folds::new(
            18,
            Some(&classes),
            &SplitSpec {
                stratify: true,
                ..plain.clone()
            },
        );
        for fold in &f.folds {
            let twos = fold.iter().filter(|&&i| classes[i] == 2).count();
            assert_eq!((fold.len(), twos), (6, 2));
        }
        let shuffled = Folds::new(
            18,
            Some(&classes),
            &SplitSpec {
                stratify: true,
                shuffle: true,
                ..plain
            },
        );
        assert_ne!(shuffled, f);
        for fold in &shuffled.folds {
            assert_eq!(fold.iter().filter(|&&i| classes[i] == 2).count(), 2);
        }
    }
}
