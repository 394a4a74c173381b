//! Precision: of the samples predicted as a class, the share that are (`sklearn.metrics.precision_score`).
//! Named `precision-macro`, `precision-micro`, `precision-weighted` or `precision-per-class`.

use super::{counts::CountsMetric, ratio, Metric};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    CountsMetric::parse(name, "precision", |tp, fp, _fn| ratio(tp, tp + fp))
}
