//! [`Loader`]: the batches of one pass over some samples (an epoch's share of this
//! process, or a split to evaluate), in order. What is assembled on the host (streamed
//! features read, images decoded and augmented) is assembled by the data set's workers
//! (`data.workers`) up to `data.prefetch` batches ahead, in a bounded queue, while the
//! model computes (so up to `prefetch` + 2 batches are alive: the queue's, the one being
//! assembled and the one training); labels and held inputs are gathered on the device
//! when a batch is taken.
//!
//! The batches are the same whatever the workers and the queue: batch `b` holds samples
//! `b × batch …` of the pass, and its augmentation draws from each sample's own generator.
//! A worker that fails hands its error to the batch it was assembling; the training
//! thread reports it there. Dropping the loader stops its producer at its next batch.

use super::{index_tensor, Dataset};
use std::ops::Range;
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::Scope;
use tch::{TchError, Tensor};

/// The host part of a batch, or why it could not be assembled.
type Assembled = Result<Option<Tensor>, TchError>;

/// The batches of one pass over `samples`.
pub struct Loader<'env> {
    data: &'env Dataset,
    samples: &'env [usize],
    /// The pass's samples on the data's device, narrowed per batch.
    indices: Tensor,
    batch: usize,
    epoch: Option<u64>,
    /// The batch [`Loader::next`] gives next.
    next: usize,
    /// Host parts assembled ahead, in order; `None`: assembled when taken.
    queue: Option<Receiver<Assembled>>,
}

impl<'env> Loader<'env> {
    /// Batches `batches` of `batch` samples of `samples` (a short last batch included
    /// unless the range ends before it: `drop-last`); `epoch` says that they train in that
    /// epoch (augmentation draws for it), `None` that they evaluate. With workers, a
    /// producer in `scope` assembles them ahead.
    pub fn start<'scope>(
        scope: &'scope Scope<'scope, 'env>,
        data: &'env Dataset,
        samples: &'env [usize],
        batch: usize,
        batches: Range<usize>,
        epoch: Option<u64>,
    ) -> Result<Loader<'env>, TchError> {
        let batch = batch.max(1);
        let indices = index_tensor(samples).f_to_device(data.labels.device())?;
        let queue = match (&data.pool, data.host()) {
            (Some(pool), Some(host)) => {
                let (send, receive) = sync_channel::<Assembled>(data.prefetch);
                scope.spawn(move || {
                    let wanted = batches.end.saturating_sub(batches.start);
                    for chunk in samples.chunks(batch).skip(batches.start).take(wanted) {
                        let assembled = pool.install(|| host.assemble(chunk, epoch).map(Some));
                        if send.send(assembled).is_err() {
                            return;
                        }
                    }
                });
                Some(receive)
            }
            _ => None,
        };
        Ok(Loader {
            data,
            samples,
            indices,
            batch,
            epoch,
            next: batches.start,
            queue,
        })
    }

    /// The next batch: the model inputs (in the order of [`Dataset::inputs`]) and the
    /// labels, on the data's device.
    pub fn next_batch(&mut self) -> Result<(Vec<Tensor>, Tensor), TchError> {
        let begin = self.next * self.batch;
        let len = self.batch.min(self.samples.len().saturating_sub(begin));
        if len == 0 {
            return Err(TchError::Kind(format!(
                "batch {} is past the pass's {} samples",
                self.next + 1,
                self.samples.len()
            )));
        }
        self.next += 1;
        let host = match &self.queue {
            Some(queue) => queue
                .recv()
                .map_err(|_| TchError::Kind("the data workers stopped".into()))??,
            None => self
                .data
                .host_input(&self.samples[begin..begin + len], self.epoch)?,
        };
        let indices = self.indices.f_narrow(0, begin as i64, len as i64)?;
        self.data.assemble(&indices, host)
    }
}
