//! [`Strategy`]: how the processes of a run share its training (Lightning's
//! `Strategy`). One file per built-in member: `none`, `ddp`, `zero1`.

mod ddp;
mod none;
mod zero1;

use crate::process_group::ProcessGroup;
use manifests::accelerator::StrategyDescription;
use tch::{TchError, Tensor};

/// A strategy: what is done to the gradients between the backward pass and the
/// optimizer step, and which process keeps which parameters' optimizer state. The
/// processes and their group are set up before (`pipeline run --nproc-per-node`,
/// torchrun, srun); checkpoints are saved from rank 0's weights, which every strategy
/// keeps whole and in step.
pub trait Strategy: Send + Sync {
    fn describe(&self) -> &'static StrategyDescription;

    /// Makes every process's gradients the same (the average over the processes, for
    /// data parallel). `grads` are the trainable parameters' gradients, in a fixed
    /// order; `bucket_bytes` is `accelerator.bucket-mb`, for strategies that send them
    /// in buckets. Called only with several processes.
    fn reduce_gradients(
        &self,
        group: &ProcessGroup,
        grads: &mut [Tensor],
        bucket_bytes: usize,
    ) -> Result<(), TchError> {
        group.average(grads, bucket_bytes)
    }

    /// Which process updates (and keeps the optimizer state of) each of the `params`,
    /// when the state is sharded; each owner then sends its parameters to the others
    /// after its step. `None`: every process updates them all.
    fn owners(&self, _params: &[Tensor], _world: usize) -> Option<Vec<usize>> {
        None
    }
}

pub(super) fn builtins() -> Vec<&'static dyn Strategy> {
    vec![&none::Single, &ddp::Ddp, &zero1::Zero1]
}
