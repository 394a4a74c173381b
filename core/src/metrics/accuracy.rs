//! `accuracy`: the share of samples whose most probable class is their class
//! (`sklearn.metrics.accuracy_score`).

use super::{classes, counts::predicted, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "accuracy").then(|| Box::new(Accuracy) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Accuracy;

impl Metric for Accuracy {
    fn name(&self) -> String {
        "accuracy".into()
    }

    fn classification(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        let (probabilities, labels, classes) = classes(p)?;
        let right = predicted(probabilities, classes)
            .iter()
            .zip(labels)
            .filter(|(g, t)| g == t)
            .count();
        Ok(Score::One(right as f64 / labels.len() as f64))
    }
}
