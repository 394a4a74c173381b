//! Recall: of the samples of a class, the share predicted as it (`sklearn.metrics.recall_score`).
//! Named `recall-macro`, `recall-micro`, `recall-weighted` or `recall-per-class`.

use super::{ratio, Average, Counts, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    Average::parse(name, "recall").map(|average| Box::new(Member(average)) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Member(Average);

impl Metric for Member {
    fn name(&self) -> String {
        format!("recall-{}", self.0.as_str())
    }

    fn classification(&self) -> bool {
        true
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        #[allow(unused_variables)]
        let score = |tp: f64, fp: f64, fn_: f64| ratio(tp, tp + fn_);
        Ok(Counts::of(p)?.average(self.0, score))
    }
}
