//! The training objective, with its weights resolved against the data (`class-weights
//! "balanced"` is counted on the training split), and the accuracy metric.

use crate::data::{index_tensor, Dataset};
use manifests::{ClassWeights, Diagnostic, LossKind, LossSpec, SplitName};
use tch::{Device, Kind, Reduction, TchError, Tensor};

/// The loss of a run: the manifest's, with its weight tensors on the device.
#[derive(Debug)]
pub struct Loss {
    pub spec: LossSpec,
    /// One weight per class (cross-entropy, NLL).
    class_weights: Option<Tensor>,
    /// The weight of positive targets, one or one per output (binary cross-entropy).
    pos_weight: Option<Tensor>,
}

impl Loss {
    /// The loss for a model of `outputs` outputs on `data`: the weights checked against
    /// them (their count, and for `balanced`, that every class has a training sample).
    pub fn new(
        spec: &LossSpec,
        data: &Dataset,
        outputs: i64,
        device: Device,
    ) -> Result<Loss, Diagnostic> {
        let tensor = |w: &[f64]| Tensor::from_slice(w).to_kind(Kind::Float).to_device(device);
        let class_weights = match &spec.class_weights {
            None => None,
            Some(written) => {
                let weights = match &written.value {
                    ClassWeights::Given(w) => w.clone(),
                    ClassWeights::Balanced => balanced(data, outputs as usize)
                        .map_err(|why| bad_weights(spec, why, "class-weights"))?,
                };
                if weights.len() as i64 != outputs {
                    return Err(bad_weights(
                        spec,
                        format!(
                            "`class-weights` gives {} weights, but the model has {outputs} classes",
                            weights.len()
                        ),
                        "class-weights",
                    ));
                }
                Some(tensor(&weights))
            }
        };
        let pos_weight = match &spec.pos_weight {
            Some(w) if w.value.len() != 1 && w.value.len() as i64 != outputs => {
                return Err(bad_weights(
                    spec,
                    format!(
                        "`pos-weight` gives {} weights, but the model has {outputs} outputs",
                        w.value.len()
                    ),
                    "pos-weight",
                ))
            }
            Some(w) => Some(tensor(&w.value)),
            None => None,
        };
        Ok(Loss {
            spec: spec.clone(),
            class_weights,
            pos_weight,
        })
    }

    pub fn kind(&self) -> LossKind {
        self.spec.kind
    }

    /// The mean loss of a batch (for class weights, PyTorch's weighted mean).
    pub fn compute(&self, output: &Tensor, target: &Tensor) -> Result<Tensor, TchError> {
        match self.spec.kind {
            LossKind::CrossEntropy => output.f_cross_entropy_loss(
                target,
                self.class_weights.as_ref(),
                Reduction::Mean,
                -100,
                self.spec.label_smoothing,
            ),
            LossKind::Nll => {
                output.f_nll_loss(target, self.class_weights.as_ref(), Reduction::Mean, -100)
            }
            LossKind::Mse => output.f_mse_loss(target, Reduction::Mean),
            LossKind::L1 => output.f_l1_loss(target, Reduction::Mean),
            LossKind::Huber => {
                output.f_huber_loss(target, Reduction::Mean, self.spec.delta.unwrap_or(1.0))
            }
            LossKind::BceWithLogits => output.f_binary_cross_entropy_with_logits(
                target,
                None::<&Tensor>,
                self.pos_weight.as_ref(),
                Reduction::Mean,
            ),
        }
    }
}

impl Loss {
    /// A batch's loss summed over its samples, and their total weight (the batch size,
    /// or with class weights the sum of their classes' weights), in float64: summed over
    /// batches, their ratio is the mean over all of them, as one batch would give it.
    pub fn summed(&self, output: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor), TchError> {
        let mean = self.compute(output, target)?.f_to_kind(Kind::Double)?;
        match &self.class_weights {
            Some(w) => {
                let weight = w.f_index_select(0, target)?.f_sum(Kind::Double)?;
                Ok((mean.f_mul(&weight)?, weight))
            }
            // Made on the device: no copy from the host per batch.
            None => {
                let samples = target.size()[0] as f64;
                Ok((
                    mean.f_mul_scalar(samples)?,
                    mean.f_ones_like()?.f_mul_scalar(samples)?,
                ))
            }
        }
    }
}

/// scikit-learn's `compute_class_weight("balanced")` over the training split: samples /
/// (classes × the class's samples).
fn balanced(data: &Dataset, classes: usize) -> Result<Vec<f64>, String> {
    let train = data.splits.get(SplitName::Train);
    let labels = data
        .labels
        .index_select(0, &index_tensor(train).to_device(data.labels.device()))
        .to_device(Device::Cpu);
    let labels = Vec::<i64>::try_from(&labels).map_err(|e| e.to_string())?;
    let mut counts = vec![0u64; classes];
    for l in labels {
        if let Some(c) = usize::try_from(l).ok().and_then(|l| counts.get_mut(l)) {
            *c += 1;
        }
    }
    if let Some(empty) = counts.iter().position(|&c| c == 0) {
        let name = match &data.classes {
            Some(names) => format!("`{}`", names.get(empty).map_or("?", String::as_str)),
            None => empty.to_string(),
        };
        return Err(format!(
            "`class-weights \"balanced\"`: class {name} has no sample in the training split, so it has no weight"
        ));
    }
    let n = train.len() as f64;
    Ok(counts
        .iter()
        .map(|&c| n / (classes as f64 * c as f64))
        .collect())
}

fn bad_weights(spec: &LossSpec, message: String, key: &str) -> Diagnostic {
    let span = match key {
        "class-weights" => spec.class_weights.as_ref().and_then(|w| w.span),
        _ => spec.pos_weight.as_ref().and_then(|w| w.span),
    };
    Diagnostic::error("pipeline::loss::bad_weights", message)
        .label_opt(span.or(spec.span), "these weights")
        .help("give one weight per class (per output for `pos-weight`), in index order")
}

/// The number of correct predictions in a batch (a 0-d tensor, not read back to the
/// host), and how many predictions were made; `None` for regression losses.
pub fn correct(
    kind: LossKind,
    output: &Tensor,
    target: &Tensor,
) -> Result<Option<(Tensor, i64)>, TchError> {
    Ok(match kind {
        LossKind::CrossEntropy | LossKind::Nll => {
            let hits = output
                .f_argmax(-1, false)?
                .f_eq_tensor(target)?
                .f_sum(Kind::Int64)?;
            Some((hits, target.size()[0]))
        }
        LossKind::BceWithLogits => {
            let hits = output
                .f_gt(0.0)?
                .f_eq_tensor(&target.f_gt(0.5)?)?
                .f_sum(Kind::Int64)?;
            Some((hits, target.numel() as i64))
        }
        LossKind::Mse | LossKind::L1 | LossKind::Huber => None,
    })
}
