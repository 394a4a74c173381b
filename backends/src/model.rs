//! The model: the manifest's layer stack built with input sizes from shape inference,
//! parameters in one `VarStore`, named like PyTorch's `nn.Sequential` state dict
//! (`0.weight`, `1.running_mean`, …).
//!
//! The forward pass uses libtorch's fallible calls only, so a mismatch that shape
//! inference missed is an error, never a panic.

use crate::process_group::ProcessGroup;
use manifests::{Diagnostic, Layer, ModelSpec};
use pipeline_core::shapes;
use tch::nn::{self, Init};
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

#[derive(Debug)]
enum Built {
    Linear(nn::Linear),
    Conv2d {
        conv: nn::Conv2D,
        stride: i64,
        padding: i64,
    },
    MaxPool {
        kernel: i64,
        stride: i64,
        padding: i64,
    },
    AvgPool {
        kernel: i64,
        stride: i64,
        padding: i64,
    },
    Flatten,
    Reshape(Vec<i64>),
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
    LogSoftmax,
    Dropout(f64),
    BatchNorm {
        bn: nn::BatchNorm,
        eps: f64,
        momentum: f64,
    },
    LayerNorm {
        ln: nn::LayerNorm,
        eps: f64,
    },
    Embedding(nn::Embedding),
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
            let p = &root / i;
            let last = *x.last().unwrap_or(&1);
            layers.push(match &layer.layer {
                Layer::Linear { out, bias } => Built::Linear(nn::linear(
                    &p,
                    last,
                    *out,
                    nn::LinearConfig {
                        bias: *bias,
                        ..Default::default()
                    },
                )),
                Layer::Conv2d {
                    out,
                    kernel,
                    stride,
                    padding,
                    bias,
                } => Built::Conv2d {
                    conv: nn::conv2d(
                        &p,
                        x[0],
                        *out,
                        *kernel,
                        nn::ConvConfig {
                            stride: *stride,
                            padding: *padding,
                            bias: *bias,
                            ..Default::default()
                        },
                    ),
                    stride: *stride,
                    padding: *padding,
                },
                Layer::MaxPool {
                    kernel,
                    stride,
                    padding,
                } => Built::MaxPool {
                    kernel: *kernel,
                    stride: *stride,
                    padding: *padding,
                },
                Layer::AvgPool {
                    kernel,
                    stride,
                    padding,
                } => Built::AvgPool {
                    kernel: *kernel,
                    stride: *stride,
                    padding: *padding,
                },
                Layer::Flatten => Built::Flatten,
                Layer::Reshape { shape } => {
                    Built::Reshape(std::iter::once(-1).chain(shape.iter().copied()).collect())
                }
                Layer::Relu => Built::Relu,
                Layer::Gelu => Built::Gelu,
                Layer::Tanh => Built::Tanh,
                Layer::Sigmoid => Built::Sigmoid,
                Layer::LogSoftmax => Built::LogSoftmax,
                Layer::Dropout { p } => Built::Dropout(*p),
                Layer::BatchNorm { eps, momentum } => {
                    let config = nn::BatchNormConfig {
                        eps: *eps,
                        momentum: *momentum,
                        ..Default::default()
                    };
                    // BatchNorm1d on (N, F) / (N, C, L), BatchNorm2d on (N, C, H, W): features/channels are x[0].
                    let bn = if x.len() == 3 {
                        nn::batch_norm2d(&p, x[0], config)
                    } else {
                        nn::batch_norm1d(&p, x[0], config)
                    };
                    Built::BatchNorm {
                        bn,
                        eps: *eps,
                        momentum: *momentum,
                    }
                }
                Layer::LayerNorm { eps } => Built::LayerNorm {
                    ln: nn::layer_norm(
                        &p,
                        vec![last],
                        nn::LayerNormConfig {
                            eps: *eps,
                            ..Default::default()
                        },
                    ),
                    eps: *eps,
                },
                Layer::Embedding { count, dim } => Built::Embedding(nn::embedding(
                    &p,
                    *count,
                    *dim,
                    nn::EmbeddingConfig {
                        ws_init: Init::Randn {
                            mean: 0.0,
                            stdev: 1.0,
                        },
                        ..Default::default()
                    },
                )),
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
        for layer in &self.layers {
            x = match layer {
                Built::Linear(l) => x.f_linear(&l.ws, l.bs.as_ref())?,
                Built::Conv2d {
                    conv,
                    stride,
                    padding,
                } => x.f_conv2d(
                    &conv.ws,
                    conv.bs.as_ref(),
                    [*stride, *stride],
                    [*padding, *padding],
                    [1, 1],
                    1,
                )?,
                Built::MaxPool {
                    kernel,
                    stride,
                    padding,
                } => x.f_max_pool2d(
                    [*kernel, *kernel],
                    [*stride, *stride],
                    [*padding, *padding],
                    [1, 1],
                    false,
                )?,
                Built::AvgPool {
                    kernel,
                    stride,
                    padding,
                } => x.f_avg_pool2d(
                    [*kernel, *kernel],
                    [*stride, *stride],
                    [*padding, *padding],
                    false,
                    true,
                    None,
                )?,
                Built::Flatten => x.f_flatten(1, -1)?,
                Built::Reshape(shape) => x.f_reshape(shape.as_slice())?,
                Built::Relu => x.f_relu()?,
                Built::Gelu => x.f_gelu("none")?,
                Built::Tanh => x.f_tanh()?,
                Built::Sigmoid => x.f_sigmoid()?,
                Built::LogSoftmax => x.f_log_softmax(-1, None::<Kind>)?,
                Built::Dropout(p) => x.f_dropout(*p, train)?,
                // Batch-norm layers are built affine (with weights and biases), so a
                // synchronised one always takes the first arm.
                Built::BatchNorm { bn, eps, momentum } => {
                    match (sync.filter(|_| train), &bn.ws, &bn.bs) {
                        (Some(g), Some(ws), Some(bs)) => g.sync_batch_norm(
                            &x,
                            ws,
                            bs,
                            &bn.running_mean,
                            &bn.running_var,
                            *momentum,
                            *eps,
                        )?,
                        _ => Tensor::f_batch_norm(
                            &x,
                            bn.ws.as_ref(),
                            bn.bs.as_ref(),
                            Some(&bn.running_mean),
                            Some(&bn.running_var),
                            train,
                            *momentum,
                            *eps,
                            false,
                        )?,
                    }
                }
                Built::LayerNorm { ln, eps } => x.f_layer_norm(
                    ln.normalized_shape.as_slice(),
                    ln.ws.as_ref(),
                    ln.bs.as_ref(),
                    *eps,
                    false,
                )?,
                Built::Embedding(e) => {
                    Tensor::f_embedding(&e.ws, &x.f_to_kind(Kind::Int64)?, -1, false, false)?
                }
            };
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
