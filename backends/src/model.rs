//! The model: the manifest's layer stack built with input sizes from shape inference,
//! parameters in one `VarStore`, named like PyTorch's `nn.Sequential` state dict
//! (`0.weight`, `1.running_mean`, …) and initialised as `torch.nn` does; or a
//! TorchScript module (`torchscript "net.pt"`), whose parameters and buffers are put in
//! the `VarStore` under its own state-dict names, so that everything downstream
//! (optimizers, ddp, snapshots, checkpoints, `init`, `freeze`) treats both alike.
//!
//! Each layer declares its parameters and writes its forward pass itself
//! (`manifests::layers`); this file allocates the one and runs the other with
//! [`Torch`], libtorch's fallible calls only, so a mismatch that shape inference missed
//! is an error, never a panic.

use crate::ops::Torch;
use crate::process_group::ProcessGroup;
use crate::script::ScriptModule;
use manifests::layers::{sinusoids, Init, Param, Params};
use manifests::{Diagnostic, Layer, ModelSpec, TorchScriptSpec};
use pipeline_core::network::{Input, Network, Op};
use tch::nn;
use tch::{Device, Kind, TchError, Tensor};

/// `bytes` for people: `1.2 GB`.
pub(crate) fn show_bytes(bytes: u128) -> String {
    let (unit, scale) = match bytes {
        b if b >= 1 << 40 => ("TB", 1u64 << 40),
        b if b >= 1 << 30 => ("GB", 1 << 30),
        _ => ("MB", 1 << 20),
    };
    format!("{:.1} {unit}", bytes as f64 / scale as f64)
}

/// Refuses a model whose parameters alone cannot fit in memory, before allocating any,
/// against what the device's accelerator says it has (`Accelerator::memory_limit`).
fn fits_in_memory(
    spec: &ModelSpec,
    network: &Network,
    device: Device,
    kind: Kind,
) -> Result<(), Diagnostic> {
    let values = network.parameter_count();
    // Initialised in fp32, then converted.
    let bytes = values.saturating_mul(kind.elt_size_in_bytes().max(4) as u128);
    let Some((limit, what)) = crate::accelerator::of(device).and_then(|a| a.memory_limit(device))
    else {
        return Ok(());
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

/// What one step of the network does: a layer with its tensors (in the order of its
/// declared parameters), a sum, or a concatenation along a dimension of the batch.
#[derive(Debug)]
enum Run {
    Layer {
        layer: Layer,
        params: Vec<Param>,
        tensors: Vec<Tensor>,
    },
    Add,
    Concat(i64),
}

/// One step with the values it reads and writes (`Network`'s numbering).
#[derive(Debug)]
struct Built {
    run: Run,
    inputs: Vec<usize>,
    output: usize,
    last_uses: Vec<usize>,
}

/// A built model with its parameters.
#[derive(Debug)]
pub struct Model {
    pub vs: nn::VarStore,
    /// The dtype of the weights; floating inputs are converted to it.
    pub kind: Kind,
    body: Body,
}

/// What computes the forward pass.
#[derive(Debug)]
enum Body {
    Network {
        steps: Vec<Built>,
        /// How many values the network has, and which one is the output.
        values: usize,
        output: usize,
        /// Per input, whether it is converted to the weights' dtype: not when an
        /// `embedding` reads it (bfloat16 holds integers exactly only up to 256), nor when
        /// only masks are read from it.
        convert: Vec<bool>,
    },
    Script {
        module: ScriptModule,
        /// The model input each argument of its `forward` takes, in order, and whether
        /// it is converted to the weights' dtype (not token ids nor masks: bfloat16 holds
        /// integers exactly only up to 256).
        arguments: Vec<(usize, bool)>,
    },
}

/// A parameter's random or constant initialisation, as tch performs it (`uniform_`,
/// `normal_`, `fill_`: the calls `torch.nn` makes).
fn tch_init(init: &Init) -> nn::Init {
    match init {
        Init::Uniform { bound } => nn::Init::Uniform {
            lo: -bound,
            up: *bound,
        },
        Init::Normal { std } => nn::Init::Randn {
            mean: 0.0,
            stdev: *std,
        },
        Init::Const(value) => nn::Init::Const(*value),
        Init::Sinusoidal => unreachable!("tables are made by `initial_values`"),
    }
}

/// A buffer's (or a table's) first values, as a tensor of its own.
fn initial_values(
    init: &Init,
    shape: &[i64],
    integer: bool,
    device: Device,
) -> Result<Tensor, TchError> {
    let kind = if integer { Kind::Int64 } else { Kind::Float };
    match init {
        Init::Const(value) => Tensor::f_full(shape, *value, (kind, device)),
        Init::Sinusoidal => {
            let [rows, features] = shape[..] else {
                return Err(TchError::Shape(format!(
                    "a sinusoidal table is 2-D, not {shape:?}"
                )));
            };
            let values: Vec<f32> = sinusoids(rows, features)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            Tensor::f_from_slice(&values)?
                .f_reshape(shape)?
                .f_to(device)?
                .f_to_kind(kind)
        }
        Init::Uniform { .. } | Init::Normal { .. } => {
            let t = Tensor::f_empty(shape, (Kind::Float, device))?;
            tch::no_grad(|| tch_init(init).set(&mut t.shallow_clone()));
            Ok(t)
        }
    }
}

impl Model {
    /// Builds `spec` for the model inputs `inputs` on `device`, with weights of `kind`
    /// (initialised in fp32, then converted). Shape mismatches are diagnostics on the
    /// offending layer.
    pub fn build(
        spec: &ModelSpec,
        inputs: &[Input],
        device: Device,
        kind: Kind,
    ) -> Result<Model, Diagnostic> {
        if let Some(script) = &spec.torchscript {
            return Model::load_script(script, inputs, device, kind);
        }
        let network = Network::compile(spec, inputs)?;
        fits_in_memory(spec, &network, device, kind)?;
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mut steps = Vec::with_capacity(network.steps.len());
        for step in &network.steps {
            let run = match &step.op {
                Op::Layer { layer, prefix } => {
                    let params = layer.parameters(&network.shapes[step.inputs[0]]);
                    let mut tensors = Vec::with_capacity(params.len());
                    for p in &params {
                        // `2.body.0` + `self_attn.out_proj.weight`: one path per dot.
                        let full = format!("{prefix}.{}", p.name);
                        let (dirs, leaf) = full.rsplit_once('.').expect("a prefix and a name");
                        let path = dirs.split('.').fold(root.clone(), |at, part| at.sub(part));
                        let made = match (&p.init, p.trainable) {
                            (
                                init
                                @ (Init::Uniform { .. } | Init::Normal { .. } | Init::Const(_)),
                                true,
                            ) => path.f_var(leaf, &p.shape, tch_init(init)),
                            (init, _) => initial_values(init, &p.shape, p.integer, device)
                                .map(|t| path.add(leaf, t, p.trainable)),
                        };
                        tensors.push(made.map_err(|e| {
                            Diagnostic::error(
                                "pipeline::model::allocation",
                                format!(
                                    "cannot allocate `{full}` (`{}`): {}",
                                    layer.name(),
                                    crate::error::short_message(&e)
                                ),
                            )
                            .label_opt(spec.span, "this model")
                            .help("make the model smaller, or free memory on the device")
                        })?);
                    }
                    Run::Layer {
                        layer: layer.clone(),
                        params,
                        tensors,
                    }
                }
                Op::Add => Run::Add,
                // A sample's dimension d is the batch's d + 1.
                Op::Concat { dim } => Run::Concat(*dim as i64 + 1),
            };
            steps.push(Built {
                run,
                inputs: step.inputs.clone(),
                output: step.output,
                last_uses: step.last_uses.clone(),
            });
        }
        let convert = (0..network.inputs.len())
            .map(|i| {
                let ids = network.steps.iter().any(|s| {
                    s.inputs[0] == i
                        && matches!(
                            &s.op,
                            Op::Layer {
                                layer: Layer::Embedding(_),
                                ..
                            }
                        )
                });
                // A layer reads `inputs[0]`; `inputs[1]` is its mask.
                let values = network.steps.iter().any(|s| match s.op {
                    Op::Layer { .. } => s.inputs[0] == i,
                    Op::Add | Op::Concat { .. } => s.inputs.contains(&i),
                });
                values && !ids
            })
            .collect();
        let mut vs = vs;
        // Floating tensors only: a count stays an integer.
        match kind {
            Kind::Double => vs.double(),
            Kind::BFloat16 => vs.bfloat16(),
            Kind::Half => vs.half(),
            Kind::Float => {}
            other => unreachable!("weights are floating point, not {other:?}"),
        }
        Ok(Model {
            kind,
            vs,
            body: Body::Network {
                steps,
                values: network.shapes.len(),
                output: network.output,
                convert,
            },
        })
    }

    /// Loads a TorchScript module onto `device` with its floating tensors in `kind`, and
    /// puts its parameters (trainable unless they were frozen in Python) and buffers in
    /// a `VarStore` under their state-dict names.
    fn load_script(
        spec: &TorchScriptSpec,
        inputs: &[Input],
        device: Device,
        kind: Kind,
    ) -> Result<Model, Diagnostic> {
        if let Some(refused) = pipeline_core::torchscript::refusal(spec) {
            return Err(refused);
        }
        let failed = |e: TchError| {
            Diagnostic::error(
                "pipeline::model::torchscript_load",
                format!(
                    "cannot load the TorchScript model {}: {}",
                    spec.path.value.display(),
                    crate::error::short_message(&e)
                ),
            )
            .label_opt(spec.path.span, "this module")
            .help("save it again with `torch.jit.save` from the PyTorch version pipeline runs (the one `scripts/setup.sh` installs); a newer one may write what this libtorch cannot read")
        };
        let module = ScriptModule::load(&spec.file, device, kind).map_err(failed)?;
        let arguments = script_arguments(spec, &module.arguments().map_err(failed)?, inputs)?
            .into_iter()
            .map(|i| {
                (
                    i,
                    !manifests::TOKEN_INPUTS.contains(&inputs[i].name.as_str()),
                )
            })
            .collect();
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        for named in module.tensors().map_err(failed)? {
            let (dirs, leaf) = match named.name.rsplit_once('.') {
                Some((dirs, leaf)) => (Some(dirs), leaf),
                None => (None, named.name.as_str()),
            };
            let path = dirs
                .into_iter()
                .flat_map(|d| d.split('.'))
                .fold(root.clone(), |at, part| at.sub(part));
            // A tied weight is trained under its first name only; its other names are in
            // the state dict (and the checkpoint), not in the optimizer twice.
            let trainable = named.parameter && !named.repeat && named.tensor.requires_grad();
            let _shared = path.add(leaf, named.tensor, trainable);
        }
        Ok(Model {
            kind,
            vs,
            body: Body::Script { module, arguments },
        })
    }

    /// Applies every layer to the model inputs (in the data's order, `Input::of_data`);
    /// `train` turns on dropout and batch statistics.
    pub fn forward(&self, inputs: &[Tensor], train: bool) -> Result<Tensor, TchError> {
        self.forward_synced(inputs, train, None)
    }

    /// `x` in the weights' dtype when it is floating point.
    fn converted(&self, x: &Tensor) -> Result<Tensor, TchError> {
        if x.is_floating_point() && x.kind() != self.kind {
            x.f_to_kind(self.kind)
        } else {
            Ok(x.shallow_clone())
        }
    }

    /// [`Model::forward`], with batch-norm in training over the whole batch of `sync`'s
    /// processes (`accelerator.sync-batch-norm`).
    pub fn forward_synced(
        &self,
        inputs: &[Tensor],
        train: bool,
        sync: Option<&ProcessGroup>,
    ) -> Result<Tensor, TchError> {
        let (steps, count, output, convert) = match &self.body {
            Body::Network {
                steps,
                values,
                output,
                convert,
            } => (steps, *values, *output, convert),
            Body::Script { module, arguments } => {
                let xs = arguments
                    .iter()
                    .map(|&(i, convert)| match convert {
                        true => self.converted(&inputs[i]),
                        false => Ok(inputs[i].shallow_clone()),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                return module.forward(&xs, train);
            }
        };
        let mut ops = Torch { train, sync };
        let mut values: Vec<Option<Tensor>> = (0..count).map(|_| None).collect();
        for (i, (x, &convert)) in inputs.iter().zip(convert).enumerate() {
            values[i] = Some(if convert {
                self.converted(x)?
            } else {
                x.shallow_clone()
            });
        }
        for step in steps {
            let inputs: Vec<&Tensor> = step
                .inputs
                .iter()
                .map(|&v| {
                    values[v]
                        .as_ref()
                        .expect("a network's steps read values written before them")
                })
                .collect();
            let y = match &step.run {
                Run::Layer {
                    layer,
                    params,
                    tensors,
                } => {
                    let params = Params {
                        decls: params,
                        values: tensors,
                    };
                    match inputs[..] {
                        [x, mask] => layer.forward_masked(&mut ops, &params, x, mask)?,
                        _ => layer.forward(&mut ops, &params, inputs[0])?,
                    }
                }
                Run::Add => {
                    let mut sum = inputs[0].f_add(inputs[1])?;
                    for more in &inputs[2..] {
                        sum = sum.f_add(more)?;
                    }
                    sum
                }
                Run::Concat(dim) => Tensor::f_cat(&inputs, *dim)?,
            };
            values[step.output] = Some(y);
            for &v in &step.last_uses {
                values[v] = None;
            }
        }
        Ok(values[output]
            .take()
            .expect("the output is written by the last step or is an input"))
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

/// The model input each argument of a TorchScript module's `forward` takes: by name
/// (`forward(self, tokens, mask)`), or the first input for a `forward` of one argument
/// whatever its name (`forward(self, x)`). An argument with a default that the data does
/// not give is left to its default.
fn script_arguments(
    spec: &TorchScriptSpec,
    arguments: &[crate::script::Argument],
    inputs: &[Input],
) -> Result<Vec<usize>, Diagnostic> {
    let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    let position = |name: &str| names.iter().position(|n| *n == name);
    let listed = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let refused = |message: String| {
        Diagnostic::error("pipeline::model::torchscript_inputs", message)
            .label_opt(spec.path.span, "this module")
            .help(format!("name the arguments of `forward` after the model inputs the data gives, {listed}, in any order; a `forward` of one argument takes the first"))
    };
    match arguments {
        [] => Err(refused(format!(
            "the module's `forward` takes no input, but the data gives {listed}"
        ))),
        [one] => Ok(vec![position(&one.name).unwrap_or(0)]),
        several => {
            let mut taken = Vec::new();
            for (k, arg) in several.iter().enumerate() {
                match position(&arg.name) {
                    Some(i) => taken.push(i),
                    None if arg.has_default
                        && several[k..].iter().all(|a| position(&a.name).is_none()) =>
                    {
                        break
                    }
                    None => {
                        return Err(refused(format!(
                            "the module's `forward` takes `{}`, which is not a model input",
                            arg.name
                        )))
                    }
                }
            }
            Ok(taken)
        }
    }
}
