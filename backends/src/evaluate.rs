//! Measuring a model: mean loss and, for classification, accuracy over a split; for
//! regression, R² (scikit-learn's `r2_score`: per target, then averaged). When metrics
//! are asked for, the same forward pass also brings the predictions to the host.

use crate::data::{Dataset, Loader};
use crate::loss::{self, Loss};
use crate::model::Model;
use crate::numerics::Numerics;
use crate::process_group::ProcessGroup;
use manifests::Target;
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
    /// What the loss and accuracy are made of, which processes add up.
    pub sums: Sums,
}

/// The sums behind [`Scores`]: the loss summed over the samples and their total weight
/// (the loss is their ratio, PyTorch's weighted mean), and the samples predicted right
/// of those counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sums {
    pub loss: f64,
    pub weight: f64,
    pub hits: i64,
    pub counted: i64,
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
    let target = objective.target();
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
            let regression = target == Target::Values && data.labels.dim() == 2;
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
                    predicted.push(&out, &yb, data, objective)?;
                }
                if let Some((hits, count)) = loss::correct(target, &out, &yb)? {
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
            let sums = Sums {
                loss: loss_sum.f_double_value(&[])?,
                weight: weight_sum.f_double_value(&[])?,
                hits: hits_sum.f_int64_value(&[])?,
                counted,
            };
            let loss = if n > 0 {
                sums.loss / sums.weight
            } else {
                f64::NAN
            };
            let accuracy = (counted > 0).then(|| sums.hits as f64 / counted as f64);
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
                sums,
            };
            Ok((scores, predicted))
        })
    })
}

/// [`evaluate`] over `samples` shared by the processes of `group`: each evaluates its
/// contiguous share (rank r the r-th of `world` nearly equal parts), then the loss sums
/// and counts are summed over the group and the predictions gathered, so that every
/// process returns the scores of all the samples, and (`collect`) their predictions in
/// their order. R² then comes from the gathered predictions.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_shared(
    model: &Model,
    numerics: &Numerics,
    objective: &Loss,
    data: &Dataset,
    samples: &[usize],
    batch_size: i64,
    collect: bool,
    group: &ProcessGroup,
) -> Result<(Scores, Option<Predicted>), TchError> {
    let n = samples.len();
    let share = |rank: usize| n * rank / group.world;
    let (lo, hi) = (share(group.rank), share(group.rank + 1));
    let (mine, predicted) = evaluate(
        model,
        numerics,
        objective,
        data,
        &samples[lo..hi],
        batch_size,
        true,
    )?;
    let predicted = predicted.expect("asked for");
    let mut sums = Tensor::from_slice(&[
        mine.sums.loss,
        mine.sums.weight,
        mine.sums.hits as f64,
        mine.sums.counted as f64,
    ])
    .f_to_device(group.device)?;
    group.all_reduce_sum(std::slice::from_mut(&mut sums))?;
    let sums = Vec::<f64>::try_from(&sums.f_to_device(tch::Device::Cpu)?)?;
    let target = objective.target();
    let counts: Vec<usize> = (0..group.world).map(|r| share(r + 1) - share(r)).collect();
    let all = match n {
        0 => predicted,
        _ => predicted.gather(group, &counts, target == Target::Classes)?,
    };
    let regression = target == Target::Values && data.labels.dim() == 2;
    let r2 = (regression && n > 1).then(|| {
        let r2 = pipeline_core::metrics::parse("r2").expect("a metric");
        match r2.compute(&all.as_predictions(target)) {
            Ok(pipeline_core::metrics::Score::One(x)) => x,
            _ => f64::NAN,
        }
    });
    let (hits, counted) = (sums[2] as i64, sums[3] as i64);
    let scores = Scores {
        loss: if n > 0 { sums[0] / sums[1] } else { f64::NAN },
        accuracy: (counted > 0).then(|| hits as f64 / counted as f64),
        r2,
        samples: n as i64,
        sums: Sums {
            loss: sums[0],
            weight: sums[1],
            hits,
            counted,
        },
    };
    Ok((scores, collect.then_some(all)))
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
/// log-probabilities) and the class indices; for `bce-with-logits` each label's
/// probability (the sigmoid) and the 0/1 targets; else the outputs and the targets. For
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
    /// Adds a batch of `data`: the model's outputs `out` and the labels or targets `yb`
    /// (a regression's both in the labels' units).
    fn push(
        &mut self,
        out: &Tensor,
        yb: &Tensor,
        data: &Dataset,
        objective: &Loss,
    ) -> Result<(), TchError> {
        // Probabilities (of the classes, of each label), or the regression's outputs.
        let mut out = objective.scores(out)?;
        self.width = out.size()[1] as usize;
        let host = |t: &Tensor| t.f_to_device(tch::Device::Cpu)?.f_flatten(0, -1);
        let targets = match objective.target() {
            Target::Classes => {
                self.classes.extend(Vec::<i64>::try_from(&host(yb)?)?);
                None
            }
            Target::Labels => Some(yb.shallow_clone()),
            Target::Values => {
                out = data.in_label_units(&out)?;
                Some(data.in_label_units(yb)?)
            }
        };
        self.outputs.extend(Vec::<f64>::try_from(&host(&out)?)?);
        if let Some(targets) = targets {
            let targets = host(&targets.f_to_kind(Kind::Double)?)?;
            self.targets.extend(Vec::<f64>::try_from(&targets)?);
        }
        Ok(())
    }

    /// Every process's predictions in `group`, in rank order (rank r's are `counts[r]`
    /// samples): padded to the largest share, gathered, and cut back. A sample travels as
    /// one row of float64: its outputs, then its class index or its targets.
    fn gather(
        &self,
        group: &ProcessGroup,
        counts: &[usize],
        classification: bool,
    ) -> Result<Predicted, TchError> {
        // A process with no sample has seen no output.
        let width = group
            .gather_values(self.width as f64)?
            .into_iter()
            .fold(0.0, f64::max) as usize;
        let columns = width + if classification { 1 } else { width };
        let most = counts.iter().copied().max().unwrap_or(0);
        let mut rows = vec![0.0; most * columns];
        for (i, row) in rows
            .chunks_mut(columns)
            .take(counts[group.rank])
            .enumerate()
        {
            row[..width].copy_from_slice(&self.outputs[i * width..(i + 1) * width]);
            match classification {
                true => row[width] = self.classes[i] as f64,
                false => row[width..].copy_from_slice(&self.targets[i * width..(i + 1) * width]),
            }
        }
        let mut mine = Tensor::from_slice(&rows)
            .f_reshape([most as i64, columns as i64])?
            .f_to_device(group.device)?;
        let mut all: Vec<Tensor> = (0..group.world).map(|_| mine.zeros_like()).collect();
        group.all_gather(&mut mine, &mut all)?;
        let mut gathered = Predicted {
            outputs: Vec::new(),
            width,
            classes: Vec::new(),
            targets: Vec::new(),
        };
        for (values, &count) in all.iter().zip(counts) {
            let values =
                Vec::<f64>::try_from(&values.f_to_device(tch::Device::Cpu)?.f_flatten(0, -1)?)?;
            for row in values.chunks(columns).take(count) {
                gathered.outputs.extend_from_slice(&row[..width]);
                match classification {
                    true => gathered.classes.push(row[width] as i64),
                    false => gathered.targets.extend_from_slice(&row[width..]),
                }
            }
        }
        Ok(gathered)
    }

    /// The predictions as a `predict` stage writes them, for samples at data `rows`.
    pub fn predictions(&self, rows: Vec<usize>) -> crate::predict::Predictions {
        crate::predict::Predictions {
            values: self.outputs.clone(),
            width: self.width,
            rows,
        }
    }

    /// The predictions as the metrics read them, for a model trained with a loss of
    /// `target`.
    pub fn as_predictions(&self, target: Target) -> Predictions<'_> {
        match target {
            Target::Classes => Predictions::Classes {
                probabilities: &self.outputs,
                labels: &self.classes,
                classes: self.width,
            },
            Target::Labels => Predictions::Labels {
                probabilities: &self.outputs,
                truth: &self.targets,
                labels: self.width,
            },
            Target::Values => Predictions::Values {
                outputs: &self.outputs,
                targets: &self.targets,
                width: self.width,
            },
        }
    }
}
