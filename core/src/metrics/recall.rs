//! Recall: of the samples of a class, the share predicted as it (`sklearn.metrics.recall_score`).
//! Named `recall-macro`, `recall-micro`, `recall-weighted` or `recall-per-class`.

use super::{counts::CountsMetric, ratio, Metric};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    CountsMetric::parse(name, "recall", |tp, _fp, fn_| ratio(tp, tp + fn_))
}
