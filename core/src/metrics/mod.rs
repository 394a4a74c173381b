//! Evaluation metrics that match scikit-learn's, computed exactly over a whole split from
//! the model's predictions (no libtorch: the class probabilities or the outputs, and the
//! labels, as host values). One trait, [`Metric`], and a registry: one file per built-in
//! member ([`BUILTINS`]), each recognising its names (`f1-macro`, `top-3-accuracy`), then
//! the metrics a program built on pipeline adds with [`register_metric`]
//! (`examples/extension/`).
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
use std::sync::RwLock;

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
pub trait Metric: std::fmt::Debug + Send + Sync {
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

/// Every built-in metric: what a name means, the names it answers to and what it
/// measures (for messages and `pipeline explain`).
pub const BUILTINS: &[(Parse, &str, &str)] = &[
    (
        accuracy::parse,
        "`accuracy`",
        "the share of samples whose most probable class is theirs",
    ),
    (
        top_k_accuracy::parse,
        "`top-K-accuracy` (K ≥ 2)",
        "the share of samples whose class is among the K most probable",
    ),
    (
        precision::parse,
        "`precision-macro`, `-micro`, `-weighted`, `-per-class`",
        "of the samples predicted a class, the share that are of it",
    ),
    (
        recall::parse,
        "`recall-macro`, `-micro`, `-weighted`, `-per-class`",
        "of the samples of a class, the share predicted it",
    ),
    (
        f1::parse,
        "`f1-macro`, `-micro`, `-weighted`, `-per-class`",
        "the harmonic mean of precision and recall",
    ),
    (
        auroc::parse,
        "`auroc` (binary, or one-vs-rest macro)",
        "the area under the ROC curve",
    ),
    (
        log_loss::parse,
        "`log-loss`",
        "the mean negative log-probability of each sample's class",
    ),
    (
        confusion_matrix::parse,
        "`confusion-matrix`",
        "samples counted by true and predicted class, written to the run directory",
    ),
    (mse::parse, "`mse`", "the mean squared error"),
    (rmse::parse, "`rmse`", "the root of the mean squared error"),
    (mae::parse, "`mae`", "the mean absolute error"),
    (r2::parse, "`r2`", "the coefficient of determination"),
];

/// The metrics registered by the program ([`register_metric`]), with what each measures.
static REGISTERED: RwLock<Vec<(&'static dyn Metric, &'static str)>> = RwLock::new(Vec::new());

fn registered() -> Vec<(&'static dyn Metric, &'static str)> {
    REGISTERED.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Adds `metric` to the metrics a manifest may name (`eval`'s and `validate`'s `metrics`,
/// monitors), `doc` saying what it measures (`pipeline explain eval.metrics`). Its
/// predictions are every sample's of the split, as the built-in ones' ([`Predictions`]);
/// what [`Metric::classification`] says decides the losses `check` takes it with.
/// Refused (with why) when its name is a built-in metric's, `loss`, already registered,
/// or not a name a manifest can write.
pub fn register_metric(metric: &'static dyn Metric, doc: &'static str) -> Result<(), String> {
    let name = metric.name();
    if name == "loss" || parse(&name).is_some() {
        return Err(format!("`{name}` is already a metric"));
    }
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '"' || c == '.') {
        return Err(format!("`{name}` is not a name a manifest can write"));
    }
    REGISTERED
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .push((metric, doc));
    Ok(())
}

/// A registered metric, as [`parse`] gives it.
#[derive(Debug)]
struct Registered(&'static dyn Metric);

impl Metric for Registered {
    fn name(&self) -> String {
        self.0.name()
    }
    fn classification(&self) -> bool {
        self.0.classification()
    }
    fn compute(&self, predictions: &Predictions) -> Result<Score, String> {
        self.0.compute(predictions)
    }
    fn multi_label(&self) -> bool {
        self.0.multi_label()
    }
    fn one_value(&self) -> bool {
        self.0.one_value()
    }
    fn larger_is_better(&self) -> bool {
        self.0.larger_is_better()
    }
}

/// The metric `name` means, if any: a built-in one, else one the program registered.
pub fn parse(name: &str) -> Option<Box<dyn Metric>> {
    BUILTINS
        .iter()
        .find_map(|(parse, _, _)| parse(name))
        .or_else(|| {
            registered()
                .into_iter()
                .find(|(m, _)| m.name() == name)
                .map(|(m, _)| Box::new(Registered(m)) as Box<dyn Metric>)
        })
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

/// Every metric, built-in then registered: the names it answers to (as `` `accuracy` ``)
/// and what it measures.
pub fn members() -> Vec<(String, &'static str)> {
    let builtins = BUILTINS
        .iter()
        .map(|(_, names, doc)| (names.to_string(), *doc));
    let registered = registered()
        .into_iter()
        .map(|(m, doc)| (format!("`{}`", m.name()), doc));
    builtins.chain(registered).collect()
}

/// The names every metric answers to, for a message.
pub fn names() -> String {
    members()
        .into_iter()
        .map(|(names, _)| names)
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
        for (_, names, _) in BUILTINS {
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

    /// A metric of the tests' own, counted as a program would register it.
    #[derive(Debug)]
    struct Named(&'static str);

    impl Metric for Named {
        fn name(&self) -> String {
            self.0.into()
        }
        fn classification(&self) -> bool {
            false
        }
        fn compute(&self, _: &Predictions) -> Result<Score, String> {
            Ok(Score::One(7.0))
        }
        fn larger_is_better(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_registered_metric_is_named_as_a_built_in_one_and_cannot_replace_one() {
        static OURS: Named = Named("sevens");
        assert!(parse("sevens").is_none());
        register_metric(&OURS, "always 7").unwrap();
        let metric = parse("sevens").unwrap();
        assert_eq!(metric.name(), "sevens");
        assert!(!metric.classification() && !metric.larger_is_better());
        let p = Predictions::Values {
            outputs: &[1.0],
            targets: &[2.0],
            width: 1,
        };
        assert_eq!(metric.compute(&p), Ok(Score::One(7.0)));
        assert!(names().ends_with("; `sevens`"), "{}", names());
        for (taken, why) in [
            (&OURS, "`sevens` is already a metric"),
            (&Named("accuracy"), "`accuracy` is already a metric"),
            (
                &Named("top-5-accuracy"),
                "`top-5-accuracy` is already a metric",
            ),
            (&Named("loss"), "`loss` is already a metric"),
            (
                &Named("val.x"),
                "`val.x` is not a name a manifest can write",
            ),
            (
                &Named("two words"),
                "`two words` is not a name a manifest can write",
            ),
        ] {
            let taken: &'static Named = Box::leak(Box::new(Named(taken.0)));
            assert_eq!(register_metric(taken, "").unwrap_err(), why);
        }
    }
}
