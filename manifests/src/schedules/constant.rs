//! `schedule "constant"`: the peak learning rate throughout (after any warm-up).

use super::{Length, ScheduleDescription};
use crate::Interval;

pub static CONSTANT: ScheduleDescription = ScheduleDescription {
    name: "constant",
    doc: "the peak learning rate throughout",
    keys: &[],
    counts: Interval::Step,
    length: Length::Unbounded,
    own_warmup: None,
    lr: |p| p.peak,
};
