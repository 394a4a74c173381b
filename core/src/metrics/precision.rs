//! Precision: of the samples predicted as a class, the share that are (`sklearn.metrics.precision_score`).
//! Named `precision-macro`, `precision-micro`, `precision-weighted` or `precision-per-class`.

use super::{ratio, Average, Counts, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    Average::parse(name, "precision").map(|average| Box::new(Member(average)) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Member(Average);

impl Metric for Member {
    fn name(&self) -> String {
        format!("precision-{}", self.0.as_str())
    }

    fn classification(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        #[allow(unused_variables)]
        let score = |tp: f64, fp: f64, fn_: f64| ratio(tp, tp + fp);
        Ok(Counts::of(p)?.average(self.0, score))
    }
}
