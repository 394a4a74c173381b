//! Learning-rate schedules: the learning rate of every optimizer step, from the
//! schedule's curve (`manifests::schedules`, each member's own file), stepped after every
//! optimizer step or every epoch (`schedule.interval`); `tests/e2e/schedules.rs` compares
//! every one with PyTorch's own.
//!
//! A linear warm-up from 0 to the peak over `warmup-epochs` comes first; the curve then
//! spans the rest of the training, or its own length. `reduce-on-plateau` is no curve:
//! [`Plateau`] follows the monitored value at every validation and says the learning rate.

use manifests::schedules::{self, Length, Point, ScheduleDescription, Settings};
use manifests::{Interval, Mode, PlateauSpec, ScheduleSpec};
use serde::{Deserialize, Serialize};

/// Adds a schedule a manifest may name (`schedule "NAME"`), for every manifest this
/// process reads after: its keys join the `schedule` section, `check` and `explain` know
/// it, and its curve gives the learning rate of every step after the warm-up. Refused,
/// with why, when its name is taken or one of its keys is not an optional number of its
/// own.
pub fn register_schedule(member: &'static ScheduleDescription) -> Result<(), String> {
    schedules::register(member)
}

#[derive(Debug, Clone)]
pub struct LrSchedule {
    member: &'static ScheduleDescription,
    settings: Settings,
    peak: f64,
    /// Optimizer steps per unit of the curve (1, or the steps of an epoch).
    per_unit: u64,
    warmup: u64,
    total: u64,
}

impl LrSchedule {
    pub fn new(spec: &ScheduleSpec, peak: f64, steps_per_epoch: u64, epochs: u64) -> Self {
        let steps_per_epoch = steps_per_epoch.max(1);
        // Units of the curve per epoch.
        let unit = match spec.interval() {
            Interval::Step => steps_per_epoch,
            Interval::Epoch => 1,
        };
        let member = spec.kind.member.describe();
        let warmup = spec.warmup_epochs * unit;
        let own_length = match member.length {
            Length::Key(key) => spec.kind.settings.get(key),
            Length::Unbounded | Length::Training => None,
        };
        // A curve of its own length ends there, whatever the training's length.
        let total = match own_length {
            Some(length) => warmup + length as u64 * unit,
            None => epochs * unit,
        };
        LrSchedule {
            member,
            settings: spec.kind.settings.clone(),
            peak,
            per_unit: steps_per_epoch / unit,
            warmup,
            total,
        }
    }

    /// The learning rate for optimizer step `step` (counted from 0).
    pub fn lr_at(&self, step: u64) -> f64 {
        let t = step / self.per_unit;
        if t < self.warmup {
            return self.peak * (t + 1) as f64 / self.warmup as f64;
        }
        (self.member.lr)(&Point {
            peak: self.peak,
            t,
            into: t - self.warmup,
            span: self.total.saturating_sub(self.warmup).max(1),
            settings: &self.settings,
        })
    }
}

/// PyTorch's `ReduceLROnPlateau` (`threshold_mode="rel"`, `eps=1e-8`): the learning rate
/// after each validation's value. Its whole state is serialisable, for snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plateau {
    /// The learning rate now.
    pub lr: f64,
    /// The best value so far (`None` before the first).
    best: Option<f64>,
    /// Validations without improvement.
    bad: u64,
    /// Validations left in the cool-down after a reduction.
    cooldown_left: u64,
}

impl Plateau {
    pub fn new(peak: f64) -> Plateau {
        Plateau {
            lr: peak,
            best: None,
            bad: 0,
            cooldown_left: 0,
        }
    }

    /// Follows one validation's `value`; the learning rate from now on.
    pub fn step(&mut self, spec: &PlateauSpec, mode: Mode, value: f64) -> f64 {
        // Before the first value, the best is PyTorch's ±infinity (which JSON cannot hold).
        let better = match (self.best, mode) {
            (None, Mode::Min) => value < f64::INFINITY,
            (None, Mode::Max) => value > f64::NEG_INFINITY,
            (Some(best), Mode::Min) => value < best * (1.0 - spec.threshold),
            (Some(best), Mode::Max) => value > best * (1.0 + spec.threshold),
        };
        if better {
            self.best = Some(value);
            self.bad = 0;
        } else {
            self.bad += 1;
        }
        if self.cooldown_left > 0 {
            self.cooldown_left -= 1;
            self.bad = 0;
        }
        if self.bad > spec.patience {
            let reduced = (self.lr * spec.factor).max(spec.min_lr);
            if self.lr - reduced > 1e-8 {
                self.lr = reduced;
            }
            self.cooldown_left = spec.cooldown;
            self.bad = 0;
        }
        self.lr
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifests::schedules::{Number, Schedule, ScheduleKind};

    fn spec(name: &str, settings: &[(&'static str, Number)], warmup_epochs: u64) -> ScheduleSpec {
        let mut s = Settings::default();
        for (key, value) in settings {
            s.insert(key, *value);
        }
        ScheduleSpec {
            kind: ScheduleKind {
                member: Schedule::named(name).unwrap(),
                settings: s,
                plateau: None,
            },
            warmup_epochs,
            interval: None,
            script: None,
        }
    }

    #[test]
    fn warmup_rises_linearly_to_the_peak() {
        let s = LrSchedule::new(&spec("constant", &[], 1), 0.1, 10, 5);
        assert!((s.lr_at(0) - 0.01).abs() < 1e-12);
        assert!((s.lr_at(9) - 0.1).abs() < 1e-12);
        assert!((s.lr_at(30) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn step_decays_every_step_size_epochs() {
        let settings = [("step-size", Number::Int(2)), ("gamma", Number::Float(0.5))];
        let s = LrSchedule::new(&spec("step", &settings, 0), 1.0, 10, 6);
        assert_eq!(s.lr_at(19), 1.0);
        assert_eq!(s.lr_at(20), 0.5);
        assert_eq!(s.lr_at(45), 0.25);
    }

    #[test]
    fn cosine_goes_from_peak_to_min() {
        let settings = [("min-lr", Number::Float(0.001))];
        let s = LrSchedule::new(&spec("cosine", &settings, 0), 0.1, 10, 10);
        assert!((s.lr_at(0) - 0.1).abs() < 1e-12);
        assert!((s.lr_at(50) - 0.0505).abs() < 1e-9);
        assert!((s.lr_at(100) - 0.001).abs() < 1e-12);
    }
}
