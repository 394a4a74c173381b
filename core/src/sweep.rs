//! Sweeps (`pipeline sweep`): the points of a grid of `--set` values, the metric they are
//! ranked by, and which of them may run side by side without computing a stage twice.

use manifests::{LossKind, Manifest, Override, StageConfig};
use std::collections::BTreeSet;

/// One swept key and its values: `optimizer.lr=1e-3,3e-3`.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

impl Axis {
    pub fn parse(text: &str) -> Result<Axis, String> {
        let (key, values) = text.split_once('=').ok_or_else(|| {
            format!("`{text}` is not KEY=V1,V2,… (for example optimizer.lr=1e-3,3e-3)")
        })?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(format!("`{text}`: the key has an empty segment"));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().all(String::is_empty) {
            return Err(format!("`{text}`: the grid of `{key}` is empty"));
        }
        if values.iter().any(String::is_empty) {
            return Err(format!("`{text}`: a value of `{key}` is empty"));
        }
        let mut seen = BTreeSet::new();
        if let Some(twice) = values.iter().find(|v| !seen.insert(v.as_str())) {
            return Err(format!("`{text}`: `{twice}` is there twice"));
        }
        Ok(Axis {
            key: key.to_string(),
            values,
        })
    }
}

/// Every combination of the axes' values, the first axis varying slowest, each as the
/// overrides it adds to the manifest.
pub fn points(axes: &[Axis]) -> Result<Vec<Vec<Override>>, String> {
    let mut keys = BTreeSet::new();
    if let Some(twice) = axes.iter().find(|a| !keys.insert(a.key.as_str())) {
        return Err(format!("`{}` is swept twice", twice.key));
    }
    let mut points: Vec<Vec<Override>> = vec![Vec::new()];
    for axis in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                axis.values.iter().map(move |v| {
                    let mut p = p.clone();
                    p.push(Override {
                        path: axis.key.split('.').map(str::to_string).collect(),
                        value: v.clone(),
                    });
                    p
                })
            })
            .collect();
    }
    Ok(points)
}

/// What a sweep ranks its points by: a metric of a stage's report.
#[derive(Debug, Clone, PartialEq)]
pub struct Monitor {
    pub stage: String,
    pub metric: String,
    /// Higher is better.
    pub maximize: bool,
}

/// Metrics where higher is better.
fn higher_is_better(metric: &str) -> bool {
    let name = metric.strip_prefix("val_").unwrap_or(metric);
    let name = name.split('.').next().unwrap_or(name);
    [
        "accuracy",
        "r2",
        "auroc",
        "f1",
        "precision",
        "recall",
        "top",
    ]
    .iter()
    .any(|m| name.starts_with(m))
}

impl Monitor {
    /// `STAGE.METRIC` (`test.accuracy`, `train.val_loss`), or by default the first eval
    /// stage's accuracy (its loss for a regression), else the last train stage's loss;
    /// `maximize` as asked, else by the metric (accuracy up, loss down). Refused, with
    /// what the stages compute, when no stage computes it.
    pub fn of(
        manifest: &Manifest,
        written: Option<&str>,
        maximize: Option<bool>,
    ) -> Result<Monitor, String> {
        let classification = manifest.loss.kind.is_classification();
        let (stage, metric) = match written {
            Some(text) => {
                let (stage, metric) = text.split_once('.').ok_or_else(|| {
                    format!("--monitor `{text}`: write STAGE.METRIC (for example test.accuracy)")
                })?;
                (stage.to_string(), metric.to_string())
            }
            None => {
                let eval = manifest
                    .stages
                    .iter()
                    .find(|s| matches!(s.config, StageConfig::Eval(_)));
                let train = manifest
                    .stages
                    .iter()
                    .rev()
                    .find(|s| matches!(s.config, StageConfig::Train(_)));
                match (eval, train) {
                    (Some(e), _) => (
                        e.name().to_string(),
                        if classification { "accuracy" } else { "loss" }.into(),
                    ),
                    (None, Some(t)) => (t.name().to_string(), "loss".into()),
                    (None, None) => {
                        return Err("no stage computes a metric to rank the points by: the manifest has no train or eval stage".into())
                    }
                }
            }
        };
        let found = manifest.stages.iter().find(|s| s.name() == stage);
        let Some(found) = found else {
            let names: Vec<&str> = manifest.stages.iter().map(|s| s.name()).collect();
            return Err(format!(
                "--monitor `{stage}.{metric}`: there is no stage `{stage}` (the stages: {})",
                names.join(", ")
            ));
        };
        let computed = computed(manifest, &found.config, classification);
        let per_class = |m: &String| metric.starts_with(&format!("{m}."));
        if !computed.contains(&metric) && !computed.iter().any(per_class) {
            return Err(format!(
                "--monitor `{stage}.{metric}`: stage `{stage}` does not compute `{metric}`; it computes {}",
                computed.join(", ")
            ));
        }
        Ok(Monitor {
            maximize: maximize.unwrap_or_else(|| higher_is_better(&metric)),
            stage,
            metric,
        })
    }

    pub fn name(&self) -> String {
        format!("{}.{}", self.stage, self.metric)
    }

    /// Whether `a` ranks before `b` (a missing value last).
    pub fn order(&self, a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
        match (a, b) {
            (Some(a), Some(b)) if self.maximize => b.total_cmp(&a),
            (Some(a), Some(b)) => a.total_cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
    }
}

/// The metrics a stage's report holds (per-class metrics as their name, `NAME.CLASS` in
/// the report).
fn computed(manifest: &Manifest, config: &StageConfig, classification: bool) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: &str| names.push(n.to_string());
    match config {
        StageConfig::Train(_) => {
            for n in ["loss", "epochs", "steps"] {
                add(n);
            }
            if classification {
                add("accuracy");
            }
            if manifest.data.split.val > 0.0 {
                add("val_loss");
                if classification {
                    add("val_accuracy");
                }
            }
        }
        StageConfig::Eval(e) => {
            add("loss");
            add("samples");
            if classification && manifest.loss.kind != LossKind::BceWithLogits {
                add("accuracy");
            }
            for m in &e.metrics {
                if !names.contains(&m.value) {
                    names.push(m.value.clone());
                }
            }
        }
        StageConfig::Checkpoint(_) | StageConfig::Predict(_) => {}
    }
    names
}

/// The points that may start now, in order, at most `free` of them: a point waits while
/// a stage it would compute (a fingerprint in `stale[point]`) is being computed by a
/// running one, so that no stage is computed twice.
pub fn startable(
    pending: &[usize],
    stale: &[BTreeSet<String>],
    running: &[usize],
    free: usize,
) -> Vec<usize> {
    let mut busy: BTreeSet<&String> = running.iter().flat_map(|&p| &stale[p]).collect();
    let mut start = Vec::new();
    for &p in pending {
        if start.len() == free {
            break;
        }
        if stale[p].iter().all(|f| !busy.contains(f)) {
            busy.extend(&stale[p]);
            start.push(p);
        }
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_their_points() {
        let lr = Axis::parse("optimizer.lr=1e-3, 3e-3").unwrap();
        assert_eq!(lr.values, ["1e-3", "3e-3"]);
        let bs = Axis::parse("test.batch-size=100,200").unwrap();
        let p = points(&[lr.clone(), bs]).unwrap();
        let shown: Vec<String> = p
            .iter()
            .map(|o| {
                o.iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(
            shown,
            [
                "optimizer.lr=1e-3 test.batch-size=100",
                "optimizer.lr=1e-3 test.batch-size=200",
                "optimizer.lr=3e-3 test.batch-size=100",
                "optimizer.lr=3e-3 test.batch-size=200",
            ]
        );
        assert_eq!(
            Axis::parse("optimizer.lr=").unwrap_err(),
            "`optimizer.lr=`: the grid of `optimizer.lr` is empty"
        );
        assert_eq!(
            Axis::parse("optimizer.lr=1,,2").unwrap_err(),
            "`optimizer.lr=1,,2`: a value of `optimizer.lr` is empty"
        );
        assert_eq!(
            Axis::parse("optimizer.lr=1,1").unwrap_err(),
            "`optimizer.lr=1,1`: `1` is there twice"
        );
        assert!(Axis::parse("lr").is_err());
        assert_eq!(
            points(&[lr.clone(), lr]).unwrap_err(),
            "`optimizer.lr` is swept twice"
        );
    }

    #[test]
    fn a_point_waits_for_a_stage_another_is_computing() {
        let s = |f: &[&str]| f.iter().map(|f| f.to_string()).collect::<BTreeSet<_>>();
        // Points 0 and 1 share the training `t`; 2 trains `u`.
        let stale = [s(&["t", "e1"]), s(&["t", "e2"]), s(&["u", "e3"])];
        assert_eq!(startable(&[0, 1, 2], &stale, &[], 2), [0, 2]);
        assert_eq!(startable(&[1], &stale, &[0, 2], 1), Vec::<usize>::new());
        assert_eq!(startable(&[1], &stale, &[2], 1), [1]);
    }

    #[test]
    fn the_monitor_ranks_up_or_down() {
        let text = "data { source \"d.csv\"; split train=0.7 val=0.1 test=0.2; }\nmodel { linear 2; }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\neval \"test\" needs=\"train\" { metrics \"f1-macro\"; }\n";
        let checked = crate::load(text, std::path::Path::new("m.kdl"), &[]);
        let m = checked.valid().unwrap();
        let by_default = Monitor::of(m, None, None).unwrap();
        assert_eq!(by_default.name(), "test.accuracy");
        assert!(by_default.maximize);
        let loss = Monitor::of(m, Some("train.val_loss"), None).unwrap();
        assert!(!loss.maximize);
        assert_eq!(
            loss.order(Some(0.2), Some(0.1)),
            std::cmp::Ordering::Greater
        );
        assert!(
            Monitor::of(m, Some("test.f1-macro"), None)
                .unwrap()
                .maximize
        );
        assert_eq!(
            Monitor::of(m, Some("test.r2"), None).unwrap_err(),
            "--monitor `test.r2`: stage `test` does not compute `r2`; it computes loss, samples, accuracy, f1-macro"
        );
        assert_eq!(
            Monitor::of(m, Some("val.loss"), None).unwrap_err(),
            "--monitor `val.loss`: there is no stage `val` (the stages: train, test)"
        );
    }
}
