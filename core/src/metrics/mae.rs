//! `mae`: the mean absolute error, averaged over the outputs (`sklearn.metrics.mean_absolute_error`).

use super::{mean_over_outputs, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "mae").then(|| Box::new(Member) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Member;

impl Metric for Member {
    fn name(&self) -> String {
        "mae".into()
    }

    fn classification(&self) -> bool {
        false
    }

    fn larger_is_better(&self) -> bool {
        false
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        mean_over_outputs(p, |o, t| {
            let n = t.len() as f64;
            o.iter().zip(t).map(|(o, t)| (o - t).abs()).sum::<f64>() / n
        })
    }
}
