//! Evaluation metrics that match scikit-learn's, computed exactly over a whole split from
//! the model's predictions (no libtorch: the class probabilities or the outputs, and the
//! labels, as host values). One trait, [`Metric`], and a registry, [`REGISTRY`]: one file
//! per member, each recognising its names (`f1-macro`, `top-3-accuracy`).
//!
//! Conventions are scikit-learn 1.6's, so that a number here is the number a user gets
//! from `sklearn.metrics` on the same predictions (tested to 1e-6 on three fixed sets):
//! averages over the labels present in the true or predicted classes, a ratio with a zero
//! denominator counts 0 (`zero_division` left at its default), multi-output regression
//! metrics are the mean of the outputs' (`multioutput="uniform_average"`).

mod accuracy;
mod auroc;
mod confusion_matrix;
mod counts;
mod f1;
mod log_loss;
mod mae;
mod mse;
mod precision;
mod r2;
mod recall;
mod rmse;
mod top_k_accuracy;

pub use counts::Counts;

use manifests::{Manifest, Mode, Monitor};

/// What a model predicted for every sample of a split, with the truth.
#[derive(Debug, Clone, Copy)]
pub enum Predictions<'a> {
    /// Classification: `probabilities` is samples × `classes` (each row sums to 1),
    /// `labels` the true class of each sample.
    Classes {
        probabilities: &'a [f64],
        labels: &'a [i64],
        classes: usize,
    },
    /// Regression: `outputs` and `targets` are samples × `width`.
    Values {
        outputs: &'a [f64],
        targets: &'a [f64],
        width: usize,
    },
    /// Multi-label (`bce-with-logits`): `probabilities` (each output's sigmoid) and
    /// `truth` (0 or 1) are samples × `labels`; a label is predicted where its
    /// probability is above 0.5 (its logit above 0).
    Labels {
        probabilities: &'a [f64],
        truth: &'a [f64],
        labels: usize,
    },
}

/// What a metric gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Score {
    One(f64),
    /// One value per class (every class of the model, in index order).
    PerClass(Vec<f64>),
    /// Rows: the true class; columns: the predicted one (every class of the model).
    Matrix(Vec<Vec<u64>>),
}

/// A metric of an evaluation.
pub trait Metric: std::fmt::Debug {
    /// Its name as written in a manifest.
    fn name(&self) -> String;
    /// Whether it measures classification (else regression).
    fn classification(&self) -> bool;
    /// Its value on the predictions (`Err` when it is undefined there, saying why).
    fn compute(&self, predictions: &Predictions) -> Result<Score, String>;
    /// Whether it also measures multi-label outputs ([`Predictions::Labels`]), as
    /// scikit-learn does given the indicator matrices.
    fn multi_label(&self) -> bool {
        false
    }
    /// Whether it gives one value ([`Score::One`]), which a monitor may watch.
    fn one_value(&self) -> bool {
        true
    }
    /// Whether a larger value is better (an accuracy or a score, not a loss or an error):
    /// a monitor's default `mode`.
    fn larger_is_better(&self) -> bool {
        true
    }
}

/// Each member: the metric a name means, if it is one of the member's names.
type Parse = fn(&str) -> Option<Box<dyn Metric>>;

/// Every metric, with the names it answers to (for messages and documentation).
pub const REGISTRY: &[(Parse, &str)] = &[
    (accuracy::parse, "`accuracy`"),
    (top_k_accuracy::parse, "`top-K-accuracy` (K ≥ 2)"),
    (
        precision::parse,
        "`precision-macro`, `-micro`, `-weighted`, `-per-class`",
    ),
    (
        recall::parse,
        "`recall-macro`, `-micro`, `-weighted`, `-per-class`",
    ),
    (f1::parse, "`f1-macro`, `-micro`, `-weighted`, `-per-class`"),
    (auroc::parse, "`auroc` (binary, or one-vs-rest macro)"),
    (log_loss::parse, "`log-loss`"),
    (confusion_matrix::parse, "`confusion-matrix`"),
    (mse::parse, "`mse`"),
    (rmse::parse, "`rmse`"),
    (mae::parse, "`mae`"),
    (r2::parse, "`r2`"),
];

/// The metric `name` means, if any.
pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    REGISTRY.iter().find_map(|(parse, _)| parse(name))
}

/// The direction a monitor improves in: as written, else the metric's own (a scripted
/// metric's `mode`; `loss` and unknown names, refused by `check`, go down).
pub fn mode_of(manifest: &Manifest, monitor: &Monitor, written: Option<Mode>) -> Mode {
    if let Some(mode) = written {
        return mode;
    }
    if let Some(scripted) = manifest.scripted_metric(&monitor.metric) {
        return scripted.mode;
    }
    match parse(&monitor.metric) {
        Some(m) if m.larger_is_better() => Mode::Max,
        _ => Mode::Min,
    }
}

/// The names every metric answers to, for a message.
pub fn names() -> String {
    REGISTRY
        .iter()
        .map(|(_, names)| *names)
        .collect::<Vec<_>>()
        .join("; ")
}

/// How precision, recall and F1 are averaged over the classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Average {
    Macro,
    Micro,
    Weighted,
    PerClass,
}

impl Average {
    /// `prefix-macro` … as an average.
    pub(crate) fn parse(name: &str, prefix: &str) -> Option<Average> {
        Some(match name.strip_prefix(prefix)?.strip_prefix('-')? {
            "macro" => Average::Macro,
            "micro" => Average::Micro,
            "weighted" => Average::Weighted,
            "per-class" => Average::PerClass,
            _ => return None,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Average::Macro => "macro",
            Average::Micro => "micro",
            Average::Weighted => "weighted",
            Average::PerClass => "per-class",
        }
    }
}

/// `numerator / denominator`, 0 when the denominator is (scikit-learn's `zero_division`).
pub(crate) fn ratio(numerator: f64, denominator: f64) -> f64 {
    match denominator {
        0.0 => 0.0,
        d => numerator / d,
    }
}

/// A classification metric's predictions, checked: at least one sample, a row of
/// probabilities per label, at least one class, every label one of them.
pub(crate) fn classes<'a>(p: &Predictions<'a>) -> Result<(&'a [f64], &'a [i64], usize), String> {
    let Predictions::Classes {
        probabilities,
        labels,
        classes,
    } = *p
    else {
        return Err("it measures classification".into());
    };
    if labels.is_empty() {
        return Err("there are no samples".into());
    }
    if classes == 0 || probabilities.len() != labels.len() * classes {
        return Err(format!(
            "{} probabilities for {} samples of {classes} classes",
            probabilities.len(),
            labels.len()
        ));
    }
    if let Some(bad) = labels.iter().find(|&&l| l < 0 || l as usize >= classes) {
        return Err(format!("label {bad} is not one of the {classes} classes"));
    }
    Ok((probabilities, labels, classes))
}

/// Multi-label predictions, checked: at least one sample, `labels` probabilities and
/// truths per sample. The truths and the predicted labels (probability above 0.5), as
/// booleans, row by row.
pub(crate) fn multi_label(p: &Predictions) -> Result<(Vec<bool>, Vec<bool>, usize), String> {
    let Predictions::Labels {
        probabilities,
        truth,
        labels,
    } = *p
    else {
        return Err("it measures multi-label outputs".into());
    };
    if truth.is_empty() || labels == 0 {
        return Err("there are no samples".into());
    }
    if probabilities.len() != truth.len() || truth.len() % labels != 0 {
        return Err(format!(
            "{} probabilities for {} truths of {labels} labels",
            probabilities.len(),
            truth.len()
        ));
    }
    let truths = truth.iter().map(|&t| t > 0.5).collect();
    let predicted = probabilities.iter().map(|&p| p > 0.5).collect();
    Ok((truths, predicted, labels))
}

/// A regression metric's predictions, checked: as many outputs as targets, rows of
/// `width` values.
pub(crate) fn values<'a>(p: &Predictions<'a>) -> Result<(&'a [f64], &'a [f64], usize), String> {
    let Predictions::Values {
        outputs,
        targets,
        width,
    } = *p
    else {
        return Err("it measures regression".into());
    };
    if width == 0 || outputs.len() != targets.len() || targets.len() % width != 0 {
        return Err(format!(
            "{} outputs for {} targets of width {width}",
            outputs.len(),
            targets.len()
        ));
    }
    Ok((outputs, targets, width))
}

/// The mean over the outputs of `per_output(outputs' column, targets' column)`.
pub(crate) fn mean_over_outputs(
    p: &Predictions,
    per_output: impl Fn(&[f64], &[f64]) -> f64,
) -> Result<Score, String> {
    let (outputs, targets, width) = values(p)?;
    if targets.is_empty() {
        return Err("there are no samples".into());
    }
    let column = |v: &[f64], j: usize| v.iter().skip(j).step_by(width).copied().collect::<Vec<_>>();
    let total: f64 = (0..width)
        .map(|j| per_output(&column(outputs, j), &column(targets, j)))
        .sum();
    Ok(Score::One(total / width as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictions_that_do_not_fit_are_errors_not_panics() {
        let probabilities = [0.5, 0.5, 0.9, 0.1];
        let bad = [
            Predictions::Classes {
                probabilities: &probabilities,
                labels: &[0, 2],
                classes: 2,
            },
            Predictions::Classes {
                probabilities: &probabilities,
                labels: &[-100, 1],
                classes: 2,
            },
            Predictions::Classes {
                probabilities: &probabilities,
                labels: &[0],
                classes: 2,
            },
            Predictions::Classes {
                probabilities: &[],
                labels: &[],
                classes: 0,
            },
        ];
        for (_, names) in REGISTRY {
            let name = names.split('`').nth(1).unwrap().replace('K', "2");
            let metric = parse(&name).unwrap_or_else(|| panic!("{name}"));
            if !metric.classification() {
                let one = Predictions::Values {
                    outputs: &[1.0],
                    targets: &[2.0],
                    width: 0,
                };
                assert!(metric.compute(&one).is_err(), "{name}");
                continue;
            }
            for p in &bad {
                assert!(metric.compute(p).is_err(), "{name} {p:?}");
            }
        }
    }
}
