//! The model: the manifest's layer stack built with input sizes from shape inference,
//! parameters in one `VarStore`, named like PyTorch's `nn.Sequential` state dict
//! (`0.weight`, `1.running_mean`, …) and initialised as `torch.nn` does.
//!
//! Each layer declares its parameters and writes its forward pass itself
//! (`manifests::layers`); this file allocates the one and runs the other with
//! [`Torch`], libtorch's fallible calls only, so a mismatch that shape inference missed
//! is an error, never a panic.

use crate::ops::Torch;
use crate::process_group::ProcessGroup;
use manifests::layers::{Init, Param, Params};
use manifests::{Diagnostic, Layer, ModelSpec};
use pipeline_core::shapes;
use tch::nn;
use tch::{Device, Kind, TchError, Tensor};

/// `bytes` for people: `1.2 GB`.
fn show_bytes(bytes: u128) -> String {
    let (unit, scale) = match bytes {
        b if b >= 1 << 40 => ("TB", 1u64 << 40),
        b if b >= 1 << 30 => ("GB", 1 << 30),
        _ => ("MB", 1 << 20),
    };
    format!("{:.1} {unit}", bytes as f64 / scale as f64)
}

/// The memory the CPU can still give (`MemAvailable` of /proc/meminfo).
fn available_memory() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Refuses a model whose parameters alone cannot fit in memory, before allocating any:
/// on the CPU, against the memory available now; on CUDA (whose memory libtorch does
/// not report before a context exists), against 1 TB, more than any single GPU has.
fn fits_in_memory(
    spec: &ModelSpec,
    shapes: &[Vec<i64>],
    device: Device,
    kind: Kind,
) -> Result<(), Diagnostic> {
    let values = shapes::parameter_count(&spec.layers, shapes);
    // Initialised in fp32, then converted.
    let bytes = values.saturating_mul(kind.elt_size_in_bytes().max(4) as u128);
    let (limit, what) = match device {
        Device::Cpu => match available_memory() {
            Some(m) => (m, format!("this machine has {} available", show_bytes(m))),
            None => return Ok(()),
        },
        _ => (1 << 40, "no GPU has as much".to_string()),
    };
    if bytes <= limit {
        return Ok(());
    }
    Err(Diagnostic::error(
        "pipeline::model::too_large",
        format!(
            "the model's parameters need {} ({values} values); {what}",
            show_bytes(bytes)
        ),
    )
    .label_opt(spec.span, "this model")
    .help("make the layers smaller (`linear`'s and `conv2d`'s output sizes, `embedding`'s count)"))
}

/// One layer with its tensors, in the order of its declared parameters.
#[derive(Debug)]
struct Built {
    layer: Layer,
    params: Vec<Param>,
    tensors: Vec<Tensor>,
}

/// A built model with its parameters.
#[derive(Debug)]
pub struct Model {
    pub vs: nn::VarStore,
    /// The dtype of the weights; floating inputs are converted to it.
    pub kind: Kind,
    layers: Vec<Built>,
    /// The shape of one output (no batch dimension).
    pub output_shape: Vec<i64>,
}

/// A parameter's initialisation, as tch performs it (`uniform_`, `normal_`, `fill_`,
/// the calls `torch.nn` makes).
fn init(init: Init) -> nn::Init {
    match init {
        Init::Uniform { bound } => nn::Init::Uniform {
            lo: -bound,
            up: bound,
        },
        Init::Normal { std } => nn::Init::Randn {
            mean: 0.0,
            stdev: std,
        },
        Init::Const(value) => nn::Init::Const(value),
    }
}

impl Model {
    /// Builds `spec` for samples of `input` shape on `device`, with weights of `kind`
    /// (initialised in fp32, then converted). Shape mismatches are diagnostics on the
    /// offending layer.
    pub fn build(
        spec: &ModelSpec,
        input: &[i64],
        device: Device,
        kind: Kind,
    ) -> Result<Model, Diagnostic> {
        let shapes = shapes::infer(&spec.layers, input)?;
        fits_in_memory(spec, &shapes, device, kind)?;
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (i, (layer, x)) in spec.layers.iter().zip(&shapes).enumerate() {
            let path = &root / i;
            let params = layer.layer.parameters(x);
            let mut tensors = Vec::with_capacity(params.len());
            for p in &params {
                let made = if p.trainable {
                    path.f_var(p.name, &p.shape, init(p.init))
                } else {
                    let Init::Const(value) = p.init else {
                        unreachable!("buffers start constant")
                    };
                    Tensor::f_full(p.shape.as_slice(), value, (Kind::Float, device))
                        .map(|t| path.add(p.name, t, false))
                };
                tensors.push(made.map_err(|e| {
                    Diagnostic::error(
                        "pipeline::model::allocation",
                        format!(
                            "cannot allocate `{i}.{}` of layer {} (`{}`): {}",
                            p.name,
                            i + 1,
                            layer.layer.name(),
                            crate::error::short_message(&e)
                        ),
                    )
                    .label_opt(layer.span, "this layer")
                    .help("make the model smaller, or free memory on the device")
                })?);
            }
            layers.push(Built {
                layer: layer.layer.clone(),
                params,
                tensors,
            });
        }
        let output_shape = shapes.last().cloned().unwrap_or_default();
        let mut vs = vs;
        if kind != Kind::Float {
            vs.set_kind(kind);
        }
        Ok(Model {
            kind,
            vs,
            layers,
            output_shape,
        })
    }

    /// Applies every layer; `train` turns on dropout and batch statistics.
    pub fn forward(&self, input: &Tensor, train: bool) -> Result<Tensor, TchError> {
        self.forward_synced(input, train, None)
    }

    /// [`Model::forward`], with batch-norm in training over the whole batch of `sync`'s
    /// processes (`accelerator.sync-batch-norm`).
    pub fn forward_synced(
        &self,
        input: &Tensor,
        train: bool,
        sync: Option<&ProcessGroup>,
    ) -> Result<Tensor, TchError> {
        let mut x = if input.is_floating_point() && input.kind() != self.kind {
            input.f_to_kind(self.kind)?
        } else {
            input.shallow_clone()
        };
        let mut ops = Torch { train, sync };
        for built in &self.layers {
            let params = Params {
                decls: &built.params,
                values: &built.tensors,
            };
            x = built.layer.forward(&mut ops, &params, &x)?;
        }
        Ok(x)
    }

    /// Total and trainable parameter counts.
    pub fn parameter_counts(&self) -> (i64, i64) {
        let trainable: i64 = self
            .vs
            .trainable_variables()
            .iter()
            .map(Tensor::numel)
            .map(|n| n as i64)
            .sum();
        let total: i64 = self
            .vs
            .variables()
            .values()
            .filter(|t| t.is_floating_point())
            .map(|t| t.numel() as i64)
            .sum();
        (total.max(trainable), trainable)
    }
}
