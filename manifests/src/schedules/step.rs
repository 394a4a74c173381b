//! `schedule "step" step-size=10 gamma=0.1`: PyTorch's `StepLR`, × `gamma` every
//! `step-size` intervals counted from the start of the training (epochs by default).

use super::{Length, ScheduleDescription, GAMMA};
use crate::schema::{self, int, Key, Val, MAX_STEPS};
use crate::Interval;

pub static STEP: ScheduleDescription = ScheduleDescription {
    name: "step",
    doc: "× `gamma` every `step-size` intervals, epochs by default (`StepLR`)",
    keys: &[&STEP_SIZE, &GAMMA],
    counts: Interval::Epoch,
    length: Length::Unbounded,
    own_warmup: None,
    lr: |p| {
        let size = (p.get("step-size") as u64).max(1);
        p.peak * p.get("gamma").powi((p.t / size) as i32)
    },
};

static STEP_SIZE: Key = schema::key(
    "step-size",
    int(1, MAX_STEPS),
    Some(Val::Int(10)),
    "Intervals between two decays (epochs, by default).",
);
