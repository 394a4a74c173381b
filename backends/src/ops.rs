//! [`Torch`]: the layers' [`Ops`] carried out by libtorch, one call each.
//!
//! Layers (`manifests::layers`) write their forward pass against `Ops`; this is the only
//! place that turns those calls into tensors. Every call is one of tch's fallible
//! (`f_`) functions, so what libtorch refuses is a `TchError`, never a panic.

use crate::process_group::ProcessGroup;
use manifests::layers::{Cell, Ops, Unary};
use tch::{Kind, TchError, Tensor};

/// One forward pass: whether it trains, and the processes whose batch statistics
/// batch-norm shares while training (`accelerator.sync-batch-norm`).
pub struct Torch<'a> {
    pub train: bool,
    pub sync: Option<&'a ProcessGroup>,
}

type R = Result<Tensor, TchError>;

impl Ops for Torch<'_> {
    type T = Tensor;
    type Error = TchError;

    fn training(&self) -> bool {
        self.train
    }

    fn rank(&self, x: &Tensor) -> usize {
        x.dim()
    }

    fn size(&self, x: &Tensor, dim: usize) -> i64 {
        x.size().get(dim).copied().unwrap_or(1)
    }

    fn linear(&mut self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> R {
        x.f_linear(w, b)
    }

    fn conv(
        &mut self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
        groups: i64,
    ) -> R {
        match stride.len() {
            1 => x.f_conv1d(w, b, stride, padding, dilation, groups),
            _ => x.f_conv2d(w, b, stride, padding, dilation, groups),
        }
    }

    fn max_pool(&mut self, x: &Tensor, kernel: &[i64], stride: &[i64], padding: &[i64]) -> R {
        match kernel.len() {
            1 => x.f_max_pool1d(kernel, stride, padding, [1], false),
            _ => x.f_max_pool2d(kernel, stride, padding, [1, 1], false),
        }
    }

    fn avg_pool(&mut self, x: &Tensor, kernel: &[i64], stride: &[i64], padding: &[i64]) -> R {
        match kernel.len() {
            1 => x.f_avg_pool1d(kernel, stride, padding, false, true),
            _ => x.f_avg_pool2d(kernel, stride, padding, false, true, None),
        }
    }

    fn adaptive_avg_pool(&mut self, x: &Tensor, output: &[i64]) -> R {
        match output.len() {
            1 => x.f_adaptive_avg_pool1d(output),
            _ => x.f_adaptive_avg_pool2d(output),
        }
    }

    fn mean(&mut self, x: &Tensor, dims: &[i64]) -> R {
        x.f_mean_dim(dims, false, None::<Kind>)
    }

    fn reshape(&mut self, x: &Tensor, shape: &[i64]) -> R {
        x.f_reshape(shape)
    }

    fn flatten(&mut self, x: &Tensor) -> R {
        x.f_flatten(1, -1)
    }

    fn identity(&mut self, x: &Tensor) -> R {
        Ok(x.shallow_clone())
    }

    fn unary(&mut self, x: &Tensor, f: Unary) -> R {
        match f {
            Unary::Relu => x.f_relu(),
            Unary::Gelu => x.f_gelu("none"),
            Unary::Tanh => x.f_tanh(),
            Unary::Sigmoid => x.f_sigmoid(),
            Unary::Silu => x.f_silu(),
            // max(x, slope·x) is leaky_relu for slopes in [0, 1] (the schema's range);
            // tch's leaky_relu has no slope argument.
            Unary::LeakyRelu(slope) => x.f_maximum(&x.f_mul_scalar(slope)?),
        }
    }

    fn softmax(&mut self, x: &Tensor, log: bool) -> R {
        if log {
            x.f_log_softmax(-1, None::<Kind>)
        } else {
            x.f_softmax(-1, None::<Kind>)
        }
    }

    fn dropout(&mut self, x: &Tensor, p: f64) -> R {
        x.f_dropout(p, self.train)
    }

    fn batch_norm(
        &mut self,
        x: &Tensor,
        w: Option<&Tensor>,
        b: Option<&Tensor>,
        running_mean: &Tensor,
        running_var: &Tensor,
        batches: &Tensor,
        momentum: f64,
        eps: f64,
    ) -> R {
        if self.train {
            let _counted = tch::no_grad(|| batches.shallow_clone().f_add_scalar_(1))?;
        }
        match (self.sync.filter(|_| self.train), w, b) {
            (Some(g), Some(w), Some(b)) => {
                g.sync_batch_norm(x, w, b, running_mean, running_var, momentum, eps)
            }
            _ => Tensor::f_batch_norm(
                x,
                w,
                b,
                Some(running_mean),
                Some(running_var),
                self.train,
                momentum,
                eps,
                false,
            ),
        }
    }

    fn layer_norm(
        &mut self,
        x: &Tensor,
        normalized: &[i64],
        w: Option<&Tensor>,
        b: Option<&Tensor>,
        eps: f64,
    ) -> R {
        x.f_layer_norm(normalized, w, b, eps, false)
    }

    fn group_norm(
        &mut self,
        x: &Tensor,
        groups: i64,
        w: Option<&Tensor>,
        b: Option<&Tensor>,
        eps: f64,
    ) -> R {
        x.f_group_norm(groups, w, b, eps, false)
    }

    fn embedding(&mut self, ids: &Tensor, w: &Tensor) -> R {
        Tensor::f_embedding(w, &ids.f_to_kind(Kind::Int64)?, -1, false, false)
    }

    fn add(&mut self, a: &Tensor, b: &Tensor) -> R {
        a.f_add(b)
    }

    fn amax(&mut self, x: &Tensor, dims: &[i64]) -> R {
        x.f_amax(dims, false)
    }

    fn select(&mut self, x: &Tensor, dim: i64, index: i64) -> R {
        x.f_select(dim, index)
    }

    fn narrow(&mut self, x: &Tensor, dim: i64, start: i64, length: i64) -> R {
        x.f_narrow(dim, start, length)
    }

    fn permute(&mut self, x: &Tensor, dims: &[i64]) -> R {
        x.f_permute(dims)
    }

    fn attention(
        &mut self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        dropout: f64,
        mask: Option<&Tensor>,
    ) -> R {
        let p = if self.train { dropout } else { 0.0 };
        // A boolean mask takes part where true: (batch, 1, 1, keys) for every head and query.
        let keys = match mask {
            Some(m) => Some(m.f_ne(0)?.f_unsqueeze(1)?.f_unsqueeze(1)?),
            None => None,
        };
        Tensor::f_scaled_dot_product_attention(q, k, v, keys, p, false, None, false)
    }

    fn mul(&mut self, a: &Tensor, b: &Tensor) -> R {
        a.f_mul(b)
    }

    fn div(&mut self, a: &Tensor, b: &Tensor) -> R {
        a.f_div(b)
    }

    fn sum(&mut self, x: &Tensor, dims: &[i64]) -> R {
        x.f_sum_dim_intlist(dims, false, x.kind())
    }

    fn mask_like(&mut self, mask: &Tensor, like: &Tensor) -> R {
        let mut w = mask.f_ne(0)?.f_to_kind(like.kind())?;
        for _ in 2..like.dim() {
            w = w.f_unsqueeze(-1)?;
        }
        Ok(w)
    }

    fn fill_padding(&mut self, x: &Tensor, mask: &Tensor, value: f64) -> R {
        let mut padding = mask.f_eq(0)?;
        for _ in 2..x.dim() {
            padding = padding.f_unsqueeze(-1)?;
        }
        x.f_masked_fill(&padding, value)
    }

    fn real_step(&mut self, x: &Tensor, mask: &Tensor, last: bool) -> R {
        let real = mask.f_ne(0)?.f_to_kind(Kind::Int64)?;
        let length = real.size().get(1).copied().unwrap_or(1);
        // `argmax` gives the first of equal maxima: the first real step, or from the end.
        let step = if last {
            let from_end = real.f_flip([1])?.f_argmax(1, false)?;
            from_end.f_neg()?.f_add_scalar(length - 1)?
        } else {
            real.f_argmax(1, false)?
        };
        let batch = x.size().first().copied().unwrap_or(1);
        let rows = Tensor::f_arange(batch, (Kind::Int64, x.device()))?;
        x.f_index(&[Some(rows), Some(step)])
    }

    fn recurrent(
        &mut self,
        cell: Cell,
        x: &Tensor,
        weights: &[&Tensor],
        hidden: i64,
        layers: i64,
        bidirectional: bool,
        dropout: f64,
        last: bool,
    ) -> R {
        let directions = if bidirectional { 2 } else { 1 };
        let batch = x.size().first().copied().unwrap_or(1);
        let zeros =
            || Tensor::f_zeros([layers * directions, batch, hidden], (x.kind(), x.device()));
        let (out, h) = match cell {
            Cell::Lstm => {
                let (h0, c0) = (zeros()?, zeros()?);
                let (out, h, _c) = x.f_lstm(
                    &[&h0, &c0],
                    weights,
                    true,
                    layers,
                    dropout,
                    self.train,
                    bidirectional,
                    true,
                )?;
                (out, h)
            }
            Cell::Gru => x.f_gru(
                &zeros()?,
                weights,
                true,
                layers,
                dropout,
                self.train,
                bidirectional,
                true,
            )?,
        };
        if !last {
            return Ok(out);
        }
        // The last layer's final states: (directions, batch, hidden) → (batch, directions·hidden).
        let n = h.size().first().copied().unwrap_or(directions);
        let finals = h.f_narrow(0, n - directions, directions)?;
        finals
            .f_permute([1, 0, 2])?
            .f_reshape([batch, directions * hidden])
    }
}
