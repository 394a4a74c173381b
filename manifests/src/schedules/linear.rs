//! `schedule "linear" end-factor=0`: PyTorch's `LinearLR` from the peak down to
//! `end-factor` × the peak, over the rest of the training.

use super::{Length, ScheduleDescription};
use crate::schema::{self, Key, Val, NON_NEGATIVE};
use crate::Interval;

pub static LINEAR: ScheduleDescription = ScheduleDescription {
    name: "linear",
    doc: "in a straight line from the peak to `end-factor` × the peak (`LinearLR`)",
    keys: &[&END_FACTOR],
    counts: Interval::Step,
    length: Length::Training,
    own_warmup: None,
    lr: |p| p.peak * (1.0 + (p.get("end-factor") - 1.0) * p.done()),
};

static END_FACTOR: Key = schema::key(
    "end-factor",
    NON_NEGATIVE,
    Some(Val::Float(0.0)),
    "The learning rate at the end, as a fraction of the peak.",
);
