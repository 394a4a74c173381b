//! `conv1d` and `conv2d`: convolutions over (channels, length) and (channels, height,
//! width) samples (`torch.nn.Conv1d`, `torch.nn.Conv2d`), with stride, padding,
//! dilation and groups; input channels are inferred.

use super::{show_shape, window_out, Init, LayerType, Ops, Param, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{
    int, key, required, section, Key, Section, Val, BIAS, MAX_CHANNELS, MAX_KERNEL,
};
use serde::Serialize;

/// The settings both convolutions share; the kernel, stride, padding and dilation are
/// the same along every spatial dimension.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conv {
    pub out: i64,
    pub kernel: i64,
    pub stride: i64,
    pub padding: i64,
    pub dilation: i64,
    pub groups: i64,
    pub bias: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Conv1d(pub Conv);

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Conv2d(pub Conv);

const KEYS: &[Key] = &[
    required("out", int(1, MAX_CHANNELS), "Output channels."),
    key(
        "kernel",
        int(1, MAX_KERNEL),
        Some(Val::Int(3)),
        "Kernel size (the same along every spatial dimension).",
    ),
    key("stride", int(1, MAX_KERNEL), Some(Val::Int(1)), "Stride."),
    key(
        "padding",
        int(0, MAX_KERNEL),
        Some(Val::Int(0)),
        "Zero padding on each side.",
    ),
    key(
        "dilation",
        int(1, MAX_KERNEL),
        Some(Val::Int(1)),
        "Spacing between kernel elements (1: a plain convolution).",
    ),
    key(
        "groups",
        int(1, MAX_CHANNELS),
        Some(Val::Int(1)),
        "Blocked connections: input and output channels are cut into this many groups, each convolved on its own (equal to the input channels: depthwise). Must divide both.",
    ),
    BIAS,
];

impl Conv {
    fn lower(f: &Fields) -> Conv {
        Conv {
            out: f.int("out"),
            kernel: f.int("kernel"),
            stride: f.int("stride"),
            padding: f.int("padding"),
            dilation: f.int("dilation"),
            groups: f.int("groups"),
            bias: f.bool("bias"),
        }
    }

    /// The output shape for `x` = (channels, spatial…) with `dims` spatial dimensions.
    fn infer(&self, name: &str, dims: usize, x: &[i64]) -> Result<Shape, ShapeError> {
        let what = if dims == 1 {
            "(channels, length)"
        } else {
            "(channels, height, width)"
        };
        if x.len() != dims + 1 {
            let help = if dims == 1 {
                "add `reshape C L` before it, e.g. `reshape 1 64` for 64 values in one channel"
            } else {
                "add `reshape C H W` before it, e.g. `reshape 1 8 8` for 64 grey pixels"
            };
            return Err(ShapeError::new(
                format!("`{name}` needs {what} inputs, but gets {}", show_shape(x)),
                help,
            ));
        }
        let channels = x[0];
        if channels % self.groups != 0 || self.out % self.groups != 0 {
            return Err(ShapeError::new(
                format!(
                    "`{name}` groups ({}) must divide its input channels ({channels}) and its output channels ({})",
                    self.groups, self.out
                ),
                "choose `groups` among the common divisors of both",
            ));
        }
        let mut y = vec![self.out];
        for &size in &x[1..] {
            let o = window_out(size, self.kernel, self.stride, self.padding, self.dilation);
            if o < 1 {
                let sizes: Vec<String> = x[1..].iter().map(i64::to_string).collect();
                return Err(ShapeError::new(
                    format!(
                        "the `{name}` kernel ({}, dilation {}) is larger than its {} input",
                        self.kernel,
                        self.dilation,
                        sizes.join("×")
                    ),
                    "use a smaller kernel or add padding",
                ));
            }
            y.push(o);
        }
        Ok(y)
    }

    fn parameters(&self, dims: usize, x: &[i64]) -> Vec<Param> {
        let per_group = x.first().copied().unwrap_or(1) / self.groups.max(1);
        let window = self.kernel.pow(dims as u32);
        let fan_in = (per_group * window).max(1);
        let bound = 1.0 / (fan_in as f64).sqrt();
        let mut shape = vec![self.out, per_group];
        shape.extend(std::iter::repeat_n(self.kernel, dims));
        let mut p = vec![Param::weight("weight", shape, Init::Uniform { bound })];
        if self.bias {
            p.push(Param::weight(
                "bias",
                vec![self.out],
                Init::Uniform { bound },
            ));
        }
        p
    }

    fn forward<O: Ops>(
        &self,
        dims: usize,
        ops: &mut O,
        p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let each = |v: i64| vec![v; dims];
        ops.conv(
            x,
            p.get("weight"),
            p.opt("bias"),
            &each(self.stride),
            &each(self.padding),
            &each(self.dilation),
            self.groups,
        )
    }
}

/// `LayerType` for a convolution over `$dims` spatial dimensions: the shared settings do
/// the work.
macro_rules! convolution {
    ($ty:ident, $name:literal, $dims:literal, $doc:literal) => {
        impl LayerType for $ty {
            const SCHEMA: Section = section($name, &["out", "kernel"], KEYS, $doc);

            fn lower(f: &Fields) -> Self {
                $ty(Conv::lower(f))
            }

            fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
                self.0.infer($name, $dims, x)
            }

            fn parameters(&self, x: &[i64]) -> Vec<Param> {
                self.0.parameters($dims, x)
            }

            fn forward<O: Ops>(
                &self,
                ops: &mut O,
                p: &Params<'_, O::T>,
                x: &O::T,
            ) -> Result<O::T, O::Error> {
                self.0.forward($dims, ops, p, x)
            }
        }
    };
}

convolution!(
    Conv1d,
    "conv1d",
    1,
    "1-D convolution over (channels, length) inputs (`nn.Conv1d`); input channels are inferred."
);
convolution!(
    Conv2d,
    "conv2d",
    2,
    "2-D convolution over (channels, height, width) inputs (`nn.Conv2d`); input channels are inferred."
);

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(out: i64, kernel: i64) -> Conv {
        Conv {
            out,
            kernel,
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
            bias: true,
        }
    }

    #[test]
    fn output_sizes_follow_torch() {
        // torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, dilation=2)(zeros(1, 3, 15, 15)).shape
        // == (1, 8, 7, 7)
        let c = Conv {
            stride: 2,
            padding: 1,
            dilation: 2,
            ..conv(8, 3)
        };
        assert_eq!(Conv2d(c).infer(&[3, 15, 15], false), Ok(vec![8, 7, 7]));
        assert_eq!(Conv1d(conv(4, 5)).infer(&[2, 9], false), Ok(vec![4, 5]));
    }

    #[test]
    fn groups_must_divide_both_channel_counts() {
        let c = Conv {
            groups: 4,
            ..conv(8, 3)
        };
        let err = Conv2d(c).infer(&[6, 8, 8], false).unwrap_err();
        assert_eq!(
            err.message,
            "`conv2d` groups (4) must divide its input channels (6) and its output channels (8)"
        );
    }

    #[test]
    fn a_grouped_weight_has_the_channels_of_one_group() {
        let c = Conv {
            groups: 2,
            bias: false,
            ..conv(8, 3)
        };
        let p = Conv2d(c).parameters(&[4, 8, 8]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].shape, vec![8, 2, 3, 3]);
        assert_eq!(
            p[0].init,
            Init::Uniform {
                bound: 1.0 / 18f64.sqrt()
            }
        );
    }
}
