//! Running an `eval` stage: the model measured on a split of the data or on another
//! file, its metrics from the predictions of the same forward pass, shared by the
//! processes under `ddp`.

use super::{append, write_failed, Context, Produced};
use crate::data::Dataset;
use crate::error::torch_error;
use crate::evaluate::{evaluate, evaluate_shared, Predicted};
use crate::measure::Measure;
use crate::observer::Observer;
use manifests::{Diagnostic, EvalSpec, StageSpec, Target, WeightsFrom};
use pipeline_core::metrics::Score;
use pipeline_core::stages::predictions_output;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

impl Context<'_> {
    /// An `eval` stage: the loss (and accuracy, R²) and `metrics` of the model of `train`
    /// stage `source` on a split of the data or on another file, and its predictions
    /// where `output` says.
    pub(super) fn eval(
        &mut self,
        index: usize,
        spec: &EvalSpec,
        source: Option<usize>,
        scratch: &Path,
        obs: &mut dyn Observer,
    ) -> Result<Produced, Diagnostic> {
        // Rank 0 alone validates, so it alone keeps best weights and evaluates them.
        if self.session.rank() != 0 && spec.from.value != WeightsFrom::Last {
            return Ok(Produced::metrics(BTreeMap::new(), Vec::new()));
        }
        let manifest = self.session.manifest;
        let stage = &manifest.stages[index];
        let source = source.expect("check ensures an eval stage needs a train stage");
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
            for (name, value) in self.measure(stage, spec, data, predicted)? {
                line[&name] = json!(value);
                metrics.insert(name, value);
            }
        }
        if spec.from.value != WeightsFrom::Last {
            line["from"] = json!(spec.from.value);
        }
        let mut store = Vec::new();
        // Rank 0 alone writes files.
        let writes = self.session.rank() == 0;
        if let (Some(format), Some(predicted), true) = (spec.predictions, &predicted, writes) {
            let predictions =
                predicted.predictions(samples.iter().map(|&i| data.rows[i]).collect());
            let (written, path) =
                self.write_predictions(index, &spec.output, format, &predictions, None, scratch)?;
            line["output"] = json!(path);
            store.push((predictions_output(format).to_string(), written));
        }
        append(&mut self.log, &line)?;
        Ok(Produced::metrics(metrics, store))
    }

    /// The eval stage's `metrics` on its split, from its predictions: scalars by name (a
    /// per-class metric as `NAME.CLASS`); a confusion matrix is written to the run
    /// directory instead.
    fn measure(
        &self,
        stage: &StageSpec,
        spec: &EvalSpec,
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
                    let path = self
                        .run_dir
                        .path
                        .join(format!("{}-confusion-matrix.json", stage.name()));
                    let classes: Vec<String> = (0..rows.len()).map(class_name).collect();
                    let text = json!({"stage": stage.name(), "split": spec.split.value.as_str(), "classes": classes, "rows": "true class", "columns": "predicted class", "matrix": rows});
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
