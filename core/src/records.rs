//! Reading a run's `metrics.jsonl` back (`pipeline plot`, `pipeline report`): its
//! records, and any metric's curve by optimizer step.
//!
//! Every line says what it is (`"record"`: `epoch`, `step`, `validation`, `eval`,
//! `predict`); lines of runs from before that key are told apart by what they hold. A
//! killed run may end in half a line: it is left out, and said.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a line of `metrics.jsonl` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The end of a training epoch: its loss (accuracy), validation, learning rate.
    Epoch,
    /// A step record (`logging { log-every-steps N }`).
    Step,
    /// A validation within an epoch (`validate every-steps=N`).
    Validation,
    Eval,
    Predict,
}

impl Kind {
    fn of(line: &Value) -> Option<Kind> {
        match line.get("record").and_then(Value::as_str) {
            Some("epoch") => Some(Kind::Epoch),
            Some("step") => Some(Kind::Step),
            Some("validation") => Some(Kind::Validation),
            Some("eval") => Some(Kind::Eval),
            Some("predict") => Some(Kind::Predict),
            Some(_) => None,
            // Before `record`: an epoch had its learning rate and time, a validation its
            // step alone, an evaluation its samples.
            None if line.get("lr").is_some() && line.get("seconds").is_some() => Some(Kind::Epoch),
            None if line.get("step").is_some() => Some(Kind::Validation),
            None if line.get("source").is_some() && line.get("output").is_some() => {
                Some(Kind::Predict)
            }
            None if line.get("samples").is_some() => Some(Kind::Eval),
            None => None,
        }
    }
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub kind: Kind,
    pub stage: String,
    /// The optimizer step it was taken at, counted from the stage's start (an epoch's
    /// record: the step it ended on).
    pub step: Option<u64>,
    /// Its numbers, by their names in the line (`loss`, `val_accuracy`, `lr`, …).
    pub values: BTreeMap<String, f64>,
    /// The line as written.
    pub line: Value,
}

/// A run's records, in the order they were written.
#[derive(Debug, Clone, PartialEq)]
pub struct Records {
    pub path: PathBuf,
    pub records: Vec<Record>,
    /// The file ended in half a line (a run killed while writing it), left out.
    pub cut: bool,
}

/// Why a run's records cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadError {
    Missing(PathBuf),
    Unreadable(PathBuf, String),
    /// A line (1-based) that is not a record.
    BadLine(PathBuf, usize, String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ReadError::Missing(p) => write!(f, "{} does not exist", p.display()),
            ReadError::Unreadable(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            ReadError::BadLine(p, n, e) => {
                write!(f, "{}:{n} is not a metrics record: {e}", p.display())
            }
        }
    }
}

/// The records of the run directory `run_dir`.
pub fn read(run_dir: &Path) -> Result<Records, ReadError> {
    let path = run_dir.join("metrics.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing(path)),
        Err(e) => return Err(ReadError::Unreadable(path, e.to_string())),
    };
    parse(&text, &path)
}

/// The records of `text`, the contents of `path`.
pub fn parse(text: &str, path: &Path) -> Result<Records, ReadError> {
    let mut records = Vec::new();
    // Steps taken by each stage's epochs so far: where its epoch records go.
    let mut steps: BTreeMap<String, u64> = BTreeMap::new();
    let cut = !text.is_empty() && !text.ends_with('\n');
    let complete = match cut {
        true => &text[..text.rfind('\n').map_or(0, |i| i + 1)],
        false => text,
    };
    for (i, raw) in complete.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let bad = |why: String| ReadError::BadLine(path.to_path_buf(), i + 1, why);
        let line: Value = serde_json::from_str(raw).map_err(|e| bad(e.to_string()))?;
        let kind = Kind::of(&line).ok_or_else(|| bad("it says neither what it records nor holds an epoch's, a step's or an evaluation's values".into()))?;
        let stage = line
            .get("stage")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("it names no stage".into()))?
            .to_string();
        let step = match kind {
            Kind::Epoch => {
                let taken = steps.entry(stage.clone()).or_default();
                *taken += line.get("steps").and_then(Value::as_u64).unwrap_or(0);
                Some(*taken)
            }
            _ => line.get("step").and_then(Value::as_u64),
        };
        let values = line
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| !matches!(k.as_str(), "step" | "record"))
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect();
        records.push(Record {
            kind,
            stage,
            step,
            values,
            line,
        });
    }
    Ok(Records {
        path: path.to_path_buf(),
        records,
        cut,
    })
}

/// A metric, as `pipeline plot --metric` names it: `loss` and `accuracy` of the training
/// epochs, `val.NAME` of every validation, `lr`, `samples_per_second` and `seconds` of the
/// epochs, `step.NAME` of the step records (`step.loss`, `step.grad_norm`, …), `eval.NAME`
/// of the evaluations.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Metric(pub String);

impl Metric {
    /// The records it is in, and its key there.
    fn source(&self) -> (&'static [Kind], String) {
        let name = self.0.as_str();
        if let Some(m) = name.strip_prefix("val.") {
            (&[Kind::Epoch, Kind::Validation], format!("val_{m}"))
        } else if let Some(m) = name.strip_prefix("step.") {
            (&[Kind::Step], m.to_string())
        } else if let Some(m) = name.strip_prefix("eval.") {
            (&[Kind::Eval], m.to_string())
        } else {
            (&[Kind::Epoch], name.to_string())
        }
    }
}

impl Records {
    /// The curve of `metric` in each stage that has it, as (optimizer step, value) in the
    /// order they were taken: an evaluation at step 0.
    pub fn series(&self, metric: &Metric) -> Vec<(String, Vec<(f64, f64)>)> {
        let (kinds, key) = metric.source();
        let mut by_stage: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in self.records.iter().filter(|r| kinds.contains(&r.kind)) {
            let Some(y) = r.values.get(&key) else {
                continue;
            };
            let point = (r.step.unwrap_or(0) as f64, *y);
            match by_stage.iter_mut().find(|(s, _)| *s == r.stage) {
                Some((_, points)) => points.push(point),
                None => by_stage.push((r.stage.clone(), vec![point])),
            }
        }
        // A validation within an epoch and the epoch's end at the same step are one value.
        for (_, points) in &mut by_stage {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            points.dedup_by(|a, b| a.0 == b.0);
        }
        by_stage
    }

    /// Every metric these records have, by the names [`Metric`] takes.
    pub fn metrics(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for r in &self.records {
            for key in r.values.keys() {
                let name = match (r.kind, key.as_str()) {
                    (_, "epoch" | "epochs" | "steps" | "samples") => continue,
                    (Kind::Epoch | Kind::Validation, k) if k.starts_with("val_") => {
                        format!("val.{}", &k[4..])
                    }
                    (Kind::Epoch, k) => k.to_string(),
                    (Kind::Step, k) => format!("step.{k}"),
                    (Kind::Eval, k) => format!("eval.{k}"),
                    (Kind::Validation | Kind::Predict, _) => continue,
                };
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"{"record":"step","stage":"train","epoch":1,"step":5,"loss":2.0,"samples":320,"lr":0.1,"samples_per_second":100.0}
{"record":"validation","stage":"train","epoch":1,"step":7,"val_loss":1.5}
{"record":"epoch","stage":"train","epoch":1,"loss":1.8,"lr":0.1,"seconds":1.0,"samples_per_second":90.0,"steps":10,"val_loss":1.4}
{"record":"step","stage":"train","epoch":2,"step":15,"loss":1.2,"samples":320,"lr":0.1,"samples_per_second":100.0}
{"record":"epoch","stage":"train","epoch":2,"loss":1.1,"lr":0.05,"seconds":1.0,"samples_per_second":95.0,"steps":10,"val_loss":1.0}
{"record":"eval","stage":"test","loss":1.05,"samples":100,"accuracy":0.7}
"#;

    #[test]
    fn curves_by_optimizer_step() {
        let r = parse(LOG, Path::new("m.jsonl")).unwrap();
        assert!(!r.cut);
        let m = |s: &str| r.series(&Metric(s.into()));
        assert_eq!(
            m("loss"),
            [("train".into(), vec![(10.0, 1.8), (20.0, 1.1)])]
        );
        assert_eq!(
            m("val.loss"),
            [("train".into(), vec![(7.0, 1.5), (10.0, 1.4), (20.0, 1.0)])]
        );
        assert_eq!(
            m("step.loss"),
            [("train".into(), vec![(5.0, 2.0), (15.0, 1.2)])]
        );
        assert_eq!(m("eval.accuracy"), [("test".into(), vec![(0.0, 0.7)])]);
        assert!(m("val.f1").is_empty());
        assert_eq!(
            r.metrics(),
            [
                "step.loss",
                "step.lr",
                "step.samples_per_second",
                "val.loss",
                "loss",
                "lr",
                "samples_per_second",
                "seconds",
                "eval.accuracy",
                "eval.loss",
            ]
        );
    }

    #[test]
    fn a_killed_runs_half_line_is_left_out_and_a_bad_line_named() {
        let cut = format!("{LOG}{{\"record\":\"step\",\"sta");
        let r = parse(&cut, Path::new("m.jsonl")).unwrap();
        assert!(r.cut);
        assert_eq!(r.records.len(), 6);
        let bad = format!("{LOG}not json\n");
        let e = parse(&bad, Path::new("m.jsonl")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.jsonl:7 is not a metrics record: expected ident at line 1 column 2"
        );
        assert_eq!(
            read(Path::new("/nowhere")).unwrap_err().to_string(),
            "/nowhere/metrics.jsonl does not exist"
        );
    }

    #[test]
    fn lines_from_before_record_are_told_apart() {
        let old = r#"{"stage":"train","epoch":1,"loss":1.8,"lr":0.1,"seconds":1.0,"samples_per_second":90.0,"steps":10}
{"stage":"train","epoch":2,"step":15,"val_loss":1.2}
{"stage":"test","loss":1.05,"samples":100}
{"stage":"p","source":"x.csv","samples":3,"output":"p.csv"}
"#;
        let r = parse(old, Path::new("m.jsonl")).unwrap();
        let kinds: Vec<Kind> = r.records.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [Kind::Epoch, Kind::Validation, Kind::Eval, Kind::Predict]
        );
    }
}
