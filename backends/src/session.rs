//! [`Session`]: a manifest with its data loaded on its device, checked against the model
//! before any stage runs.

use crate::accelerator::Strategy;
use crate::data::Dataset;
use crate::error::{short_message, torch_error};
use crate::loss::Loss;
use crate::model::Model;
use crate::numerics::{self, Numerics};
use crate::process_group::ProcessGroup;
use manifests::{Diagnostic, Manifest, SplitName};
use tch::Device;

/// What every stage of a run shares.
pub struct Session<'a> {
    pub manifest: &'a Manifest,
    pub data: Dataset,
    pub device: Device,
    pub numerics: Numerics,
    /// How the processes share the training (`accelerator.strategy`).
    pub strategy: &'static dyn Strategy,
    /// The other processes of a distributed run.
    pub group: Option<ProcessGroup>,
    /// Total and trainable parameters of the model.
    pub parameters: (i64, i64),
    /// The loss, its weights resolved against the data and the model.
    pub loss: Loss,
    /// The model's outputs per sample (classes, or targets).
    pub outputs: i64,
}

impl<'a> Session<'a> {
    /// This process's rank (0 without a group): rank 0 writes checkpoints, metrics and
    /// the cache.
    pub fn rank(&self) -> usize {
        self.group.as_ref().map_or(0, |g| g.rank)
    }

    /// Sets the thread count, loads the data onto `device` (from [`crate::accelerator::resolve`]) and
    /// runs the model once on two samples, so a bad data file or model fails here with a
    /// diagnostic.
    pub fn open(
        manifest: &'a Manifest,
        device: Device,
        group: Option<ProcessGroup>,
    ) -> Result<Session<'a>, Diagnostic> {
        // The count the stage keys hold (on the CPU; elsewhere the same count is harmless).
        tch::set_num_threads(pipeline_core::fingerprint::cpu_threads(&manifest.accelerator) as i32);
        numerics::set_deterministic(manifest.accelerator.deterministic).map_err(|e| {
            torch_error(
                "pipeline::accelerator::deterministic",
                "cannot set deterministic algorithms",
                &e,
            )
        })?;
        let numerics = Numerics::new(&manifest.accelerator, device)?;
        let strategy = crate::accelerator::strategy(&manifest.accelerator)?;
        // With folds, the first fold's split (the stages say which they need).
        let fold = manifest.data.split.folds.map(|_| 1);
        let mut data = Dataset::load(manifest, manifest.loss.kind.is_classification(), fold)?;
        data.to_device(device);
        let (parameters, loss, outputs) = dry_run(manifest, &data, &numerics)?;
        Ok(Session {
            manifest,
            data,
            device,
            numerics,
            strategy,
            group,
            parameters,
            loss,
            outputs,
        })
    }
}

impl Session<'_> {
    /// With `data.split folds=K`: the data split as fold `fold` is (reloaded, filled and
    /// scaled with its training part's statistics, unless it is already), the model
    /// checked against it and the loss's weights taken from it. Whether it was reloaded.
    pub fn use_fold(&mut self, fold: u64) -> Result<bool, Diagnostic> {
        if self.data.fold == Some(fold) {
            return Ok(false);
        }
        let manifest = self.manifest;
        let mut data = Dataset::load(manifest, manifest.loss.kind.is_classification(), Some(fold))?;
        data.to_device(self.device);
        let (parameters, loss, outputs) = dry_run(manifest, &data, &self.numerics)?;
        self.data = data;
        self.parameters = parameters;
        self.loss = loss;
        self.outputs = outputs;
        Ok(true)
    }
}

/// `one tensor` or `the tensors tokens, mask`: what a scripted `forward` is given.
fn inputs_named(data: &Dataset) -> String {
    match &data.input_names[..] {
        [_] => "one tensor, a batch".to_string(),
        names => format!(
            "{} tensors, {} (its arguments by those names), each a batch",
            names.len(),
            names.join(", ")
        ),
    }
}

/// A libtorch failure in the dry forward pass, as a diagnostic on the model.
fn dry_run_error(manifest: &Manifest, data: &Dataset, e: &tch::TchError) -> Diagnostic {
    let d = Diagnostic::error(
        "pipeline::model::forward_failed",
        format!("the model fails on the data: {}", short_message(e)),
    );
    match &manifest.model.torchscript {
        Some(script) => d
            .label_opt(script.path.span.or(manifest.model.span), "this module")
            .help(format!("the module's `forward` takes {}: the batch dimension first, then a sample's shape, here {:?}", inputs_named(data), data.sample_shape)),
        None => d
            .label_opt(manifest.model.span, "this model")
            .help("check the layer sizes against the data's shape"),
    }
}

/// Checks the model against the data before any training: shapes (by inference, then a
/// forward pass on two samples), the loss on that output (its weights against the
/// model's outputs), and the label range. The parameter counts, the loss and the
/// outputs per sample.
fn dry_run(
    manifest: &Manifest,
    data: &Dataset,
    numerics: &Numerics,
) -> Result<((i64, i64), Loss, i64), Diagnostic> {
    let model = Model::build(
        &manifest.model,
        &data.inputs(),
        numerics.device,
        numerics.weights,
    )?;
    // What the output's size comes from: the last layer, or the scripted module.
    let script = manifest.model.torchscript.as_ref();
    let last_layer = match script {
        Some(s) => s.path.span,
        None => manifest.model.nodes.last().and_then(manifests::Node::span),
    };
    let train = data.splits.get(SplitName::Train);
    let first = &train[..train.len().min(2)];
    let (xb, yb) = data
        .batch(first, None)
        .map_err(|e| dry_run_error(manifest, data, &e))?;
    let out = numerics
        .autocast(|| model.forward(&xb, false))
        .map_err(|e| dry_run_error(manifest, data, &e))?;
    let outputs = match out.size().as_slice() {
        [b, k] if *b == first.len() as i64 => *k,
        other => {
            let (shape, help) = match (script, other) {
                (None, [_, rest @ ..]) => (format!("{rest:?} per sample"), "add `flatten` before the last `linear`"),
                (None, []) => ("no batch dimension".to_string(), "add `flatten` before the last `linear`"),
                (Some(_), _) => (
                    format!("{other:?} for a batch of {}", first.len()),
                    "make the module's `forward` return one row of scores (or targets) per sample: shape [batch, outputs]",
                ),
            };
            return Err(Diagnostic::error(
                "pipeline::model::output_shape",
                format!("the model's output has shape {shape}; a loss needs one vector per sample"),
            )
            .label_opt(
                last_layer,
                if script.is_some() {
                    "this module"
                } else {
                    "last layer"
                },
            )
            .help(help));
        }
    };
    if manifest.loss.kind.is_classification() {
        if let Err((i, label)) = data.check_classes(outputs) {
            return Err(Diagnostic::error(
                "pipeline::data::label_out_of_range",
                format!("{}: label {label} is out of range for the model's {outputs} outputs (classes 0 … {})", data.at(i), outputs - 1),
            )
            .label_opt(last_layer, format!("{outputs} outputs"))
            .label_opt(manifest.data.source.span, "labels from here")
            .help(format!("make the last layer `linear {}` or larger, or fix the label", label + 1)));
        }
    } else if data.target_width() != outputs {
        return Err(Diagnostic::error(
            "pipeline::model::output_size",
            format!(
                "the model has {outputs} outputs per sample but the data has {} targets",
                data.target_width()
            ),
        )
        .label_opt(last_layer, format!("{outputs} outputs"))
        .label_opt(manifest.loss.span, "regression loss")
        .help(format!(
            "make the last layer `linear {}`",
            data.target_width()
        )));
    }
    let loss = Loss::new(&manifest.loss, data, outputs, numerics.device)?;
    let _value = numerics.autocast(|| loss.compute(&out, &yb)).map_err(|e| {
        torch_error(
            "pipeline::loss::mismatch",
            "the loss cannot compare the model's output with the labels",
            &e,
        )
        .label_opt(manifest.loss.span, "this loss")
        .help("check the last layer's size and the kind of loss")
    })?;
    Ok((model.parameter_counts(), loss, outputs))
}
