//! Follows the learning rate of every optimizer step, as the schedule and
//! `reduce-on-plateau` set it (Lightning's `LearningRateMonitor`), and records the last
//! step's in each epoch's record: `lr` in `metrics.jsonl` and in the progress shown.
//! Always on. It reads no device: the learning rate is the loop's own number.

use super::{Callback, Control, Made, Out, Setup, StepEnd};
use crate::observer::EpochRecord;
use tch::TchError;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(Some(Box::new(LrMonitor { lr: setup.lr })))
}

struct LrMonitor {
    /// The learning rate of the last optimizer step (the peak before the first).
    lr: f64,
}

impl Callback for LrMonitor {
    fn name(&self) -> &'static str {
        "lr-monitor"
    }

    fn step_ended(&mut self, step: &StepEnd, _out: &mut Out) -> Result<Control, TchError> {
        if step.boundary {
            self.lr = step.lr;
        }
        Ok(Control::Continue)
    }

    fn record(&mut self, record: &mut EpochRecord) {
        record.lr = self.lr;
    }
}
