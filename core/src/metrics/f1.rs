//! F1: the harmonic mean of precision and recall, `2 tp / (2 tp + fp + fn)` (`sklearn.metrics.f1_score`).
//! Named `f1-macro`, `f1-micro`, `f1-weighted` or `f1-per-class`.

use super::{counts::CountsMetric, ratio, Metric};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    CountsMetric::parse(name, "f1", |tp, fp, fn_| {
        ratio(2.0 * tp, 2.0 * tp + fp + fn_)
    })
}
