//! `auroc`: the area under the ROC curve (`sklearn.metrics.roc_auc_score`): for two
//! classes, of the second class's probability; for more, one class against the rest,
//! averaged over the classes (`multi_class="ovr"`, `average="macro"`); for multi-label
//! outputs, of each label's probability, averaged over the labels (`average="macro"` on
//! the indicator matrix). Computed as the
//! Mann–Whitney statistic with tied scores counting half, which is the trapezoidal area
//! scikit-learn integrates.

use super::{classes, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "auroc").then(|| Box::new(Auroc) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Auroc;

/// The AUC of `scores` for the samples `positive` marks.
fn binary(scores: &[f64], positive: &[bool]) -> Result<f64, String> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Ranks from 1, ties given their average rank.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && scores[order[j]] == scores[order[i]] {
            j += 1;
        }
        let average_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += average_rank * order[i..j].iter().filter(|&&k| positive[k]).count() as f64;
        i = j;
    }
    let pos = positive.iter().filter(|&&p| p).count() as f64;
    let neg = positive.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return Err("only one class is present among the true labels".into());
    }
    Ok((rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg))
}

impl Metric for Auroc {
    fn name(&self) -> String {
        "auroc".into()
    }

    fn classification(&self) -> bool {
        true
    }

    fn multi_label(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        if let Predictions::Labels { probabilities, .. } = *p {
            let (truth, _, labels) = super::multi_label(p)?;
            let mut total = 0.0;
            for j in 0..labels {
                let column = |v: &[f64]| v.iter().skip(j).step_by(labels).copied().collect();
                let scores: Vec<f64> = column(probabilities);
                let positive: Vec<bool> = truth.iter().skip(j).step_by(labels).copied().collect();
                total += binary(&scores, &positive).map_err(|_| {
                    format!("label {j} is the same for every sample, so it has no area")
                })?;
            }
            return Ok(Score::One(total / labels as f64));
        }
        let (probabilities, labels, classes) = classes(p)?;
        let column = |c: usize| -> Vec<f64> {
            probabilities
                .chunks_exact(classes)
                .map(|row| row[c])
                .collect()
        };
        if classes == 2 {
            let positive: Vec<bool> = labels.iter().map(|&l| l == 1).collect();
            return binary(&column(1), &positive).map(Score::One);
        }
        let mut total = 0.0;
        for c in 0..classes {
            let positive: Vec<bool> = labels.iter().map(|&l| l == c as i64).collect();
            total += binary(&column(c), &positive).map_err(|_| {
                format!("class {c} has no sample, so it has no area one against the rest")
            })?;
        }
        Ok(Score::One(total / classes as f64))
    }
}
