//! `top-K-accuracy`: the share of samples whose class is among their K most probable
//! (`sklearn.metrics.top_k_accuracy_score`; a class tied with the K-th counts in, as
//! scikit-learn's stable sort of the scores then leaves it).

use super::{classes, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    let k: usize = name
        .strip_prefix("top-")?
        .strip_suffix("-accuracy")?
        .parse()
        .ok()?;
    (k >= 2).then(|| Box::new(TopK(k)) as Box<dyn Metric>)
}

#[derive(Debug)]
struct TopK(usize);

impl Metric for TopK {
    fn name(&self) -> String {
        format!("top-{}-accuracy", self.0)
    }

    fn classification(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        let (probabilities, labels, classes) = classes(p)?;
        if self.0 >= classes {
            return Err(format!("K = {} is not below the {classes} classes", self.0));
        }
        let right = probabilities
            .chunks_exact(classes)
            .zip(labels)
            .filter(|(row, &t)| {
                let mine = row[t as usize];
                // The classes ranked before this sample's class.
                let before = row
                    .iter()
                    .enumerate()
                    .filter(|&(j, &q)| q > mine || (q == mine && j > t as usize))
                    .count();
                before < self.0
            })
            .count();
        Ok(Score::One(right as f64 / labels.len() as f64))
    }
}
