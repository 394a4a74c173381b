//! Pooling: `max-pool` and `avg-pool` windows over (channels, length) or (channels,
//! height, width) samples (`nn.MaxPool1d/2d`, `nn.AvgPool1d/2d`), `adaptive-avg-pool`
//! to a fixed output size (`nn.AdaptiveAvgPool1d/2d`), and `global-avg-pool`, the mean
//! over every spatial position (`nn.AdaptiveAvgPool2d(1)` then `flatten`).

use super::{show_shape, window_out, LayerType, Ops, Params, Shape, ShapeError};
use crate::reader::Fields;
use crate::schema::{int, key, required, section, Key, Section, Ty, Val, MAX_FEATURES, MAX_KERNEL};
use serde::Serialize;

/// A pooling window: the same along every spatial dimension.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    pub kernel: i64,
    pub stride: i64,
    pub padding: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct MaxPool(pub Window);

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct AvgPool(pub Window);

const WINDOW_KEYS: &[Key] = &[
    key(
        "kernel",
        int(1, MAX_KERNEL),
        Some(Val::Int(2)),
        "Window size (the same along every spatial dimension).",
    ),
    key(
        "stride",
        int(1, MAX_KERNEL),
        None,
        "Stride (default: the kernel size).",
    ),
    key(
        "padding",
        int(0, MAX_KERNEL),
        Some(Val::Int(0)),
        "Padding on each side (at most half the kernel).",
    ),
];

/// The spatial dimensions of `x` = (channels, spatial…): 1 or 2, or an error for `name`.
fn spatial(name: &str, x: &[i64]) -> Result<usize, ShapeError> {
    match x.len() {
        2 | 3 => Ok(x.len() - 1),
        _ => Err(ShapeError::new(
            format!(
                "`{name}` needs (channels, length) or (channels, height, width) inputs, but gets {}",
                show_shape(x)
            ),
            "pool after a `conv1d` or `conv2d`, or `reshape C H W` first",
        )),
    }
}

impl Window {
    fn lower(f: &Fields) -> Window {
        Window {
            kernel: f.int("kernel"),
            stride: f.opt_int("stride").unwrap_or_else(|| f.int("kernel")),
            padding: f.int("padding"),
        }
    }

    fn infer(&self, name: &str, x: &[i64]) -> Result<Shape, ShapeError> {
        spatial(name, x)?;
        if self.padding * 2 > self.kernel {
            return Err(ShapeError::new(
                format!(
                    "`{name}` padding ({}) must be at most half its kernel ({})",
                    self.padding, self.kernel
                ),
                "lower the padding",
            ));
        }
        let mut y = vec![x[0]];
        for &size in &x[1..] {
            let o = window_out(size, self.kernel, self.stride, self.padding, 1);
            if o < 1 {
                let sizes: Vec<String> = x[1..].iter().map(i64::to_string).collect();
                return Err(ShapeError::new(
                    format!(
                        "the `{name}` window ({}) is larger than its {} input",
                        self.kernel,
                        sizes.join("×")
                    ),
                    "use a smaller window",
                ));
            }
            y.push(o);
        }
        Ok(y)
    }

    /// `(kernel, stride, padding)`, one value per spatial dimension of the batch `x`.
    fn each(&self, dims: usize) -> [Vec<i64>; 3] {
        [
            vec![self.kernel; dims],
            vec![self.stride; dims],
            vec![self.padding; dims],
        ]
    }
}

impl LayerType for MaxPool {
    const SCHEMA: Section = section(
        "max-pool",
        &["kernel"],
        WINDOW_KEYS,
        "Max pooling over (channels, length) or (channels, height, width) inputs.",
    );

    fn lower(f: &Fields) -> Self {
        MaxPool(Window::lower(f))
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        self.0.infer("max-pool", x)
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let [k, s, p] = self.0.each(dims_of(ops, x));
        ops.max_pool(x, &k, &s, &p)
    }
}

impl LayerType for AvgPool {
    const SCHEMA: Section = section(
        "avg-pool",
        &["kernel"],
        WINDOW_KEYS,
        "Average pooling over (channels, length) or (channels, height, width) inputs; padded positions count as zeros.",
    );

    fn lower(f: &Fields) -> Self {
        AvgPool(Window::lower(f))
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        self.0.infer("avg-pool", x)
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let [k, s, p] = self.0.each(dims_of(ops, x));
        ops.avg_pool(x, &k, &s, &p)
    }
}

/// The spatial dimensions of a batch: its rank less the batch and the channels.
fn dims_of<O: Ops>(ops: &O, x: &O::T) -> usize {
    ops.rank(x).saturating_sub(2)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GlobalAvgPool {}

impl LayerType for GlobalAvgPool {
    const SCHEMA: Section = section(
        "global-avg-pool",
        &[],
        &[],
        "The mean over every spatial position: (channels, …) → (channels); `nn.AdaptiveAvgPool2d(1)` followed by `flatten`.",
    );

    fn lower(_: &Fields) -> Self {
        GlobalAvgPool {}
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        spatial("global-avg-pool", x)?;
        Ok(vec![x[0]])
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let dims: Vec<i64> = (2..ops.rank(x) as i64).collect();
        ops.mean(x, &dims)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdaptiveAvgPool {
    /// One size per spatial dimension, or one for all of them.
    pub size: Vec<i64>,
}

impl LayerType for AdaptiveAvgPool {
    const SCHEMA: Section = section(
        "adaptive-avg-pool",
        &["size"],
        &[required(
            "size",
            Ty::Ints { max: MAX_FEATURES },
            "The output size: one value for every spatial dimension (`adaptive-avg-pool 4`), or one per dimension (`adaptive-avg-pool 4 2`).",
        )],
        "Average pooling to a fixed output size whatever the input size (`nn.AdaptiveAvgPool1d/2d`).",
    );

    fn lower(f: &Fields) -> Self {
        AdaptiveAvgPool {
            size: f.ints("size"),
        }
    }

    fn infer(&self, x: &[i64], _first: bool) -> Result<Shape, ShapeError> {
        let dims = spatial("adaptive-avg-pool", x)?;
        let size = self.output(dims).ok_or_else(|| {
            ShapeError::new(
                format!(
                    "`adaptive-avg-pool` has {} sizes for {dims} spatial dimension(s)",
                    self.size.len()
                ),
                format!("give one size, or {dims}"),
            )
        })?;
        Ok(std::iter::once(x[0]).chain(size).collect())
    }

    fn forward<O: Ops>(
        &self,
        ops: &mut O,
        _p: &Params<'_, O::T>,
        x: &O::T,
    ) -> Result<O::T, O::Error> {
        let dims = dims_of(ops, x);
        // `infer` accepted the sizes for this rank.
        let size = self.output(dims).unwrap_or_else(|| self.size.clone());
        ops.adaptive_avg_pool(x, &size)
    }
}

impl AdaptiveAvgPool {
    fn output(&self, dims: usize) -> Option<Vec<i64>> {
        match self.size[..] {
            [one] => Some(vec![one; dims]),
            _ if self.size.len() == dims => Some(self.size.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_take_one_or_two_spatial_dimensions() {
        let w = Window {
            kernel: 2,
            stride: 2,
            padding: 0,
        };
        assert_eq!(MaxPool(w.clone()).infer(&[4, 9], false), Ok(vec![4, 4]));
        assert_eq!(AvgPool(w).infer(&[4, 8, 6], false), Ok(vec![4, 4, 3]));
        assert_eq!(GlobalAvgPool {}.infer(&[16, 4, 4], false), Ok(vec![16]));
        let a = AdaptiveAvgPool { size: vec![2] };
        assert_eq!(a.infer(&[3, 7, 9], false), Ok(vec![3, 2, 2]));
        let bad = AdaptiveAvgPool { size: vec![2, 2] };
        assert!(bad.infer(&[3, 7], false).is_err());
    }
}
