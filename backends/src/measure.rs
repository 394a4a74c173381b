//! The metrics a stage measures, as a run computes them: a built-in one on the host
//! (`pipeline_core::metrics`), or one scripted in Python (`metric "brier" { torchscript
//! "brier.pt" }`), which libtorch runs on the CPU over the whole split's predictions.

use crate::evaluate::Predicted;
use crate::script::{load_compare, Compare, ScriptModule};
use manifests::{Diagnostic, Manifest, Target};
use pipeline_core::metrics::{self, Metric, Score};
use tch::{Device, Kind, Tensor};

/// A metric a stage measures.
pub enum Measure {
    Host(Box<dyn Metric>),
    Script { name: String, module: ScriptModule },
}

impl Measure {
    /// The metric `name` means in `manifest` (`check` has refused any other name): its
    /// scripted module loaded, or the built-in one.
    pub fn named(manifest: &Manifest, name: &str) -> Result<Option<Measure>, Diagnostic> {
        if let Some(spec) = manifest.scripted_metric(name) {
            let module = load_compare(&spec.script, Compare::Metric, Device::Cpu)?;
            return Ok(Some(Measure::Script {
                name: name.to_string(),
                module,
            }));
        }
        Ok(metrics::parse(name).map(Measure::Host))
    }

    pub fn name(&self) -> String {
        match self {
            Measure::Host(metric) => metric.name(),
            Measure::Script { name, .. } => name.clone(),
        }
    }

    /// Its value on `predicted`, the predictions of a model trained with a loss of
    /// `target` (`Err` when it is undefined there, saying why).
    pub fn compute(&self, predicted: &Predicted, target: Target) -> Result<Score, String> {
        match self {
            Measure::Host(metric) => metric.compute(&predicted.as_predictions(target)),
            Measure::Script { module, .. } => scripted(module, predicted, target),
        }
    }
}

/// A scripted metric's `forward(output, target)` on the predictions: samples × outputs
/// in float64 (as the built-in metrics read them), and the class indices (int64) or the
/// targets (float64, the outputs' shape).
fn scripted(module: &ScriptModule, predicted: &Predicted, target: Target) -> Result<Score, String> {
    let run = || -> Result<Tensor, tch::TchError> {
        let width = predicted.width as i64;
        let samples = (predicted.outputs.len() as i64)
            .checked_div(width)
            .unwrap_or(0);
        let output = Tensor::f_from_slice(&predicted.outputs)?.f_reshape([samples, width])?;
        let truth = match target {
            Target::Classes => Tensor::f_from_slice(&predicted.classes)?,
            Target::Labels | Target::Values => {
                Tensor::f_from_slice(&predicted.targets)?.f_reshape([samples, width])?
            }
        };
        tch::no_grad(|| module.forward(&[output, truth], false))
    };
    let value = run().map_err(|e| crate::error::short_message(&e))?;
    if value.numel() != 1 {
        return Err(format!(
            "its module returned {} numbers, not one: reduce them over the split (`.mean()`)",
            value.numel()
        ));
    }
    value
        .f_to_kind(Kind::Double)
        .and_then(|v| v.f_double_value(&[]))
        .map(Score::One)
        .map_err(|e| crate::error::short_message(&e))
}
