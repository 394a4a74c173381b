//! `schedule "one-cycle"`: PyTorch's `OneCycleLR` (cosine annealing, three_phase off, the
//! learning rate only), rising from the peak / `div-factor` to the peak over `pct-start`
//! of the training, then down to the start / `final-div-factor`.

use super::{Length, ScheduleDescription};
use crate::schema::{self, Bound, Key, Ty, Val, POSITIVE};
use crate::Interval;
use std::f64::consts::PI;

pub static ONE_CYCLE: ScheduleDescription = ScheduleDescription {
    name: "one-cycle",
    doc: "up from the peak / `div-factor` to the peak, then down to far below (`OneCycleLR`, cosine, the learning rate only)",
    keys: &[&PCT_START, &DIV_FACTOR, &FINAL_DIV_FACTOR],
    counts: Interval::Step,
    length: Length::Training,
    own_warmup: Some("pct-start"),
    lr: |p| {
        // `OneCycleLR(total_steps=span, anneal_strategy="cos", three_phase=False)`.
        let initial = p.peak / p.get("div-factor");
        let end = initial / p.get("final-div-factor");
        let rise = p.get("pct-start") * p.span as f64 - 1.0;
        let last = p.span as f64 - 1.0;
        let i = p.into as f64;
        let cos = |from: f64, to: f64, pct: f64| {
            to + (from - to) / 2.0 * ((PI * pct.min(1.0)).cos() + 1.0)
        };
        // (A phase of no length is over: PyTorch would divide by zero.)
        let part = |x: f64, of: f64| if of > 0.0 { x / of } else { 1.0 };
        if i <= rise {
            cos(initial, p.peak, part(i, rise))
        } else {
            cos(p.peak, end, part(i - rise, last - rise))
        }
    },
};

static PCT_START: Key = schema::key(
    "pct-start",
    Ty::Float {
        min: Bound::Exclusive(0.0),
        max: Bound::Exclusive(1.0),
    },
    Some(Val::Float(0.3)),
    "The fraction of the training spent rising to the peak.",
);

static DIV_FACTOR: Key = schema::key(
    "div-factor",
    POSITIVE,
    Some(Val::Float(25.0)),
    "The curve starts at the peak / `div-factor`.",
);

static FINAL_DIV_FACTOR: Key = schema::key(
    "final-div-factor",
    POSITIVE,
    Some(Val::Float(1e4)),
    "… and ends at the start / `final-div-factor`.",
);
