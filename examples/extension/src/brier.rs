//! `metrics "brier"`: the Brier score (Brier, 1950), the mean over the samples of the
//! squared distance between the predicted class probabilities and the one-hot truth,
//! Σₖ (pₖ − [k = y])². 0 is a perfect forecast, 2 the worst; lower is better. Unlike
//! accuracy it sees how confident each prediction was, so it tells a calibrated model
//! from an overconfident one of the same accuracy.

use pipeline_core::metrics::{Metric, Predictions, Score};

#[derive(Debug)]
pub struct Brier;

/// What `pipeline explain eval.metrics` says of it.
pub const DOC: &str = "the Brier score: the mean squared distance between the class probabilities and the one-hot truth (lower is better)";

impl Metric for Brier {
    fn name(&self) -> String {
        "brier".into()
    }

    // What `check` asks: it measures class probabilities (accuracy's losses), and a
    // monitor watching it goes down by default.
    fn classification(&self) -> bool {
        true
    }

    fn larger_is_better(&self) -> bool {
        false
    }

    fn compute(&self, predictions: &Predictions) -> Result<Score, String> {
        let Predictions::Classes {
            probabilities,
            labels,
            classes,
        } = *predictions
        else {
            return Err("it measures class probabilities".into());
        };
        if labels.is_empty() || probabilities.len() != labels.len() * classes {
            return Err(format!(
                "{} probabilities for {} samples of {classes} classes",
                probabilities.len(),
                labels.len()
            ));
        }
        let total: f64 = probabilities
            .chunks_exact(classes)
            .zip(labels)
            .map(|(row, &y)| {
                row.iter()
                    .enumerate()
                    .map(|(k, &p)| {
                        let truth = if k as i64 == y { 1.0 } else { 0.0 };
                        (p - truth) * (p - truth)
                    })
                    .sum::<f64>()
            })
            .sum();
        Ok(Score::One(total / labels.len() as f64))
    }
}
