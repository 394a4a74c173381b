//! The model as backends run it: a [`Network`] of steps over numbered values, with the
//! shape of every value inferred from the data's shape and checked.
//!
//! A model is a tree (`manifests::Node`: layers, `residual`, `repeat`, `parallel`, block
//! uses); compiling it walks the tree once, asks each layer its own shape rule
//! (`LayerType::infer`), unrolls repeats, adds the projections residual blocks need, and
//! writes the steps in the order they run. The first values are the model's inputs
//! (the data's, [`Input`]: `features`, or `tokens` and `mask`, …), value 0 the one the
//! layers start from; a `branch input=` starts from another, a layer's `mask=` reads one
//! as its padding mask. Every step reads values written before it, so the network is a
//! DAG by construction and a backend runs it front to back. Every mismatch is a diagnostic on the layers at both
//! ends, before any weight is allocated. Shapes exclude the batch dimension.
//!
//! Parameter names follow the `state_dict` of the `torch.nn` twin (`docs/models.md`):
//! position in the list, then `body` / `projection` (residual), the copy (repeat),
//! `branches.N` (parallel), or the position in a block's body.

use manifests::layers::{show_shape, Conv, Conv1d, Conv2d, Linear};
use manifests::{DataSpec, Diagnostic, Join, Layer, ModelSpec, Node, Projection, Spanned};
use miette::SourceSpan;

pub use manifests::layers::Shape;

/// What a step computes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A layer, its tensors named `{prefix}.{parameter}`.
    Layer { layer: Layer, prefix: String },
    /// The sum of the inputs, in order.
    Add,
    /// The inputs joined along this dimension of a sample (≥ 0).
    Concat { dim: usize },
}

/// One input of a model: its name and the shape of one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub name: String,
    pub shape: Shape,
}

impl Input {
    /// The inputs `data` gives for samples of shape `first` (the data file's first
    /// input's; a `mask` has the shape of the tokens it marks), `extra` (the shapes of
    /// `data.inputs`', in order) and the ids of its categorical columns encoded by index.
    /// With `data.window`, every input is a window of rows: `length` rows first.
    pub fn of_data(data: &DataSpec, first: &[i64], extra: &[Shape]) -> Vec<Input> {
        let windowed = |row: &[i64]| match &data.window {
            Some(w) => [&[w.length as i64], row].concat(),
            None => row.to_vec(),
        };
        let own = data.own_inputs().iter().map(|name| Input {
            name: name.to_string(),
            shape: windowed(first),
        });
        let extra = data
            .extra_inputs
            .iter()
            .zip(extra)
            .map(|(spec, shape)| Input {
                name: spec.name.clone(),
                shape: windowed(shape),
            });
        // A categorical column encoded by index: one id per sample.
        let ids = data.index_inputs().into_iter().map(|name| Input {
            name,
            shape: windowed(&[1]),
        });
        own.chain(extra).chain(ids).collect()
    }
}

/// One step: `op` applied to `inputs`, written to `output`. A layer reads `inputs[0]`,
/// and `inputs[1]` as its padding mask when it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub op: Op,
    pub inputs: Vec<usize>,
    pub output: usize,
    /// Values no later step reads: a backend may drop them after this one.
    pub last_uses: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub steps: Vec<Step>,
    /// The shape of one sample of each value; the first are the inputs.
    pub shapes: Vec<Shape>,
    /// The inputs' names, in order: value `i` is input `i`.
    pub inputs: Vec<String>,
    pub output: usize,
}

impl Network {
    /// Compiles `model` for the model inputs `inputs` (at least one).
    pub fn compile(model: &ModelSpec, inputs: &[Input]) -> Result<Network, Diagnostic> {
        assert!(!inputs.is_empty(), "a model has an input");
        let mut c = Compiler {
            steps: Vec::new(),
            shapes: inputs.iter().map(|i| i.shape.clone()).collect(),
            inputs: inputs.iter().map(|i| i.name.clone()).collect(),
        };
        let output = c.sequence(&model.nodes, "", 0)?;
        let mut network = Network {
            steps: c.steps,
            shapes: c.shapes,
            inputs: c.inputs,
            output,
        };
        network.mark_last_uses();
        Ok(network)
    }

    /// The shape of one output sample.
    pub fn output_shape(&self) -> &[i64] {
        &self.shapes[self.output]
    }

    /// The layers with the shape of their input, in the order they run.
    pub fn layers(&self) -> impl Iterator<Item = (&Layer, &str, &[i64])> {
        self.steps.iter().filter_map(|s| match &s.op {
            Op::Layer { layer, prefix } => {
                Some((layer, prefix.as_str(), &self.shapes[s.inputs[0]][..]))
            }
            Op::Add | Op::Concat { .. } => None,
        })
    }

    /// The number of values the parameters and buffers hold. Counted in `u128` so that
    /// no manifest overflows it: a model too large for memory is refused before any
    /// allocation, with how much it would need.
    pub fn parameter_count(&self) -> u128 {
        self.layers()
            .flat_map(|(layer, _, x)| layer.parameters(x))
            .map(|p| p.numel())
            .fold(0u128, u128::saturating_add)
    }

    fn mark_last_uses(&mut self) {
        let mut last = vec![usize::MAX; self.shapes.len()];
        for (i, step) in self.steps.iter().enumerate() {
            for &v in &step.inputs {
                last[v] = i;
            }
        }
        for (v, &i) in last.iter().enumerate() {
            // The inputs belong to the caller, the output is returned.
            if v >= self.inputs.len() && v != self.output && i != usize::MAX {
                self.steps[i].last_uses.push(v);
            }
        }
    }
}

struct Compiler {
    steps: Vec<Step>,
    shapes: Vec<Shape>,
    inputs: Vec<String>,
}

/// `prefix` + `name`, dot-separated.
fn join(prefix: &str, name: impl std::fmt::Display) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl Compiler {
    fn push(&mut self, op: Op, inputs: Vec<usize>, shape: Shape) -> usize {
        self.shapes.push(shape);
        let output = self.shapes.len() - 1;
        self.steps.push(Step {
            op,
            inputs,
            output,
            last_uses: Vec::new(),
        });
        output
    }

    fn sequence(
        &mut self,
        nodes: &[Node],
        prefix: &str,
        mut x: usize,
    ) -> Result<usize, Diagnostic> {
        for (i, node) in nodes.iter().enumerate() {
            x = self.node(node, &join(prefix, i), x)?;
        }
        Ok(x)
    }

    /// The value of the model input `name`, or a diagnostic at `span` (what reads it)
    /// listing the inputs there are.
    fn input(&self, name: &str, span: Option<SourceSpan>) -> Result<usize, Diagnostic> {
        if let Some(i) = self.inputs.iter().position(|n| n == name) {
            return Ok(i);
        }
        let known: Vec<&str> = self.inputs.iter().map(String::as_str).collect();
        let listed = known
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let suggestion = manifests::suggest::closest(name, known.iter().copied());
        Err(Diagnostic::error(
            "pipeline::model::unknown_input",
            format!("the model has no input `{name}`"),
        )
        .label_opt(span, "no such input")
        .help(match suggestion {
            Some(s) => format!("did you mean `{s}`? The data gives {listed}"),
            None => format!("the data gives {listed}"),
        }))
    }

    fn layer(
        &mut self,
        layer: &Layer,
        span: Option<SourceSpan>,
        prefix: String,
        x: usize,
    ) -> Result<usize, Diagnostic> {
        let input = &self.shapes[x];
        let out = layer
            .infer(input, x < self.inputs.len())
            .and_then(|out| manifests::layers::values(&out).map(|_| out))
            .map_err(|e| {
                Diagnostic::error("pipeline::model::shape_mismatch", e.message)
                    .label_opt(span, format!("gets inputs of shape {}", show_shape(input)))
                    .help(e.help)
            })?;
        let mut inputs = vec![x];
        if let Some(name) = layer.mask() {
            let m = self.input(name, span)?;
            // A layer taking a mask takes (length, …): the mask marks each step.
            let (mask, steps) = (&self.shapes[m], &input[..1]);
            if mask[..] != steps[..] {
                return Err(Diagnostic::error(
                    "pipeline::model::mask_mismatch",
                    format!(
                        "the mask `{name}` has shape {}, but `{}` gets sequences of shape {}: a mask has one value per step, {}",
                        show_shape(mask),
                        layer.name(),
                        show_shape(input),
                        show_shape(steps),
                    ),
                )
                .label_opt(span, match input[0] {
                    1 => "1 step".to_string(),
                    n => format!("{n} steps"),
                })
                .help("give the layer the sequence the mask was made for (the tokens' embedding, before any pooling or reshaping)"));
            }
            inputs.push(m);
        }
        Ok(self.push(
            Op::Layer {
                layer: layer.clone(),
                prefix,
            },
            inputs,
            out,
        ))
    }

    fn node(&mut self, node: &Node, path: &str, x: usize) -> Result<usize, Diagnostic> {
        match node {
            Node::Layer(spec) => self.layer(&spec.layer, spec.span, path.to_string(), x),
            Node::Block { body, .. } => self.sequence(body, path, x),
            Node::Repeat { times, body, .. } => {
                let mut y = x;
                for copy in 0..*times {
                    y = self.sequence(body, &join(path, copy), y)?;
                }
                Ok(y)
            }
            Node::Residual {
                body,
                projection,
                span,
            } => {
                let y = self.sequence(body, &join(path, "body"), x)?;
                let (xs, ys) = (self.shapes[x].clone(), self.shapes[y].clone());
                if xs == ys {
                    return Ok(self.push(Op::Add, vec![y, x], ys));
                }
                let mismatch = |help: &str| {
                    Diagnostic::error(
                        "pipeline::model::residual_mismatch",
                        format!(
                            "the residual block's body turns {} into {}, which cannot be added to its input",
                            show_shape(&xs),
                            show_shape(&ys)
                        ),
                    )
                    .label_opt(*span, format!("input of shape {}", show_shape(&xs)))
                    .label_opt(body.last().and_then(Node::span), format!("output of shape {}", show_shape(&ys)))
                    .help(help.to_string())
                };
                match projection {
                    Projection::None => Err(mismatch(
                        "keep the shape in the body, or remove `projection \"none\"` to project the input to it",
                    )),
                    Projection::Auto => {
                        let Some(layer) = projection_for(&xs, &ys) else {
                            return Err(mismatch(
                                "a projection is a 1×1 convolution with a stride (channels and sizes divided alike) or a linear map of the last dimension; make the body's output reachable by one, or keep the shape",
                            ));
                        };
                        let p = self.layer(&layer, *span, join(path, "projection"), x)?;
                        debug_assert_eq!(self.shapes[p], ys);
                        Ok(self.push(Op::Add, vec![y, p], ys))
                    }
                }
            }
            Node::Parallel {
                branches,
                inputs,
                join: how,
                dim,
                span,
            } => {
                let mut outs = Vec::with_capacity(branches.len());
                for (i, branch) in branches.iter().enumerate() {
                    let from = match inputs.get(i).and_then(Option::as_ref) {
                        Some(Spanned { value, span }) => self.input(value, *span)?,
                        None => x,
                    };
                    outs.push(self.sequence(branch, &join(path, format!("branches.{i}")), from)?);
                }
                let shapes: Vec<Shape> = outs.iter().map(|&o| self.shapes[o].clone()).collect();
                let mismatch = |what: String, help: &str| {
                    let mut d = Diagnostic::error("pipeline::model::branch_mismatch", what)
                        .label_opt(*span, "these branches");
                    for (branch, shape) in branches.iter().zip(&shapes) {
                        d = d.label_opt(
                            branch.last().and_then(Node::span),
                            format!("gives {}", show_shape(shape)),
                        );
                    }
                    d.help(help.to_string())
                };
                let first = &shapes[0];
                match how {
                    Join::Add => {
                        if shapes.iter().any(|s| s != first) {
                            return Err(mismatch(
                                "the branches of an `add` give different shapes".into(),
                                "make every branch end with the same shape, or join them with `concat`",
                            ));
                        }
                        Ok(self.push(Op::Add, outs, first.clone()))
                    }
                    Join::Concat => {
                        let rank = first.len() as i64;
                        let d = if *dim < 0 { rank + dim } else { *dim };
                        if !(0..rank).contains(&d) {
                            return Err(mismatch(
                                format!("`concat` along dimension {dim} of samples with {rank} dimension(s)"),
                                "`dim` counts from 0 (the first dimension after the batch), or from -1 (the last)",
                            ));
                        }
                        let d = d as usize;
                        let others = |s: &Shape| {
                            let mut s = s.clone();
                            s.remove(d);
                            s
                        };
                        if shapes
                            .iter()
                            .any(|s| s.len() != first.len() || others(s) != others(first))
                        {
                            return Err(mismatch(
                                format!("the branches of a `concat` along dimension {dim} differ in another dimension"),
                                "every dimension but the joined one must be the same in every branch",
                            ));
                        }
                        let mut out = first.clone();
                        let joined = shapes.iter().try_fold(0i64, |sum, s| sum.checked_add(s[d]));
                        out[d] = joined.unwrap_or(i64::MAX);
                        if manifests::layers::values(&out).is_err() {
                            return Err(mismatch(
                                "the `concat` of these branches would hold more than 2^40 values per sample".into(),
                                "join fewer or smaller branches",
                            ));
                        }
                        Ok(self.push(Op::Concat { dim: d }, outs, out))
                    }
                }
            }
        }
    }
}

/// The projection that takes a residual block's input `x` to its body's output shape
/// `y`: over (channels, length) or (channels, height, width), a 1×1 convolution with the
/// stride that gives every size; otherwise (vectors, or sizes no stride reaches) a linear
/// map of the last dimension when only that differs. Neither has a bias (ResNet's
/// shortcut).
fn projection_for(x: &[i64], y: &[i64]) -> Option<Layer> {
    if x.len() != y.len() || x.is_empty() {
        return None;
    }
    let n = x.len();
    if (2..=3).contains(&n) {
        // `(a - 1) / s + 1 = b` for every size: the largest such s from each, then checked.
        let stride = x[1..]
            .iter()
            .zip(&y[1..])
            .map(|(&a, &b)| if b > 1 { (a - 1) / (b - 1) } else { a })
            .min()
            .unwrap_or(1)
            .max(1);
        let fits = x[1..]
            .iter()
            .zip(&y[1..])
            .all(|(a, b)| (a - 1) / stride + 1 == *b);
        if fits {
            let conv = Conv {
                out: y[0],
                kernel: 1,
                stride,
                padding: 0,
                dilation: 1,
                groups: 1,
                bias: false,
            };
            return Some(match n {
                2 => Layer::Conv1d(Conv1d(conv)),
                _ => Layer::Conv2d(Conv2d(conv)),
            });
        }
    }
    (x[..n - 1] == y[..n - 1]).then(|| {
        Layer::Linear(Linear {
            out: y[n - 1],
            bias: false,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifests::layers::{Flatten, MaxPool, Relu, Reshape, Window};
    use manifests::LayerSpec;

    fn layer(layer: Layer) -> Node {
        Node::Layer(LayerSpec { layer, span: None })
    }

    fn conv(out: i64, stride: i64) -> Node {
        layer(Layer::Conv2d(Conv2d(Conv {
            out,
            kernel: 3,
            stride,
            padding: 1,
            dilation: 1,
            groups: 1,
            bias: true,
        })))
    }

    fn features(shape: &[i64]) -> Vec<Input> {
        vec![Input {
            name: "features".into(),
            shape: shape.to_vec(),
        }]
    }

    fn model(nodes: Vec<Node>) -> ModelSpec {
        ModelSpec {
            nodes,
            torchscript: None,
            span: None,
        }
    }

    #[test]
    fn digits_cnn_shapes() {
        let m = model(vec![
            layer(Layer::Reshape(Reshape {
                shape: vec![1, 8, 8],
            })),
            conv(16, 1),
            layer(Layer::MaxPool(MaxPool(Window {
                kernel: 2,
                stride: 2,
                padding: 0,
            }))),
            layer(Layer::Flatten(Flatten {})),
            layer(Layer::Linear(Linear {
                out: 10,
                bias: true,
            })),
        ]);
        let n = Network::compile(&m, &features(&[64])).unwrap();
        assert_eq!(
            n.shapes,
            vec![
                vec![64],
                vec![1, 8, 8],
                vec![16, 8, 8],
                vec![16, 4, 4],
                vec![256],
                vec![10]
            ]
        );
        let names: Vec<&str> = n.layers().map(|(_, p, _)| p).collect();
        assert_eq!(names, ["0", "1", "2", "3", "4"]);
    }

    #[test]
    fn a_residual_that_changes_the_shape_gets_a_strided_projection() {
        let m = model(vec![
            layer(Layer::Reshape(Reshape {
                shape: vec![4, 8, 8],
            })),
            Node::Residual {
                body: vec![conv(8, 2), layer(Layer::Relu(Relu {}))],
                projection: Projection::Auto,
                span: None,
            },
        ]);
        let n = Network::compile(&m, &features(&[256])).unwrap();
        assert_eq!(n.output_shape(), [8, 4, 4]);
        let names: Vec<&str> = n.layers().map(|(_, p, _)| p).collect();
        assert_eq!(names, ["0", "1.body.0", "1.body.1", "1.projection"]);
        let (projection, _, input) = n.layers().last().unwrap();
        assert_eq!(input, [4, 8, 8]);
        assert!(
            matches!(projection, Layer::Conv2d(Conv2d(c)) if c.stride == 2 && c.kernel == 1 && !c.bias)
        );
        assert_eq!(n.steps.last().unwrap().op, Op::Add);
    }

    #[test]
    fn a_residual_without_projection_must_keep_the_shape_and_says_so_at_both_ends() {
        let m = model(vec![
            layer(Layer::Reshape(Reshape {
                shape: vec![4, 8, 8],
            })),
            Node::Residual {
                body: vec![
                    conv(8, 1),
                    Node::Layer(LayerSpec {
                        layer: Layer::Relu(Relu {}),
                        span: Some((40, 4).into()),
                    }),
                ],
                projection: Projection::None,
                span: Some((20, 60).into()),
            },
        ]);
        let err = Network::compile(&m, &features(&[256])).unwrap_err();
        assert_eq!(err.code, "pipeline::model::residual_mismatch");
        assert_eq!(
            err.message,
            "the residual block's body turns (4, 8, 8) into (8, 8, 8), which cannot be added to its input"
        );
        let labels: Vec<(usize, &str)> = err
            .labels
            .iter()
            .map(|l| (l.span.offset(), l.text.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                (20, "input of shape (4, 8, 8)"),
                (40, "output of shape (8, 8, 8)")
            ]
        );
    }

    #[test]
    fn repeats_unroll_with_a_name_per_copy_and_branches_concatenate() {
        let m = model(vec![
            layer(Layer::Reshape(Reshape {
                shape: vec![2, 4, 4],
            })),
            Node::Repeat {
                times: 2,
                body: vec![conv(2, 1)],
                span: None,
            },
            Node::Parallel {
                inputs: Vec::new(),
                branches: vec![
                    vec![conv(3, 1)],
                    vec![conv(5, 1), layer(Layer::Relu(Relu {}))],
                ],
                join: Join::Concat,
                dim: 0,
                span: None,
            },
        ]);
        let n = Network::compile(&m, &features(&[32])).unwrap();
        assert_eq!(n.output_shape(), [8, 4, 4]);
        let names: Vec<&str> = n.layers().map(|(_, p, _)| p).collect();
        assert_eq!(
            names,
            [
                "0",
                "1.0.0",
                "1.1.0",
                "2.branches.0.0",
                "2.branches.1.0",
                "2.branches.1.1"
            ]
        );
        assert_eq!(n.steps.last().unwrap().op, Op::Concat { dim: 0 });
        // Every intermediate value is dropped after its last reader.
        let dropped: usize = n.steps.iter().map(|s| s.last_uses.len()).sum();
        assert_eq!(dropped, n.shapes.len() - 2);
    }

    #[test]
    fn reshape_must_keep_the_number_of_values() {
        let m = model(vec![layer(Layer::Reshape(Reshape {
            shape: vec![1, 9, 9],
        }))]);
        let err = Network::compile(&m, &features(&[64])).unwrap_err();
        assert_eq!(
            err.message,
            "cannot reshape 64 values into (1, 9, 9) (81 values)"
        );
        let huge = model(vec![layer(Layer::Reshape(Reshape {
            shape: vec![i64::MAX / 2, 4],
        }))]);
        let err = Network::compile(&huge, &features(&[64])).unwrap_err();
        assert!(
            err.message.ends_with("(too many values)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_masked_layer_reads_the_mask_input_and_a_branch_starts_from_its_input() {
        use manifests::layers::{Embedding, PoolMode, SequencePool};
        let pool = |mask: Option<&str>| {
            layer(Layer::SequencePool(SequencePool {
                mode: PoolMode::Mean,
                mask: mask.map(str::to_string),
            }))
        };
        let m = model(vec![
            layer(Layer::Embedding(Embedding { count: 10, dim: 4 })),
            Node::Parallel {
                branches: vec![vec![pool(Some("mask"))], vec![pool(None)]],
                inputs: Vec::new(),
                join: Join::Concat,
                dim: 0,
                span: None,
            },
            Node::Parallel {
                // The mask itself, as a second branch's input: (6) beside (8).
                branches: vec![
                    vec![layer(Layer::Relu(Relu {}))],
                    vec![layer(Layer::Relu(Relu {}))],
                ],
                inputs: vec![
                    None,
                    Some(Spanned {
                        value: "mask".into(),
                        span: None,
                    }),
                ],
                join: Join::Concat,
                dim: 0,
                span: None,
            },
        ]);
        let inputs = |length| {
            ["tokens", "mask"]
                .map(|name| Input {
                    name: name.into(),
                    shape: vec![length],
                })
                .to_vec()
        };
        let n = Network::compile(&m, &inputs(6)).unwrap();
        assert_eq!(n.inputs, ["tokens", "mask"]);
        // The embedding reads the tokens (value 0); the masked pool reads its input and
        // the mask (value 1), the plain one its input only.
        assert_eq!(n.steps[0].inputs, [0]);
        assert_eq!(n.steps[1].inputs, [2, 1]);
        assert_eq!(n.steps[2].inputs, [2]);
        // The second parallel's branches: the concat's output, and the mask.
        assert_eq!(n.steps[4].inputs, [5]);
        assert_eq!(n.steps[5].inputs, [1]);
        assert_eq!(n.output_shape(), [14]);
        // Inputs belong to the caller: never dropped.
        assert!(n.steps.iter().all(|s| !s.last_uses.iter().any(|&v| v < 2)));

        // A mask that is not the sequence's length.
        let m = model(vec![
            layer(Layer::Embedding(Embedding { count: 10, dim: 4 })),
            layer(Layer::Reshape(Reshape { shape: vec![3, 8] })),
            pool(Some("mask")),
        ]);
        let err = Network::compile(&m, &inputs(6)).unwrap_err();
        assert_eq!(err.code, "pipeline::model::mask_mismatch");
    }
}
