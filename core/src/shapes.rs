//! Shape inference for the model: the shape of one sample before and after every
//! layer, from the shape of the data.
//!
//! Each layer's own rule (`manifests::layers`, `LayerType::infer`) says what it makes of
//! its input; this walks the model with them and turns a refusal into a diagnostic on
//! the offending layer, before any weight is allocated. Backends build layers from these
//! shapes (input sizes are never written in a manifest). Shapes exclude the batch
//! dimension.

use manifests::layers::show_shape;
use manifests::{Diagnostic, LayerSpec};

pub use manifests::layers::Shape;

/// The input shape of every layer, followed by the model's output shape.
pub fn infer(layers: &[LayerSpec], input: &[i64]) -> Result<Vec<Shape>, Diagnostic> {
    let mut shapes = vec![input.to_vec()];
    for (i, spec) in layers.iter().enumerate() {
        let x = shapes.last().expect("starts with the input");
        let out = spec.layer.infer(x, i == 0).map_err(|e| {
            Diagnostic::error("pipeline::model::shape_mismatch", e.message)
                .label_opt(spec.span, format!("gets inputs of shape {}", show_shape(x)))
                .help(e.help)
        })?;
        shapes.push(out);
    }
    Ok(shapes)
}

/// The number of values the model's parameters and buffers hold, for the shapes
/// [`infer`] gave (`shapes[i]` is layer `i`'s input). Counted in `u128` so that no
/// manifest overflows it: a model too large for memory is refused before any
/// allocation, with how much it would need.
pub fn parameter_count(layers: &[LayerSpec], shapes: &[Shape]) -> u128 {
    layers
        .iter()
        .zip(shapes)
        .flat_map(|(spec, x)| spec.layer.parameters(x))
        .map(|p| p.numel())
        .fold(0u128, u128::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifests::layers::{Conv, Conv2d, Flatten, Linear, MaxPool, Reshape, Window};
    use manifests::Layer;

    fn layers(ls: Vec<Layer>) -> Vec<LayerSpec> {
        ls.into_iter()
            .map(|layer| LayerSpec { layer, span: None })
            .collect()
    }

    #[test]
    fn digits_cnn_shapes() {
        let model = layers(vec![
            Layer::Reshape(Reshape {
                shape: vec![1, 8, 8],
            }),
            Layer::Conv2d(Conv2d(Conv {
                out: 16,
                kernel: 3,
                stride: 1,
                padding: 1,
                dilation: 1,
                groups: 1,
                bias: true,
            })),
            Layer::MaxPool(MaxPool(Window {
                kernel: 2,
                stride: 2,
                padding: 0,
            })),
            Layer::Flatten(Flatten {}),
            Layer::Linear(Linear {
                out: 10,
                bias: true,
            }),
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
        let mut model = layers(vec![Layer::Conv2d(Conv2d(Conv {
            out: 4,
            kernel: 3,
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
            bias: true,
        }))]);
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
            &layers(vec![Layer::Reshape(Reshape {
                shape: vec![1, 9, 9],
            })]),
            &[64],
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "cannot reshape 64 values into (1, 9, 9) (81 values)"
        );
        let huge = infer(
            &layers(vec![Layer::Reshape(Reshape {
                shape: vec![i64::MAX / 2, 4],
            })]),
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
