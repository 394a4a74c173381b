//! `schedule "polynomial" power=1`: PyTorch's `PolynomialLR`, the peak × (1 − t / T)^power
//! over the rest of the training.

use super::{Length, ScheduleDescription};
use crate::schema::{self, Key, Val, POSITIVE};
use crate::Interval;

pub static POLYNOMIAL: ScheduleDescription = ScheduleDescription {
    name: "polynomial",
    doc: "the peak × (1 − t / T)^`power`, down to 0 (`PolynomialLR`)",
    keys: &[&POWER],
    counts: Interval::Step,
    length: Length::Training,
    own_warmup: None,
    lr: |p| p.peak * (1.0 - p.done()).powf(p.get("power")),
};

static POWER: Key = schema::key(
    "power",
    POSITIVE,
    Some(Val::Float(1.0)),
    "The polynomial's power.",
);
