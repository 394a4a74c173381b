//! The optimizer step of a `train` stage, on the gradients accumulated since the last one.

use crate::accelerator::Strategy;
use crate::numerics::{self, Scaler};
use crate::optimizer::Optimizer;
use crate::process_group::ProcessGroup;
use manifests::Clipping;
use std::time::{Duration, Instant};
use tch::{TchError, Tensor};

/// One optimizer step: the gradients reduced over the processes by the strategy
/// (averaged, under `ddp` and `zero1`), unscaled (`16-mixed`:
/// the step is skipped when they are not finite) and clipped, the only reasons to touch
/// them between backward and the step; under `zero1`, each process's `shards` sent to
/// the others by their owner. Then the loss scaler updates and the gradients are zeroed.
/// With `norm`, the gradients' total norm is taken even when clipping does not take it.
pub(super) fn optimizer_step(
    opt: &mut Optimizer,
    mut scaler: Option<&mut Scaler>,
    shards: &mut [Vec<Tensor>],
    group: Option<(&ProcessGroup, &dyn Strategy)>,
    clipping: Option<&Clipping>,
    bucket_bytes: usize,
    norm: bool,
) -> Result<Stepped, TchError> {
    let mut comm = Duration::ZERO;
    let mut grad_norm = None;
    let mut grads = match group.is_some() || scaler.is_some() || clipping.is_some() || norm {
        true => opt.grads(),
        false => Vec::new(),
    };
    if let Some((g, strategy)) = group {
        let started = Instant::now();
        strategy.reduce_gradients(g, &mut grads, bucket_bytes)?;
        comm += started.elapsed();
    }
    let finite = match scaler.as_deref_mut() {
        Some(scaler) => scaler.unscale(&mut grads)?,
        None => true,
    };
    if finite {
        // The norm before clipping, as `clip_grad_norm_` gives it.
        if norm && clipping.is_none_or(|c| c.max_norm.is_none()) {
            grad_norm = numerics::grad_norm(&mut grads)?;
        }
        if let Some(clipping) = clipping {
            grad_norm = numerics::clip(&mut grads, clipping)?.or(grad_norm);
        }
        opt.step()?;
        if let (false, Some((g, _))) = (shards.is_empty(), group) {
            let started = Instant::now();
            for (owner, mine) in shards.iter_mut().enumerate() {
                g.broadcast_all(mine, owner)?;
            }
            comm += started.elapsed();
        }
    }
    if let Some(scaler) = scaler {
        scaler.update()?;
    }
    opt.zero_grad()?;
    Ok(Stepped { comm, grad_norm })
}

/// What an optimizer step leaves to report.
pub(super) struct Stepped {
    /// The time spent communicating.
    pub comm: Duration,
    /// The gradients' total norm before clipping, on the device, when it was taken (not
    /// on a step the loss scaler skipped).
    pub grad_norm: Option<Tensor>,
}
