//! `schedule "warm-restarts" restart-every=10 cycle-mult=2 min-lr=0`: PyTorch's
//! `CosineAnnealingWarmRestarts` (SGDR, Loshchilov & Hutter, 2017): a cosine from the
//! peak down to `min-lr` over `restart-every` intervals, then back at the peak for a
//! cycle `cycle-mult` times as long, and so on. No length of its own beyond the cycles,
//! so a longer training continues a cached shorter one.

use manifests::schedules::{Length, Point, ScheduleDescription, MIN_LR};
use manifests::schema::{self, Bound, Key, Ty, Val};
use manifests::Interval;
use std::f64::consts::PI;

pub static WARM_RESTARTS: ScheduleDescription = ScheduleDescription {
    name: "warm-restarts",
    doc: "cosine cycles from the peak down to `min-lr`, each `cycle-mult` times as long as the one before (`CosineAnnealingWarmRestarts`)",
    // `min-lr` is the built-in key itself: the same meaning.
    keys: &[&RESTART_EVERY, &CYCLE_MULT, &MIN_LR],
    counts: Interval::Step,
    length: Length::Unbounded,
    own_warmup: None,
    lr,
};

/// PyTorch's recursion (`T_cur += 1; if T_cur >= T_i: T_cur -= T_i; T_i *= T_mult`),
/// over whole cycles: a remainder when every cycle is as long, else one pass per cycle
/// so far — a logarithmic number, as `cycle-mult` is a whole number ≥ 2 then (PyTorch's
/// `T_mult` is an integer; a factor just above 1 would make the cycles as many as the
/// steps, and every step's rate a long loop).
fn lr(p: &Point) -> f64 {
    let (first, min) = (p.get("restart-every"), p.get("min-lr"));
    let mult = p.get("cycle-mult").round();
    let mut into = p.into as f64;
    let mut cycle = first;
    if mult == 1.0 {
        into %= cycle;
    } else {
        while into >= cycle {
            into -= cycle;
            cycle *= mult;
        }
    }
    min + (p.peak - min) * (1.0 + (PI * into / cycle).cos()) / 2.0
}

static RESTART_EVERY: Key = schema::key(
    "restart-every",
    Ty::Float {
        min: Bound::Inclusive(1.0),
        max: Bound::None,
    },
    Some(Val::Float(10.0)),
    "The first cycle's length, in intervals (optimizer steps, or epochs with `interval=\"epoch\"`): PyTorch's `T_0`.",
);

static CYCLE_MULT: Key = schema::key(
    "cycle-mult",
    Ty::Float {
        min: Bound::Inclusive(1.0),
        max: Bound::None,
    },
    Some(Val::Float(1.0)),
    "Each cycle's length over the one before, a whole number (rounded): PyTorch's `T_mult`.",
);
