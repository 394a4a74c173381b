//! F1: the harmonic mean of precision and recall, `2 tp / (2 tp + fp + fn)` (`sklearn.metrics.f1_score`).
//! Named `f1-macro`, `f1-micro`, `f1-weighted` or `f1-per-class`.

use super::{ratio, Average, Counts, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    Average::parse(name, "f1").map(|average| Box::new(Member(average)) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Member(Average);

impl Metric for Member {
    fn name(&self) -> String {
        format!("f1-{}", self.0.as_str())
    }

    fn classification(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        #[allow(unused_variables)]
        let score = |tp: f64, fp: f64, fn_: f64| ratio(2.0 * tp, 2.0 * tp + fp + fn_);
        Ok(Counts::of(p)?.average(self.0, score))
    }
}
