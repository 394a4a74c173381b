//! Measuring a model: mean loss and, for classification, accuracy over a split.

use crate::data::Dataset;
use crate::loss;
use crate::model::Model;
use crate::numerics::Numerics;
use manifests::LossSpec;
use tch::{Kind, TchError, Tensor};

/// Loss and accuracy over some samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scores {
    pub loss: f64,
    pub accuracy: Option<f64>,
    pub samples: i64,
}

/// Evaluates `model` on the samples at `indices` in batches, without gradients, in eval
/// mode, under autocast for mixed precisions. The sums stay on the device until the end:
/// one host sync per call.
pub fn evaluate(
    model: &Model,
    numerics: &Numerics,
    spec: &LossSpec,
    data: &Dataset,
    indices: &Tensor,
    batch_size: i64,
) -> Result<Scores, TchError> {
    let n = indices.size()[0];
    tch::no_grad(|| {
        let device = indices.device();
        let mut loss_sum = Tensor::zeros([], (Kind::Double, device));
        let mut hits_sum = Tensor::zeros([], (Kind::Int64, device));
        let mut counted = 0i64;
        let mut start = 0;
        while start < n {
            let len = batch_size.min(n - start);
            let (xb, yb) = data.batch(&indices.f_narrow(0, start, len)?)?;
            let (out, loss) = numerics.autocast(|| {
                let out = model.forward(&xb, false)?;
                let loss = loss::compute(spec, &out, &yb)?;
                Ok((out, loss))
            })?;
            let _ = loss_sum.f_add_(&loss.f_mul_scalar(len)?)?;
            if let Some((hits, count)) = loss::correct(spec.kind, &out, &yb)? {
                let _ = hits_sum.f_add_(&hits)?;
                counted += count;
            }
            start += len;
        }
        let loss = if n > 0 {
            loss_sum.f_double_value(&[])? / n as f64
        } else {
            f64::NAN
        };
        let accuracy = (counted > 0)
            .then(|| hits_sum.f_int64_value(&[]))
            .transpose()?
            .map(|h| h as f64 / counted as f64);
        Ok(Scores {
            loss,
            accuracy,
            samples: n,
        })
    })
}
