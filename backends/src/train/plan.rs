//! How a `train` stage is laid out before its first step: batches per epoch, the
//! optimizer (sharded under `zero1`), and how the samples are dealt to the processes.

use crate::accelerator::Strategy;
use crate::data::Dataset;
use crate::model::Model;
use crate::optimizer::Optimizer;
use crate::process_group::ProcessGroup;
use manifests::{AcceleratorSpec, Diagnostic, Layer, Manifest, StageSpec, TrainSpec};
use pipeline_core::sampler::{batches_per_epoch, Sampler};
use tch::{Kind, Tensor};

/// The batch size and the number of batches per epoch for `n` samples per process; an
/// error when there would be no batch, or a batch of one sample for batch-norm.
pub(super) fn batch_plan(
    manifest: &Manifest,
    stage: &StageSpec,
    spec: &TrainSpec,
    n: u64,
) -> Result<(u64, u64), Diagnostic> {
    let name = stage.name();
    let (batch, batches) = batches_per_epoch(n, spec.batch_size, spec.drop_last);
    if batches == 0 {
        return Err(Diagnostic::error(
            "pipeline::train::no_steps",
            // A batch is at most the samples there are: only an empty share has none.
            format!("stage `{name}`: the training split has no sample to train on"),
        )
        .label_opt(stage.name.span, "trains on no batch")
        .help("give the training split a larger fraction of the data (`split train=0.8 …`), or give the data more samples"));
    }
    let layers = manifest.model.layers();
    let batch_norm = layers
        .iter()
        .find(|l| matches!(l.layer, Layer::BatchNorm(_)));
    if let Some(bn) = batch_norm {
        if batch == 1 || (!spec.drop_last && n % batch == 1) {
            // libtorch would compute a variance from one sample: NaN running statistics.
            return Err(Diagnostic::error(
                "pipeline::train::batch_of_one",
                format!("stage `{name}`: a training batch would hold one sample ({n} samples in batches of {batch}), and batch-norm needs at least two"),
            )
            .label_opt(stage.name.span, "this stage")
            .label_opt(bn.span, "batch-norm")
            .help("add `drop-last #true` to the stage, or change `batch-size`"));
        }
    }
    Ok((batch, batches))
}

/// The optimizer and, when the strategy shards the optimizer's state (`zero1`), each
/// process's parameters (shallow handles, gathered once), which their owner broadcasts
/// after its optimizer step: each process updates (and keeps optimizer state for) its
/// own share of the parameters only.
pub(super) fn optimizer_for(
    manifest: &Manifest,
    model: &Model,
    group: Option<&ProcessGroup>,
    strategy: &dyn Strategy,
) -> Result<(Optimizer, Vec<Vec<Tensor>>), Diagnostic> {
    let params = crate::optimizer::trainable(&model.vs);
    let sharded = group.and_then(|g| Some((g, strategy.owners(&params, g.world)?)));
    let Some((g, owners)) = sharded else {
        return Ok((Optimizer::new(&manifest.optimizer, &model.vs)?, Vec::new()));
    };
    let opt = Optimizer::sharded(&manifest.optimizer, &model.vs, |i| owners[i] == g.rank)?;
    let shards = (0..g.world)
        .map(|rank| {
            params
                .iter()
                .zip(&owners)
                .filter(|(_, owner)| **owner == rank)
                .map(|(p, _)| p.shallow_clone())
                .collect()
        })
        .collect();
    Ok((opt, shards))
}

/// How the training samples are dealt to the processes (one process takes them all).
pub(super) fn sampler_for(
    data: &Dataset,
    accelerator: &AcceleratorSpec,
    name: &str,
) -> Result<Sampler, Diagnostic> {
    let distributed = &accelerator.distributed;
    Ok(match distributed.bucket_by {
        Some(column) if distributed.bucketed => {
            let keys = bucket_keys(data, column as i64).map_err(|why| {
                Diagnostic::error(
                    "pipeline::accelerator::bad_bucket_key",
                    format!("stage `{name}`: {why}"),
                )
                .label_opt(accelerator.span("bucket-by"), "this feature")
                .help("`bucket-by` is an index into a sample's flattened features, from 0")
            })?;
            Sampler::bucketed(
                &data.splits.train,
                |i| keys[i],
                distributed.buckets as usize,
                distributed.drop_remainder,
            )
        }
        _ => Sampler::Distributed {
            drop: distributed.drop_remainder,
        },
    })
}

/// The value of feature `column` of every sample, for the bucketed sampler.
fn bucket_keys(data: &Dataset, column: i64) -> Result<Vec<f64>, String> {
    if data.images.is_some() {
        return Err(format!(
            "`bucket-by {column}` reads a feature column, and image data has none"
        ));
    }
    if let Some(stream) = &data.stream {
        let width: i64 = stream.sample_shape().iter().product();
        if column >= width {
            return Err(format!(
                "`bucket-by {column}`: a sample has {width} features"
            ));
        }
        return stream.column(column as usize, &data.rows);
    }
    let n = data.features.size()[0];
    let flat = data.features.reshape([n, -1]);
    let width = flat.size()[1];
    if column >= width {
        return Err(format!(
            "`bucket-by {column}`: a sample has {width} features"
        ));
    }
    let keys = flat
        .select(1, column)
        .to_device(tch::Device::Cpu)
        .to_kind(Kind::Double);
    Vec::<f64>::try_from(&keys).map_err(|e| e.to_string())
}
