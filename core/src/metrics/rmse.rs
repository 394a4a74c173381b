//! `rmse`: the root of each output's mean squared error, averaged over the outputs (`sklearn.metrics.root_mean_squared_error`: the mean of the roots, not the root of the mean).

use super::{mean_over_outputs, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "rmse").then(|| Box::new(Member) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Member;

impl Metric for Member {
    fn name(&self) -> String {
        "rmse".into()
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
            (o.iter().zip(t).map(|(o, t)| (o - t) * (o - t)).sum::<f64>() / n).sqrt()
        })
    }
}
