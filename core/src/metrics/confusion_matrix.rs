//! `confusion-matrix`: counts of samples by true class (rows) and predicted class
//! (columns), over every class of the model (`sklearn.metrics.confusion_matrix` with
//! `labels=range(classes)`). Written to the run directory, not among the scalar metrics.

use super::{classes, counts::predicted, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "confusion-matrix").then(|| Box::new(ConfusionMatrix) as Box<dyn Metric>)
}

#[derive(Debug)]
struct ConfusionMatrix;

impl Metric for ConfusionMatrix {
    fn name(&self) -> String {
        "confusion-matrix".into()
    }

    fn classification(&self) -> bool {
        true
    }

    fn one_value(&self) -> bool {
        false
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        let (probabilities, labels, classes) = classes(p)?;
        let mut matrix = vec![vec![0u64; classes]; classes];
        for (&t, g) in labels.iter().zip(predicted(probabilities, classes)) {
            matrix[t as usize][g as usize] += 1;
        }
        Ok(Score::Matrix(matrix))
    }
}
