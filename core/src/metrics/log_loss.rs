//! `log-loss`: the mean negative log-probability of each sample's class
//! (`sklearn.metrics.log_loss` with every class of the model as its `labels`):
//! probabilities clipped to [ε, 1 − ε] (ε of float64), not renormalised (scikit-learn
//! stopped renormalising in 1.5: rows that do not sum to 1 show in the loss).

use super::{classes, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "log-loss").then(|| Box::new(LogLoss) as Box<dyn Metric>)
}

#[derive(Debug)]
struct LogLoss;

impl Metric for LogLoss {
    fn name(&self) -> String {
        "log-loss".into()
    }

    fn classification(&self) -> bool {
        true
    }

    fn larger_is_better(&self) -> bool {
        false
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        let (probabilities, labels, classes) = classes(p)?;
        let eps = f64::EPSILON;
        let total: f64 = probabilities
            .chunks_exact(classes)
            .zip(labels)
            .map(|(row, &t)| -row[t as usize].clamp(eps, 1.0 - eps).ln())
            .sum();
        Ok(Score::One(total / labels.len() as f64))
    }
}
