//! Step records (`logging { log-every-steps N }`): every N optimizer steps, the mean
//! training loss (and accuracy) of the samples since the last record, as Hugging Face's
//! Trainer logs every `logging_steps`, with the learning rate, the gradients' norm, the
//! loss scale and the throughput.
//!
//! The loss comes from the epoch's running sums, which stay on the device: they are read
//! (and, under `ddp`, summed over the processes) only at a logged step, and a record's
//! window is the difference from the sums read at the one before. What an epoch trained
//! after its last record is carried into the next epoch's first.

use super::processes::sum_values;
use crate::observer::StepRecord;
use crate::process_group::ProcessGroup;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use tch::{TchError, Tensor};

/// Totals of the training batches, over every process: loss × samples, hits, samples, and
/// samples counted for accuracy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub loss: f64,
    pub hits: f64,
    pub seen: f64,
    pub counted: f64,
}

impl Totals {
    /// The epoch's running sums of this process, read from the device.
    pub fn read(
        loss_sum: &Tensor,
        hits_sum: &Tensor,
        seen: i64,
        counted: i64,
    ) -> Result<Totals, TchError> {
        Ok(Totals {
            loss: loss_sum.f_double_value(&[])?,
            hits: hits_sum.f_int64_value(&[])? as f64,
            seen: seen as f64,
            counted: counted as f64,
        })
    }

    /// The mean loss, and the accuracy when samples were counted for it.
    pub fn mean(&self) -> (f64, Option<f64>) {
        let accuracy = (self.counted > 0.0).then(|| self.hits / self.counted);
        (self.loss / self.seen, accuracy)
    }

    fn plus(self, o: Totals) -> Totals {
        Totals {
            loss: self.loss + o.loss,
            hits: self.hits + o.hits,
            seen: self.seen + o.seen,
            counted: self.counted + o.counted,
        }
    }

    fn minus(self, o: Totals) -> Totals {
        Totals {
            loss: self.loss - o.loss,
            hits: self.hits - o.hits,
            seen: self.seen - o.seen,
            counted: self.counted - o.counted,
        }
    }
}

/// What a snapshot keeps of the step records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepLogState {
    /// The epoch's sums at its last record (zero before one).
    pub base: Totals,
    /// The sums after the last record of the epochs before this one.
    pub carry: Totals,
}

/// The step records of one `train` stage.
pub(super) struct StepLog {
    every: u64,
    state: StepLogState,
    /// When the throughput's clock started, and this process's samples of the epoch then.
    clock: Instant,
    clock_seen: i64,
    world: usize,
}

/// Where the loop is when a record is due, and what it has on the device.
pub(super) struct At<'a> {
    pub stage: &'a str,
    pub epoch: u64,
    pub step: u64,
    pub lr: f64,
    /// The epoch's running sums of this process.
    pub loss_sum: &'a Tensor,
    pub hits_sum: &'a Tensor,
    pub seen: i64,
    pub counted: i64,
    pub grad_norm: Option<&'a Tensor>,
    pub loss_scale: Option<&'a Tensor>,
}

impl StepLog {
    /// Step records every `every` optimizer steps (0: none), from where `state` left them
    /// (a snapshot's), with this process's `seen` samples of the epoch so far.
    pub fn new(every: u64, state: Option<StepLogState>, seen: i64, world: usize) -> StepLog {
        StepLog {
            every,
            state: state.unwrap_or_default(),
            clock: Instant::now(),
            clock_seen: seen,
            world,
        }
    }

    /// Whether step `step` (counted over all epochs) gets a record.
    pub fn due(&self, step: u64) -> bool {
        self.every > 0 && step.is_multiple_of(self.every)
    }

    /// An epoch starts from its first batch: its sums start from zero.
    pub fn epoch_started(&mut self) {
        self.state.base = Totals::default();
        self.clock = Instant::now();
        self.clock_seen = 0;
    }

    /// The record of the samples since the last one (reads of the device, and under
    /// `ddp` one sum over the processes, which every process takes at the same step).
    pub fn record(
        &mut self,
        at: &At,
        group: Option<&ProcessGroup>,
    ) -> Result<StepRecord, TchError> {
        let mut now = Totals::read(at.loss_sum, at.hits_sum, at.seen, at.counted)?;
        if let Some(g) = group {
            let [loss, hits, seen, counted] =
                sum_values(g, [now.loss, now.hits, now.seen, now.counted])?;
            now = Totals {
                loss,
                hits,
                seen,
                counted,
            };
        }
        let window = self.state.carry.plus(now.minus(self.state.base));
        let (loss, accuracy) = window.mean();
        self.state = StepLogState {
            base: now,
            carry: Totals::default(),
        };
        let seconds = self.clock.elapsed().as_secs_f64();
        let trained = (at.seen - self.clock_seen) as f64 * self.world as f64;
        self.clock = Instant::now();
        self.clock_seen = at.seen;
        Ok(StepRecord {
            stage: at.stage.to_string(),
            epoch: at.epoch,
            step: at.step,
            loss,
            accuracy,
            samples: window.seen as u64,
            lr: at.lr,
            grad_norm: at.grad_norm.map(|t| t.f_double_value(&[])).transpose()?,
            loss_scale: at.loss_scale.map(|t| t.f_double_value(&[0])).transpose()?,
            samples_per_second: trained / seconds.max(1e-9),
        })
    }

    /// The epoch ended with `totals` (its sums over every process): what it trained after
    /// its last record goes into the next record.
    pub fn epoch_ended(&mut self, totals: Totals) {
        if self.every > 0 {
            self.state.carry = self.state.carry.plus(totals.minus(self.state.base));
            self.state.base = totals;
        }
    }

    /// What a snapshot keeps.
    pub fn state(&self) -> Option<StepLogState> {
        (self.every > 0).then(|| self.state.clone())
    }
}
