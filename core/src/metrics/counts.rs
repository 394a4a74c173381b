//! Per-class counts of a classification (true positives, false positives, false
//! negatives, support) from the argmax of each sample's probabilities, or per label of
//! multi-label outputs: what precision, recall and F1 are made of.

use super::{classes, multi_label, ratio, Average, Metric, Predictions, Score};

/// The counts of every class of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Counts {
    pub true_positives: Vec<u64>,
    pub false_positives: Vec<u64>,
    pub false_negatives: Vec<u64>,
    /// Samples of each class.
    pub support: Vec<u64>,
    /// Whether the class is a true or a predicted class of some sample: scikit-learn
    /// averages over these only.
    pub present: Vec<bool>,
}

/// The predicted class of each row: the first largest probability (as `argmax`).
pub fn predicted(probabilities: &[f64], classes: usize) -> Vec<i64> {
    probabilities
        .chunks_exact(classes.max(1))
        .map(|row| {
            let mut best = 0;
            for (j, &p) in row.iter().enumerate() {
                if p > row[best] {
                    best = j;
                }
            }
            best as i64
        })
        .collect()
}

impl Counts {
    pub fn of(p: &Predictions) -> Result<Counts, String> {
        if let Predictions::Labels { .. } = p {
            return Counts::of_labels(p);
        }
        let (probabilities, labels, n_classes) = classes(p)?;
        let mut c = Counts {
            true_positives: vec![0; n_classes],
            false_positives: vec![0; n_classes],
            false_negatives: vec![0; n_classes],
            support: vec![0; n_classes],
            present: vec![false; n_classes],
        };
        for (&truth, guess) in labels.iter().zip(predicted(probabilities, n_classes)) {
            let (t, g) = (truth as usize, guess as usize);
            c.support[t] += 1;
            c.present[t] = true;
            c.present[g] = true;
            if t == g {
                c.true_positives[t] += 1;
            } else {
                c.false_positives[g] += 1;
                c.false_negatives[t] += 1;
            }
        }
        Ok(c)
    }

    /// Each label's counts, its own positives against its negatives. Every label
    /// counts in the averages, as scikit-learn takes every column of an indicator matrix.
    fn of_labels(p: &Predictions) -> Result<Counts, String> {
        let (truth, predicted, labels) = multi_label(p)?;
        let mut c = Counts {
            true_positives: vec![0; labels],
            false_positives: vec![0; labels],
            false_negatives: vec![0; labels],
            support: vec![0; labels],
            present: vec![true; labels],
        };
        for (i, (&t, &g)) in truth.iter().zip(&predicted).enumerate() {
            let j = i % labels;
            c.support[j] += u64::from(t);
            match (t, g) {
                (true, true) => c.true_positives[j] += 1,
                (false, true) => c.false_positives[j] += 1,
                (true, false) => c.false_negatives[j] += 1,
                (false, false) => {}
            }
        }
        Ok(c)
    }

    /// A per-class score (from true positives, false positives, false negatives)
    /// averaged as `average` says; `micro` applies `score` to the summed counts.
    pub(crate) fn average(&self, average: Average, score: impl Fn(f64, f64, f64) -> f64) -> Score {
        let per_class: Vec<f64> = (0..self.support.len())
            .map(|j| {
                score(
                    self.true_positives[j] as f64,
                    self.false_positives[j] as f64,
                    self.false_negatives[j] as f64,
                )
            })
            .collect();
        let present = || (0..per_class.len()).filter(|&j| self.present[j]);
        match average {
            Average::PerClass => Score::PerClass(per_class),
            Average::Macro => {
                let n = present().count() as f64;
                Score::One(ratio(present().map(|j| per_class[j]).sum(), n))
            }
            Average::Weighted => {
                let total: u64 = self.support.iter().sum();
                let weighted: f64 = present()
                    .map(|j| per_class[j] * self.support[j] as f64)
                    .sum();
                Score::One(ratio(weighted, total as f64))
            }
            Average::Micro => {
                let sum = |v: &[u64]| v.iter().sum::<u64>() as f64;
                Score::One(score(
                    sum(&self.true_positives),
                    sum(&self.false_positives),
                    sum(&self.false_negatives),
                ))
            }
        }
    }
}

/// Precision, recall or F1: a score of a class's counts (true positives, false
/// positives, false negatives), averaged as the name says (`f1-macro`).
#[derive(Debug)]
pub(crate) struct CountsMetric {
    pub prefix: &'static str,
    pub average: Average,
    pub score: fn(f64, f64, f64) -> f64,
}

impl CountsMetric {
    /// The metric `name` means when it is `prefix-AVERAGE`.
    pub(crate) fn parse(
        name: &str,
        prefix: &'static str,
        score: fn(f64, f64, f64) -> f64,
    ) -> Option<Box<dyn Metric>> {
        let average = Average::parse(name, prefix)?;
        Some(Box::new(CountsMetric {
            prefix,
            average,
            score,
        }))
    }
}

impl Metric for CountsMetric {
    fn name(&self) -> String {
        format!("{}-{}", self.prefix, self.average.as_str())
    }

    fn classification(&self) -> bool {
        true
    }

    fn one_value(&self) -> bool {
        self.average != Average::PerClass
    }

    fn multi_label(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        Ok(Counts::of(p)?.average(self.average, self.score))
    }
}
