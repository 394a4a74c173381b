//! `r2`: the coefficient of determination `1 − SS_res / SS_tot`, averaged over the outputs (`sklearn.metrics.r2_score`; a constant target scores 1 when predicted exactly, else 0, as with `force_finite`).

use super::{mean_over_outputs, Metric, Predictions, Score};

pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    (name == "r2").then(|| Box::new(Member) as Box<dyn Metric>)
}

#[derive(Debug)]
struct Member;

impl Metric for Member {
    fn name(&self) -> String {
        "r2".into()
    }

    fn classification(&self) -> bool {
        false
    }

    fn compute(&self, p: &Predictions) -> Result<Score, String> {
        let (_, targets, width) = super::values(p)?;
        if targets.len() / width < 2 {
            return Err("R² needs at least two samples".into());
        }
        mean_over_outputs(p, |o, t| {
            let n = t.len() as f64;
            let mean = t.iter().sum::<f64>() / n;
            let residual: f64 = o.iter().zip(t).map(|(o, t)| (t - o) * (t - o)).sum();
            let total: f64 = t.iter().map(|t| (t - mean) * (t - mean)).sum();
            match (total == 0.0, residual == 0.0) {
                (true, true) => 1.0,
                (true, false) => 0.0,
                _ => 1.0 - residual / total,
            }
        })
    }
}
