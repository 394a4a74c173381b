//! Shape inference for the model stack: the shape of one sample before and after every
//! layer, from the shape of the data.
//!
//! Backends build layers from these shapes (input sizes are never written in a
//! manifest), and every mismatch becomes a diagnostic on the offending layer before any
//! weight is allocated. Shapes exclude the batch dimension.

use manifests::{Diagnostic, Layer, LayerSpec};

/// The shape of one sample (no batch dimension).
pub type Shape = Vec<i64>;

fn show(shape: &[i64]) -> String {
    if shape.is_empty() {
        return "a scalar".into();
    }
    format!(
        "({})",
        shape
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Output size of a convolution or pooling window along one dimension.
fn window_out(size: i64, kernel: i64, stride: i64, padding: i64) -> i64 {
    (size + 2 * padding - kernel).div_euclid(stride) + 1
}

/// The input shape of every layer, followed by the model's output shape.
pub fn infer(layers: &[LayerSpec], input: &[i64]) -> Result<Vec<Shape>, Diagnostic> {
    let mut shapes = vec![input.to_vec()];
    for (i, spec) in layers.iter().enumerate() {
        let x = shapes.last().expect("starts with the input").clone();
        let fail = |message: String, help: &str| {
            Diagnostic::error("pipeline::model::shape_mismatch", message)
                .label_opt(spec.span, format!("gets inputs of shape {}", show(&x)))
                .help(help.to_string())
        };
        let name = spec.layer.name();
        let out = match &spec.layer {
            Layer::Linear { out, .. } => {
                if x.is_empty() {
                    return Err(fail(
                        format!("`{name}` needs at least one feature dimension"),
                        "add `reshape` before it",
                    ));
                }
                let mut y = x.clone();
                *y.last_mut().expect("not empty") = *out;
                y
            }
            Layer::Conv2d {
                out,
                kernel,
                stride,
                padding,
                ..
            } => {
                let [_, h, w] = x[..] else {
                    return Err(fail(
                        format!(
                            "`conv2d` needs (channels, height, width) inputs, but gets {}",
                            show(&x)
                        ),
                        "add `reshape C H W` before it, e.g. `reshape 1 8 8` for 64 grey pixels",
                    ));
                };
                let (oh, ow) = (
                    window_out(h, *kernel, *stride, *padding),
                    window_out(w, *kernel, *stride, *padding),
                );
                if oh < 1 || ow < 1 {
                    return Err(fail(
                        format!("the `conv2d` kernel ({kernel}) is larger than its {h}×{w} input"),
                        "use a smaller kernel or add padding",
                    ));
                }
                vec![*out, oh, ow]
            }
            Layer::MaxPool {
                kernel,
                stride,
                padding,
            }
            | Layer::AvgPool {
                kernel,
                stride,
                padding,
            } => {
                let [c, h, w] = x[..] else {
                    return Err(fail(
                        format!(
                            "`{name}` needs (channels, height, width) inputs, but gets {}",
                            show(&x)
                        ),
                        "pool after a `conv2d`, or `reshape C H W` first",
                    ));
                };
                if *padding * 2 > *kernel {
                    return Err(fail(format!("`{name}` padding ({padding}) must be at most half its kernel ({kernel})"), "lower the padding"));
                }
                let (oh, ow) = (
                    window_out(h, *kernel, *stride, *padding),
                    window_out(w, *kernel, *stride, *padding),
                );
                if oh < 1 || ow < 1 {
                    return Err(fail(
                        format!("the `{name}` window ({kernel}) is larger than its {h}×{w} input"),
                        "use a smaller window",
                    ));
                }
                vec![c, oh, ow]
            }
            Layer::Flatten => vec![x.iter().product()],
            Layer::Reshape { shape } => {
                let have: i64 = x.iter().product();
                // Checked: an absurd shape is a diagnostic, not an overflow.
                let want = shape.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
                if want != Some(have) {
                    let want = want.map_or("too many".to_string(), |w| w.to_string());
                    return Err(fail(
                        format!(
                            "cannot reshape {have} values into {} ({want} values)",
                            show(shape)
                        ),
                        &format!("the product of the new shape must be {have}"),
                    ));
                }
                shape.clone()
            }
            Layer::Relu | Layer::Gelu | Layer::Tanh | Layer::Sigmoid | Layer::Dropout { .. } => {
                x.clone()
            }
            Layer::LogSoftmax | Layer::LayerNorm { .. } => {
                if x.is_empty() {
                    return Err(fail(
                        format!("`{name}` needs at least one dimension"),
                        "apply it to a vector",
                    ));
                }
                x.clone()
            }
            Layer::BatchNorm { .. } => {
                if x.is_empty() || x.len() > 3 {
                    return Err(fail(
                        format!("`batch-norm` needs (features), (channels, length) or (channels, height, width) inputs, but gets {}", show(&x)),
                        "use `layer-norm`, or reshape first",
                    ));
                }
                x.clone()
            }
            Layer::Embedding { dim, .. } => {
                if i != 0 {
                    return Err(fail(
                        "`embedding` must be the first layer: it reads token ids from the data"
                            .to_string(),
                        "move it to the top of the `model` block",
                    ));
                }
                let mut y = x.clone();
                y.push(*dim);
                y
            }
        };
        shapes.push(out);
    }
    Ok(shapes)
}

/// The number of values the model's parameters and buffers hold, for the shapes
/// [`infer`] gave (`shapes[i]` is layer `i`'s input). Counted in `u128` so that no
/// manifest overflows it: a model too large for memory is refused before any
/// allocation, with how much it would need.
pub fn parameter_count(layers: &[LayerSpec], shapes: &[Shape]) -> u128 {
    let dim = |d: i64| d.max(0) as u128;
    layers
        .iter()
        .zip(shapes)
        .map(|(spec, x)| {
            let last = dim(*x.last().unwrap_or(&1));
            let first = dim(*x.first().unwrap_or(&1));
            match &spec.layer {
                Layer::Linear { out, bias } => last * dim(*out) + u128::from(*bias) * dim(*out),
                Layer::Conv2d {
                    out, kernel, bias, ..
                } => {
                    first * dim(*out) * dim(*kernel) * dim(*kernel) + u128::from(*bias) * dim(*out)
                }
                // weight, bias, running mean and variance
                Layer::BatchNorm { .. } => 4 * first,
                Layer::LayerNorm { .. } => 2 * last,
                Layer::Embedding { count, dim: d } => dim(*count) * dim(*d),
                Layer::MaxPool { .. }
                | Layer::AvgPool { .. }
                | Layer::Flatten
                | Layer::Reshape { .. }
                | Layer::Relu
                | Layer::Gelu
                | Layer::Tanh
                | Layer::Sigmoid
                | Layer::LogSoftmax
                | Layer::Dropout { .. } => 0,
            }
        })
        .fold(0u128, u128::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(ls: Vec<Layer>) -> Vec<LayerSpec> {
        ls.into_iter()
            .map(|layer| LayerSpec { layer, span: None })
            .collect()
    }

    #[test]
    fn digits_cnn_shapes() {
        let model = layers(vec![
            Layer::Reshape {
                shape: vec![1, 8, 8],
            },
            Layer::Conv2d {
                out: 16,
                kernel: 3,
                stride: 1,
                padding: 1,
                bias: true,
            },
            Layer::MaxPool {
                kernel: 2,
                stride: 2,
                padding: 0,
            },
            Layer::Flatten,
            Layer::Linear {
                out: 10,
                bias: true,
            },
        ]);
        let shapes = infer(&model, &[64]).unwrap();
        assert_eq!(
            shapes,
            vec![
                vec![64],
                vec![1, 8, 8],
                vec![16, 8, 8],
                vec![16, 4, 4],
                vec![256],
                vec![10]
            ]
        );
    }

    #[test]
    fn conv_on_flat_features_is_an_error_on_that_layer() {
        let mut model = layers(vec![Layer::Conv2d {
            out: 4,
            kernel: 3,
            stride: 1,
            padding: 0,
            bias: true,
        }]);
        model[0].span = Some((10, 6).into());
        let err = infer(&model, &[64]).unwrap_err();
        assert_eq!(err.code, "pipeline::model::shape_mismatch");
        assert_eq!(
            err.message,
            "`conv2d` needs (channels, height, width) inputs, but gets (64)"
        );
        assert_eq!(err.labels[0].span, (10, 6).into());
    }

    #[test]
    fn reshape_must_keep_the_number_of_values() {
        let err = infer(
            &layers(vec![Layer::Reshape {
                shape: vec![1, 9, 9],
            }]),
            &[64],
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "cannot reshape 64 values into (1, 9, 9) (81 values)"
        );
        let huge = infer(
            &layers(vec![Layer::Reshape {
                shape: vec![i64::MAX / 2, 4],
            }]),
            &[64],
        )
        .unwrap_err();
        assert!(
            huge.message.ends_with("(too many values)"),
            "{}",
            huge.message
        );
    }
}
