//! `schedule "reduce-on-plateau" monitor="val.loss" factor=0.1 patience=10`: PyTorch's
//! `ReduceLROnPlateau` (relative threshold). No curve: the peak, multiplied by `factor`
//! whenever `monitor` has not improved for more than `patience` validations, decided at
//! every validation (`pipeline_core::schedule::Plateau`, followed by the training's
//! rates, `backends/src/train/rates.rs`, its state in every snapshot).

use super::{Length, ScheduleDescription, MIN_LR};
use crate::schema::{self, int, Bound, Key, Ty, Val, MAX_STEPS, MODE_DOC, NON_NEGATIVE};
use crate::{Interval, Mode};

pub static REDUCE_ON_PLATEAU: ScheduleDescription = ScheduleDescription {
    name: "reduce-on-plateau",
    doc: "× `factor` when `monitor` stops improving, at every validation (`ReduceLROnPlateau`)",
    keys: &[
        &MONITOR, &MODE, &FACTOR, &PATIENCE, &THRESHOLD, &COOLDOWN, &MIN_LR,
    ],
    counts: Interval::Step,
    length: Length::Unbounded,
    own_warmup: None,
    // The reductions are the rates' (at each validation); the curve is flat.
    lr: |p| p.peak,
};

/// What it watches: a schedule that takes this key is driven by a monitor.
pub(crate) static MONITOR: Key = schema::key(
    "monitor",
    Ty::Text,
    None,
    "The value watched at every validation (required): as `train.early-stop`'s `monitor` (`pipeline explain train.early-stop`).",
);

static MODE: Key = schema::key("mode", Ty::Choice(Mode::NAMES), None, MODE_DOC);

static FACTOR: Key = schema::key(
    "factor",
    Ty::Float {
        min: Bound::Exclusive(0.0),
        max: Bound::Exclusive(1.0),
    },
    Some(Val::Float(0.1)),
    "What the learning rate is multiplied by on a plateau.",
);

static PATIENCE: Key = schema::key(
    "patience",
    int(0, MAX_STEPS),
    Some(Val::Int(10)),
    "Validations without improvement tolerated; the next one reduces the learning rate.",
);

static THRESHOLD: Key = schema::key(
    "threshold",
    NON_NEGATIVE,
    Some(Val::Float(1e-4)),
    "An improvement beats the best by more than this fraction of it (PyTorch's `threshold_mode=\"rel\"`).",
);

static COOLDOWN: Key = schema::key(
    "cooldown",
    int(0, MAX_STEPS),
    Some(Val::Int(0)),
    "Validations after a reduction before counting again.",
);
