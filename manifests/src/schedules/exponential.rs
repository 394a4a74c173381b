//! `schedule "exponential" gamma=0.1`: PyTorch's `ExponentialLR`, × `gamma` every
//! interval after the warm-up.

use super::{Length, ScheduleDescription, GAMMA};
use crate::Interval;

pub static EXPONENTIAL: ScheduleDescription = ScheduleDescription {
    name: "exponential",
    doc: "× `gamma` every interval (`ExponentialLR`)",
    keys: &[&GAMMA],
    counts: Interval::Step,
    length: Length::Unbounded,
    own_warmup: None,
    lr: |p| p.peak * p.get("gamma").powi(p.into as i32),
};
