//! Applying a trained model to samples and writing what it predicts, one row per sample
//! (a `predict` stage): for classification the predicted class and every class's
//! probability, for `bce-with-logits` each output's 0/1 and probability, for a regression
//! the outputs. As a CSV table with a header, or as one float64 `.npy` array.

use crate::data::{Dataset, Loader};
use crate::loss::Loss;
use crate::model::Model;
use crate::numerics::Numerics;
use manifests::{Diagnostic, PredictionFormat, Target};
use std::path::Path;
use tch::{TchError, Tensor};

/// What a model predicted for some samples, in their order, on the host.
pub struct Predictions {
    /// Samples × `width`, float64: the class probabilities (the softmax of the logits; for
    /// `nll`, the exponential of its log-probabilities), each output's probability (the
    /// sigmoid) for `bce-with-logits`, or the outputs.
    pub values: Vec<f64>,
    pub width: usize,
    /// Each sample's 0-based data row in its file.
    pub rows: Vec<usize>,
}

/// Runs `model` over the samples `samples` of `data` in batches, without gradients, in
/// eval mode, under the precision's autocast.
pub fn predict(
    model: &Model,
    numerics: &Numerics,
    loss: &Loss,
    data: &Dataset,
    samples: &[usize],
    batch_size: i64,
) -> Result<Predictions, TchError> {
    let batch = batch_size.max(1) as usize;
    std::thread::scope(|scope| {
        tch::no_grad(|| {
            let batches = 0..samples.len().div_ceil(batch);
            let count = batches.len();
            let mut loader = Loader::start(scope, data, samples, batch, batches, None)?;
            let mut predictions = Predictions {
                values: Vec::with_capacity(samples.len()),
                width: 0,
                rows: samples.iter().map(|&i| data.rows[i]).collect(),
            };
            for _ in 0..count {
                let (xb, _) = loader.next_batch()?;
                let out = numerics.autocast(|| model.forward(&xb, false))?;
                let mut out = loss.scores(&out)?;
                if loss.target() == Target::Values {
                    out = data.in_label_units(&out)?;
                }
                predictions.width = out.size()[1] as usize;
                let host = out.f_to_device(tch::Device::Cpu)?.f_flatten(0, -1)?;
                predictions.values.extend(Vec::<f64>::try_from(&host)?);
            }
            Ok(predictions)
        })
    })
}

/// What the columns of the predictions table are called: the label columns (one per
/// output for `bce-with-logits` and regressions) and the class names.
pub struct Names {
    pub labels: Vec<String>,
    /// Classification: class `k`'s name (its index when the labels were numbers).
    pub classes: Vec<String>,
    /// A `predict` stage's `id`: the column's name and each sample's cell, in the
    /// predictions' order, written after `row`.
    pub id: Option<(String, Vec<String>)>,
}

/// Writes `predictions` to `path` (atomically) as `format` says.
pub fn write(
    path: &Path,
    format: PredictionFormat,
    target: Target,
    predictions: &Predictions,
    names: &Names,
) -> Result<(), Diagnostic> {
    let failed = |e: String| {
        Diagnostic::error(
            "pipeline::run::write_failed",
            format!("cannot write {}: {e}", path.display()),
        )
        .help("check that the directory is writable and the disk is not full")
    };
    match format {
        PredictionFormat::Npy => {
            let n = predictions.rows.len() as i64;
            let array =
                Tensor::from_slice(&predictions.values).reshape([n, predictions.width as i64]);
            cache::write_atomic_with(path, |tmp| {
                array
                    .write_npy(tmp)
                    .map_err(|e| std::io::Error::other(crate::error::short_message(&e)))
            })
            .map_err(|e| failed(e.to_string()))
        }
        PredictionFormat::Csv => {
            let table = table(target, predictions, names);
            cache::write_atomic_with(path, |tmp| {
                let mut out = csv::Writer::from_path(tmp)?;
                for record in table {
                    out.write_record(&record)?;
                }
                out.flush()?;
                Ok::<(), csv::Error>(())
            })
            .map_err(|e| failed(e.to_string()))
        }
    }
}

/// A value as Python's `repr` writes it: the shortest text that reads back the same,
/// with an exponent when very small or large.
fn number(v: &f64) -> String {
    format!("{v:?}")
}

/// The predictions table, its header first.
fn table(target: Target, predictions: &Predictions, names: &Names) -> Vec<Vec<String>> {
    let width = predictions.width.max(1);
    let rows = predictions.values.chunks(width).zip(&predictions.rows);
    let mut header = vec!["row".to_string()];
    let mut table = Vec::with_capacity(predictions.rows.len() + 1);
    if let Some((name, _)) = &names.id {
        header.push(name.clone());
    }
    match target {
        Target::Classes => {
            let label = names.labels.first().map_or("class", String::as_str);
            header.push(label.to_string());
            header.extend(names.classes.iter().map(|c| format!("prob_{c}")));
            table.push(header);
            for (values, row) in rows {
                // The first of equal largest probabilities, as `argmax` takes it.
                let best =
                    values
                        .iter()
                        .enumerate()
                        .fold(0, |best, (k, &v)| if v > values[best] { k } else { best });
                let mut record = vec![row.to_string(), names.classes[best].clone()];
                record.extend(values.iter().map(number));
                table.push(record);
            }
        }
        Target::Labels => {
            header.extend(names.labels.iter().cloned());
            header.extend(names.labels.iter().map(|l| format!("prob_{l}")));
            table.push(header);
            for (values, row) in rows {
                let mut record = vec![row.to_string()];
                record.extend(values.iter().map(|&p| u8::from(p > 0.5).to_string()));
                record.extend(values.iter().map(number));
                table.push(record);
            }
        }
        Target::Values => {
            header.extend(names.labels.iter().cloned());
            table.push(header);
            for (values, row) in rows {
                let mut record = vec![row.to_string()];
                record.extend(values.iter().map(number));
                table.push(record);
            }
        }
    }
    // The id after `row`, in every record (the header has it already).
    if let Some((_, ids)) = &names.id {
        for (record, id) in table.iter_mut().skip(1).zip(ids) {
            record.insert(1, id.clone());
        }
    }
    table
}
