//! Validation during training: which values every validation gives, measuring them on
//! rank 0, and sharing them with the other processes so that every process decides the
//! same.

use super::failure;
use crate::evaluate::evaluate;
use crate::measure::Measure;
use crate::model::Model;
use crate::process_group::ProcessGroup;
use crate::session::Session;
use manifests::{Diagnostic, Manifest, SplitName, StageSpec, TrainSpec};
use pipeline_core::metrics::Score;
use std::collections::BTreeMap;
use tch::{Device, Tensor};

/// Measures the validation split as a `train` stage asks.
pub(super) struct Validator<'a> {
    session: &'a Session<'a>,
    stage: &'a StageSpec,
    spec: &'a TrainSpec,
    rank: usize,
    metrics: Vec<Measure>,
    /// What every validation gives, in order: under `ddp`, rank 0's values for all.
    pub keys: Vec<String>,
}

impl<'a> Validator<'a> {
    pub fn new(
        session: &'a Session<'a>,
        stage: &'a StageSpec,
        spec: &'a TrainSpec,
        rank: usize,
    ) -> Result<Self, Diagnostic> {
        let manifest = session.manifest;
        let metrics = validation_metrics(manifest, spec)?;
        let split = !session.data.splits.get(SplitName::Val).is_empty();
        let keys = validation_keys(manifest, &metrics, split);
        Ok(Validator {
            session,
            stage,
            spec,
            rank,
            metrics,
            keys,
        })
    }

    /// The training batches' loss and accuracy so far, with (on rank 0) the validation
    /// split's `val_loss`, `val_accuracy` and `val_METRIC`s.
    pub fn measure(
        &self,
        model: &Model,
        train_loss: f64,
        train_accuracy: Option<f64>,
    ) -> Result<BTreeMap<String, f64>, Diagnostic> {
        let (session, stage, spec) = (self.session, self.stage, self.spec);
        let (manifest, data) = (session.manifest, &session.data);
        let name = stage.name();
        let mut values = BTreeMap::from([("loss".to_string(), train_loss)]);
        if let Some(a) = train_accuracy {
            values.insert("accuracy".into(), a);
        }
        let samples = data.splits.get(SplitName::Val);
        if samples.is_empty() || self.rank != 0 {
            return Ok(values);
        }
        let collect = !self.metrics.is_empty();
        let (scores, predicted) = evaluate(
            model,
            &session.numerics,
            &session.loss,
            data,
            samples,
            1024,
            collect,
        )
        .map_err(|e| failure(manifest, name, "validation", e))?;
        values.insert("val_loss".into(), scores.loss);
        if let Some(a) = scores.accuracy {
            values.insert("val_accuracy".into(), a);
        }
        let Some(predicted) = predicted else {
            return Ok(values);
        };
        let target = manifest.loss.kind.target();
        for metric in &self.metrics {
            let undefined = |why: String| {
                Diagnostic::error(
                    "pipeline::train::undefined_metric",
                    format!(
                        "stage `{name}`: `{}` is undefined on the validation split: {why}",
                        metric.name()
                    ),
                )
                .label_opt(spec.validate.span.or(stage.name.span), "validated here")
            };
            match metric.compute(&predicted, target).map_err(undefined)? {
                Score::One(x) => values.insert(format!("val_{}", metric.name()), x),
                Score::PerClass(_) | Score::Matrix(_) => {
                    return Err(undefined("it gives more than one value".into()))
                }
            };
        }
        Ok(values)
    }
}

/// The metrics of every validation: those `validate` lists and those a monitor watches
/// on the validation split (besides its loss and accuracy, always measured), once each.
fn validation_metrics(manifest: &Manifest, spec: &TrainSpec) -> Result<Vec<Measure>, Diagnostic> {
    let watched = manifest
        .monitors(spec)
        .into_iter()
        .map(|(_, m)| &m.value)
        .filter(|m| m.validation && m.metric != "loss" && m.metric != "accuracy")
        .map(|m| m.metric.as_str());
    let mut names: Vec<&str> = spec
        .validate
        .metrics
        .iter()
        .map(|m| m.value.as_str())
        .collect();
    for name in watched {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    // `check` refuses names that are not metrics.
    let mut metrics = Vec::new();
    for name in names {
        metrics.extend(Measure::named(manifest, name)?);
    }
    Ok(metrics)
}

/// The names of the values of every validation (`Validation::values`), in order.
fn validation_keys(
    manifest: &Manifest,
    val_metrics: &[Measure],
    validation_split: bool,
) -> Vec<String> {
    // The losses whose predictions count as hits (`loss::correct`) have an accuracy.
    let accuracy = !manifest.loss.kind.is_regression();
    let mut keys = vec!["loss".to_string()];
    if accuracy {
        keys.push("accuracy".into());
    }
    if validation_split {
        keys.push("val_loss".into());
        if accuracy {
            keys.push("val_accuracy".into());
        }
        keys.extend(val_metrics.iter().map(|m| format!("val_{}", m.name())));
    }
    keys
}

/// Rank 0's `values` for every process of `group`: rank 0 alone validates, and within
/// an epoch each process has only its own share's training loss; every process then
/// decides the same (early stopping, the learning rate on a plateau).
pub(super) fn share(
    group: &ProcessGroup,
    keys: &[String],
    values: &mut BTreeMap<String, f64>,
) -> Result<(), tch::TchError> {
    let mine: Vec<f64> = keys
        .iter()
        .map(|k| values.get(k).copied().unwrap_or(f64::NAN))
        .collect();
    let mut t = [Tensor::f_from_slice(&mine)?.f_to_device(group.device)?];
    group.broadcast_all(&mut t, 0)?;
    let shared = Vec::<f64>::try_from(&t[0].f_to_device(Device::Cpu)?)?;
    values.extend(keys.iter().cloned().zip(shared));
    Ok(())
}
