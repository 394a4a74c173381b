//! Running an `eval` stage: the model measured on a split of the data or on another
//! file, its metrics from the predictions of the same forward pass, shared by the
//! processes under `ddp`.

use super::{append, write_failed, Context, Produced};
use crate::data::Dataset;
use crate::error::torch_error;
use crate::evaluate::{evaluate, evaluate_shared, Predicted};
use crate::measure::Measure;
use crate::observer::Observer;
use crate::predict::Predictions;
use manifests::{Diagnostic, EvalSpec, StageSpec, Target, WeightsFrom};
use pipeline_core::metrics::Score;
use pipeline_core::stages::predictions_output;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

/// One model measured: its metrics, its line in `metrics.jsonl`, and its predictions
/// when the stage writes them.
struct Measured {
    metrics: BTreeMap<String, f64>,
    line: serde_json::Value,
    predictions: Option<Predictions>,
}

impl Context<'_> {
    /// An `eval` stage: the loss (and accuracy, R²) and `metrics` of the model of the
    /// `train` stage it needs on a split of the data or on another file, and its
    /// predictions where `output` says. Of k-fold cross-validation (`sources` holds each
    /// fold's training), each fold's model on its own split: a line per fold in
    /// `metrics.jsonl`, the folds' mean as the metrics and their standard deviation
    /// beside, and the predictions of every fold, each naming its fold.
    pub(super) fn eval(
        &mut self,
        index: usize,
        spec: &EvalSpec,
        sources: &[usize],
        scratch: &Path,
        obs: &mut dyn Observer,
    ) -> Result<Produced, Diagnostic> {
        // Rank 0 alone validates, so it alone keeps best weights and evaluates them.
        if self.session.rank() != 0 && spec.from.value != WeightsFrom::Last {
            return Ok(Produced::metrics(BTreeMap::new(), Vec::new()));
        }
        let manifest = self.session.manifest;
        let folds: Vec<(usize, Option<u64>)> = sources
            .iter()
            .map(|&s| (s, super::fold_of(manifest, s)))
            .collect();
        let mut measured = Vec::with_capacity(folds.len());
        for &(source, fold) in &folds {
            self.use_fold(fold, obs)?;
            let mut one = self.measure_model(index, spec, source, fold, obs)?;
            if let Some(k) = fold {
                one.line["fold"] = json!(k);
            }
            append(&mut self.log, &one.line)?;
            measured.push((fold, one));
        }
        let (metrics, std) = match measured.as_slice() {
            [(None, one)] => (one.metrics.clone(), BTreeMap::new()),
            _ => over_folds(measured.iter().map(|(_, m)| &m.metrics)),
        };
        let mut store = Vec::new();
        // Rank 0 alone writes files.
        if let (Some(format), 0) = (spec.predictions, self.session.rank()) {
            let mut all = Predictions {
                values: Vec::new(),
                width: 0,
                rows: Vec::new(),
            };
            let mut of_fold = Vec::new();
            for (fold, one) in &mut measured {
                let Some(p) = one.predictions.take() else {
                    continue;
                };
                all.width = p.width;
                all.values.extend(p.values);
                of_fold.extend(std::iter::repeat_n(
                    fold.unwrap_or(0).to_string(),
                    p.rows.len(),
                ));
                all.rows.extend(p.rows);
            }
            let id = (folds.len() > 1).then(|| ("fold".to_string(), of_fold));
            let (written, _) =
                self.write_predictions(index, &spec.output, format, &all, id, scratch)?;
            store.push((predictions_output(format).to_string(), written));
        }
        let mut produced = Produced::metrics(metrics, store);
        produced.std = std;
        Ok(produced)
    }

    /// The model `from` of `train` stage `source` measured as `spec` says (of fold `fold`,
    /// whose split the data is).
    fn measure_model(
        &mut self,
        index: usize,
        spec: &EvalSpec,
        source: usize,
        fold: Option<u64>,
        obs: &mut dyn Observer,
    ) -> Result<Measured, Diagnostic> {
        let manifest = self.session.manifest;
        let stage = &manifest.stages[index];
        self.model_of(source, spec.from.value)?;
        // Another file, whole, or a split of the data.
        let other = match &spec.source {
            Some(file) => Some(self.other_data(file, spec.skip_rows, &spec.inputs, true, obs)?),
            None => None,
        };
        let (data, samples) = match &other {
            Some(other) => (other, other.splits.test.as_slice()),
            None => (
                &self.session.data,
                self.session.data.splits.get(spec.split.value),
            ),
        };
        let model = &self.trained[&(source, spec.from.value)].model;
        let session = &self.session;
        let collect = !spec.metrics.is_empty() || spec.output.is_some();
        let batch = spec.batch_size as i64;
        // The processes share the samples, each evaluating its part, unless rank
        // 0 alone holds the weights (kept best ones).
        let shared = session
            .group
            .as_ref()
            .filter(|g| g.world > 1 && spec.from.value == WeightsFrom::Last);
        let (numerics, objective) = (&session.numerics, &session.loss);
        let (scores, predicted) = match shared {
            Some(group) => evaluate_shared(
                model, numerics, objective, data, samples, batch, collect, group,
            ),
            None => evaluate(model, numerics, objective, data, samples, batch, collect),
        }
        .map_err(|e| {
            crate::numerics::nondeterministic(manifest, &e).unwrap_or_else(|| {
                torch_error(
                    "pipeline::eval::failed",
                    &format!("stage `{}`", stage.name()),
                    &e,
                )
                .label_opt(stage.name.span, "this evaluation")
            })
        })?;
        if scores.samples == 0 {
            return Err(Diagnostic::error(
                "pipeline::eval::empty_split",
                format!(
                    "stage `{}`: the `{}` split has no samples ({} in all)",
                    stage.name(),
                    spec.split.value.as_str(),
                    data.splits.train.len() + data.splits.val.len() + data.splits.test.len()
                ),
            )
            .label_opt(spec.split.span.or(stage.name.span), "evaluates on no sample")
            .help(format!(
                "give the `{}` split a larger fraction in `data` (`split … {}=0.2`), or evaluate on another split",
                spec.split.value.as_str(),
                spec.split.value.as_str()
            )));
        }
        if !scores.loss.is_finite() {
            let on = match &spec.source {
                Some(file) => file.value.display().to_string(),
                None => format!("the `{}` split", spec.split.value.as_str()),
            };
            return Err(Diagnostic::error(
                "pipeline::eval::not_finite",
                format!(
                    "stage `{}`: the loss on {on} is {}",
                    stage.name(),
                    scores.loss
                ),
            )
            .label_opt(stage.name.span, "this evaluation")
            .help(match weights_finite(model) {
                true => "the weights are finite and the outputs overflow: check the data for values far beyond the training's (`data.scale` brings the features to the training's range)",
                false => "the trained weights are not finite: lower `optimizer.lr` or check the data",
            }));
        }
        let mut metrics = BTreeMap::from([
            ("loss".to_string(), scores.loss),
            ("samples".to_string(), scores.samples as f64),
        ]);
        let mut line = json!({"record": "eval", "stage": stage.name(), "loss": scores.loss, "samples": scores.samples});
        match &spec.source {
            Some(file) => line["source"] = json!(file.value),
            None => line["split"] = json!(spec.split.value.as_str()),
        }
        if let Some(a) = scores.accuracy {
            metrics.insert("accuracy".into(), a);
            line["accuracy"] = json!(a);
        }
        if let Some(r2) = scores.r2 {
            metrics.insert("r2".into(), r2);
            line["r2"] = json!(r2);
        }
        if let Some(predicted) = &predicted {
            for (name, value) in self.measure(stage, spec, fold, data, predicted)? {
                line[&name] = json!(value);
                metrics.insert(name, value);
            }
        }
        if spec.from.value != WeightsFrom::Last {
            line["from"] = json!(spec.from.value);
        }
        let predictions = match (spec.predictions, &predicted) {
            (Some(_), Some(predicted)) => {
                Some(predicted.predictions(samples.iter().map(|&i| data.rows[i]).collect()))
            }
            _ => None,
        };
        if let (Some(_), Some(output)) = (&predictions, &spec.output) {
            line["output"] = json!(manifest.resolve(&output.value));
        }
        Ok(Measured {
            metrics,
            line,
            predictions,
        })
    }

    /// The eval stage's `metrics` on its split, from its predictions: scalars by name (a
    /// per-class metric as `NAME.CLASS`); a confusion matrix is written to the run
    /// directory instead.
    fn measure(
        &self,
        stage: &StageSpec,
        spec: &EvalSpec,
        fold: Option<u64>,
        data: &Dataset,
        predicted: &Predicted,
    ) -> Result<Vec<(String, f64)>, Diagnostic> {
        let manifest = self.session.manifest;
        let target = manifest.loss.kind.target();
        // Per-class values are named by the class, or for multi-label outputs the label.
        let names = match target {
            Target::Labels => Some(self.session.data.label_columns(false, predicted.width)),
            Target::Classes | Target::Values => data.classes.clone(),
        };
        let class_name = |j: usize| match &names {
            Some(names) => names.get(j).cloned().unwrap_or_else(|| j.to_string()),
            None => j.to_string(),
        };
        let mut values = Vec::new();
        for written in &spec.metrics {
            let metric = Measure::named(manifest, &written.value)?.ok_or_else(|| {
                Diagnostic::error(
                    "pipeline::eval::unknown_metric",
                    format!("`{}` is not a metric", written.value),
                )
                .label_opt(written.span, "not a metric")
            })?;
            let undefined = |why: String| {
                Diagnostic::error(
                    "pipeline::eval::undefined_metric",
                    format!(
                        "stage `{}`: `{}` is undefined on the `{}` split: {why}",
                        stage.name(),
                        written.value,
                        spec.split.value.as_str()
                    ),
                )
                .label_opt(written.span, "this metric")
            };
            match metric.compute(predicted, target).map_err(undefined)? {
                Score::One(x) => values.push((metric.name(), x)),
                Score::PerClass(xs) => values.extend(
                    xs.into_iter()
                        .enumerate()
                        .map(|(j, x)| (format!("{}.{}", metric.name(), class_name(j)), x)),
                ),
                Score::Matrix(rows) => {
                    let name = match fold {
                        Some(k) => manifests::fold_name(stage.name(), k),
                        None => stage.name().to_string(),
                    };
                    let path = self
                        .run_dir
                        .path
                        .join(format!("{name}-confusion-matrix.json"));
                    let classes: Vec<String> = (0..rows.len()).map(class_name).collect();
                    let mut text = json!({"stage": stage.name(), "split": spec.split.value.as_str(), "classes": classes, "rows": "true class", "columns": "predicted class", "matrix": rows});
                    if let Some(k) = fold {
                        text["fold"] = json!(k);
                    }
                    cache::write_atomic(&path, text.to_string().as_bytes())
                        .map_err(|e| write_failed(&path, e))?;
                }
            }
        }
        Ok(values)
    }
}

/// Whether every weight of `model` is a finite number.
fn weights_finite(model: &crate::model::Model) -> bool {
    model.vs.variables().values().all(|t| {
        t.f_isfinite()
            .and_then(|f| f.f_all())
            .is_ok_and(|all| all.int64_value(&[]) == 1)
    })
}

/// The mean of each metric over the folds (`samples`: their sum), and each one's standard
/// deviation (as numpy's `std`, over K).
fn over_folds<'m>(
    folds: impl Iterator<Item = &'m BTreeMap<String, f64>>,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let mut values: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for fold in folds {
        for (name, &v) in fold {
            values.entry(name).or_default().push(v);
        }
    }
    let (mut mean, mut std) = (BTreeMap::new(), BTreeMap::new());
    for (name, xs) in values {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        if name == "samples" {
            mean.insert(name.to_string(), xs.iter().sum());
            continue;
        }
        let var = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
        mean.insert(name.to_string(), m);
        std.insert(name.to_string(), var.sqrt());
    }
    (mean, std)
}
