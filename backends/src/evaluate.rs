//! Measuring a model: mean loss and, for classification, accuracy over a split; for
//! regression, R² (scikit-learn's `r2_score`: per target, then averaged). When metrics
//! are asked for, the same forward pass also brings the predictions to the host.

use crate::data::{Dataset, Loader};
use crate::loss::{self, Loss};
use crate::model::Model;
use crate::numerics::Numerics;
use manifests::LossKind;
use pipeline_core::metrics::Predictions;
use tch::{Kind, TchError, Tensor};

/// Loss and accuracy over some samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    pub loss: f64,
    pub accuracy: Option<f64>,
    /// Regression: 1 − Σ(y − ŷ)² / Σ(y − ȳ)² per target, averaged over the targets.
    pub r2: Option<f64>,
    pub samples: i64,
}

/// Evaluates `model` on the samples `samples` in batches (assembled ahead by the data's
/// workers), without gradients, in eval mode, under autocast for mixed precisions. The
/// sums stay on the device until the end: one host sync per call, unless `collect` asks
/// for the predictions too (for metrics), which come to the host batch by batch.
pub fn evaluate(
    model: &Model,
    numerics: &Numerics,
    objective: &Loss,
    data: &Dataset,
    samples: &[usize],
    batch_size: i64,
    collect: bool,
) -> Result<(Scores, Option<Predicted>), TchError> {
    let kind = objective.kind();
    let classification = kind.is_classification();
    let n = samples.len() as i64;
    std::thread::scope(|scope| {
        tch::no_grad(|| {
            let batch = batch_size.max(1) as usize;
            let batches = 0..samples.len().div_ceil(batch);
            let mut loader = Loader::start(scope, data, samples, batch, batches, None)?;
            let device = data.labels.device();
            // The loss summed over the samples, and their total weight: with class
            // weights, PyTorch's weighted mean over the whole split.
            let mut loss_sum = Tensor::zeros([], (Kind::Double, device));
            let mut weight_sum = Tensor::zeros([], (Kind::Double, device));
            let mut hits_sum = Tensor::zeros([], (Kind::Int64, device));
            let mut counted = 0i64;
            // Regression: per target, Σ(y − ŷ)², Σ(y − c) and Σ(y − c)² in f64, shifted by the
            // first batch's mean c (so that a large mean does not swamp the spread).
            let regression = kind.is_regression() && data.labels.dim() == 2;
            let width = if regression { data.labels.size()[1] } else { 0 };
            let mut shift: Option<Tensor> = None;
            let zeros = || Tensor::f_zeros([width], (Kind::Double, device));
            let (mut residual, mut sum, mut squares) = (zeros()?, zeros()?, zeros()?);
            let mut predicted = collect.then(|| Predicted {
                outputs: Vec::new(),
                width: 0,
                classes: Vec::new(),
                targets: Vec::new(),
            });
            let mut start = 0;
            while start < n {
                let len = batch_size.min(n - start);
                let (xb, yb) = loader.next_batch()?;
                let (out, (batch_loss, batch_weight)) = numerics.autocast(|| {
                    let out = model.forward(&xb, false)?;
                    let summed = objective.summed(&out, &yb)?;
                    Ok((out, summed))
                })?;
                let _ = loss_sum.f_add_(&batch_loss)?;
                let _ = weight_sum.f_add_(&batch_weight)?;
                if let Some(predicted) = &mut predicted {
                    predicted.push(&out, &yb, classification, kind)?;
                }
                if let Some((hits, count)) = loss::correct(kind, &out, &yb)? {
                    let _ = hits_sum.f_add_(&hits)?;
                    counted += count;
                }
                if regression {
                    let (y, p) = (yb.f_to_kind(Kind::Double)?, out.f_to_kind(Kind::Double)?);
                    if y.size() != p.size() {
                        return Err(TchError::Shape(format!(
                            "the model's outputs {:?} do not match the targets {:?}",
                            p.size(),
                            y.size()
                        )));
                    }
                    let sum0 = |t: &Tensor| t.f_sum_dim_intlist(0, false, Kind::Double);
                    let c = match &shift {
                        Some(c) => c.shallow_clone(),
                        None => shift
                            .insert(y.f_mean_dim(0, false, Kind::Double)?)
                            .shallow_clone(),
                    };
                    let centred = y.f_sub(&c)?;
                    let _ = residual.f_add_(&sum0(&(&y - &p).f_square()?)?)?;
                    let _ = sum.f_add_(&sum0(&centred)?)?;
                    let _ = squares.f_add_(&sum0(&centred.f_square()?)?)?;
                }
                start += len;
            }
            let loss = if n > 0 {
                loss_sum.f_double_value(&[])? / weight_sum.f_double_value(&[])?
            } else {
                f64::NAN
            };
            let accuracy = (counted > 0)
                .then(|| hits_sum.f_int64_value(&[]))
                .transpose()?
                .map(|h| h as f64 / counted as f64);
            let r2 = if regression && n > 1 {
                let residual = Vec::<f64>::try_from(&residual)?;
                let (sum, squares) = (Vec::<f64>::try_from(&sum)?, Vec::<f64>::try_from(&squares)?);
                Some(r2_score(&residual, &sum, &squares, n as f64))
            } else {
                None
            };
            let scores = Scores {
                loss,
                accuracy,
                r2,
                samples: n,
            };
            Ok((scores, predicted))
        })
    })
}

/// R² from per-target sums over `n` samples (of the targets less any constant, and of
/// their squares), as scikit-learn's `r2_score` computes it
/// (`multioutput="uniform_average"`): a constant target scores 1 when predicted
/// exactly, else 0.
pub fn r2_score(residual: &[f64], sum: &[f64], squares: &[f64], n: f64) -> f64 {
    let per_target = residual
        .iter()
        .zip(sum)
        .zip(squares)
        .map(|((&res, &s), &sq)| {
            let total = (sq - s * s / n).max(0.0);
            if total > 0.0 {
                1.0 - res / total
            } else if res == 0.0 {
                1.0
            } else {
                0.0
            }
        });
    per_target.sum::<f64>() / residual.len().max(1) as f64
}

/// What a model predicted for some samples, in their order, on the host: for
/// classification, the class probabilities (the softmax of the logits; for `nll`, of its
/// log-probabilities) and the class indices; else the outputs and the targets. For
/// `pipeline_core::metrics`.
pub struct Predicted {
    /// Samples × `width`, float64.
    pub outputs: Vec<f64>,
    pub width: usize,
    /// Classification: one class index per sample.
    pub classes: Vec<i64>,
    /// Regression: samples × `width` targets.
    pub targets: Vec<f64>,
}

impl Predicted {
    /// Adds a batch: the model's outputs `out` and the labels or targets `yb`.
    fn push(
        &mut self,
        out: &Tensor,
        yb: &Tensor,
        classification: bool,
        kind: LossKind,
    ) -> Result<(), TchError> {
        let out = out.f_to_kind(Kind::Double)?.f_flatten(1, -1)?;
        let out = match (classification, kind) {
            (true, LossKind::Nll) => out.f_exp()?,
            (true, _) => out.f_softmax(1, Kind::Double)?,
            (false, _) => out,
        };
        self.width = out.size()[1] as usize;
        let host = |t: &Tensor| t.f_to_device(tch::Device::Cpu)?.f_flatten(0, -1);
        self.outputs.extend(Vec::<f64>::try_from(&host(&out)?)?);
        match classification {
            true => self.classes.extend(Vec::<i64>::try_from(&host(yb)?)?),
            false => self
                .targets
                .extend(Vec::<f64>::try_from(&host(&yb.f_to_kind(Kind::Double)?)?)?),
        }
        Ok(())
    }

    /// The predictions as the metrics read them.
    pub fn as_predictions(&self, classification: bool) -> Predictions<'_> {
        match classification {
            true => Predictions::Classes {
                probabilities: &self.outputs,
                labels: &self.classes,
                classes: self.width,
            },
            false => Predictions::Values {
                outputs: &self.outputs,
                targets: &self.targets,
                width: self.width,
            },
        }
    }
}
