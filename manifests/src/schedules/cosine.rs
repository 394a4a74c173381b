//! `schedule "cosine" min-lr=0`: PyTorch's `CosineAnnealingLR`, from the peak down to
//! `min-lr` over the rest of the training, or over `length-epochs` (its `T_max`: past
//! it, the curve rises again).

use super::{Length, ScheduleDescription, MIN_LR};
use crate::schema::{self, int, Key, MAX_EPOCHS};
use crate::Interval;
use std::f64::consts::PI;

pub static COSINE: ScheduleDescription = ScheduleDescription {
    name: "cosine",
    doc: "from the peak down to `min-lr` along half a cosine (`CosineAnnealingLR`)",
    keys: &[&MIN_LR, &LENGTH_EPOCHS],
    counts: Interval::Step,
    length: Length::Key("length-epochs"),
    own_warmup: None,
    lr: |p| {
        let min = p.get("min-lr");
        // A declared length is PyTorch's `T_max`: past it, the curve rises again.
        let done = match p.settings.get("length-epochs") {
            Some(_) => p.into as f64 / p.span as f64,
            None => p.done(),
        };
        min + (p.peak - min) * 0.5 * (1.0 + (PI * done).cos())
    },
};

static LENGTH_EPOCHS: Key = schema::key(
    "length-epochs",
    int(1, MAX_EPOCHS),
    None,
    "The cosine's length after the warm-up, in epochs (PyTorch's `T_max`); absent, it spans the rest of the training. Declared apart from `epochs`, the first epochs do not depend on how many there are, so a longer training continues a cached shorter one instead of starting over.",
);
