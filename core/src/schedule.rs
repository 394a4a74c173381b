//! Learning-rate schedules: the learning rate of every optimizer step, each curve as
//! PyTorch's scheduler of that name computes it when stepped after every optimizer step
//! or every epoch (`schedule.interval`); `tests/e2e/schedules.rs` compares every one with
//! PyTorch's own.
//!
//! A linear warm-up from 0 to the peak over `warmup-epochs` comes first; the curve then
//! spans the rest of the training. `reduce-on-plateau` is no curve: [`Plateau`] follows
//! the monitored value at every validation and says the learning rate.

use manifests::{Interval, Mode, PlateauSpec, ScheduleKind, ScheduleSpec};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

#[derive(Debug, Clone)]
pub struct LrSchedule {
    kind: ScheduleKind,
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
        let warmup = spec.warmup_epochs * unit;
        let total = match spec.kind {
            // A cosine of a declared length ends there, whatever the training's length.
            ScheduleKind::Cosine {
                length_epochs: Some(length),
                ..
            } => warmup + length * unit,
            _ => epochs * unit,
        };
        let per_unit = steps_per_epoch / unit;
        LrSchedule {
            kind: spec.kind.clone(),
            peak,
            per_unit,
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
        let peak = self.peak;
        // Units into the curve, and its length.
        let span = self.total.saturating_sub(self.warmup).max(1);
        let into = (t - self.warmup).min(span);
        let done = into as f64 / span as f64;
        match &self.kind {
            ScheduleKind::Constant | ScheduleKind::ReduceOnPlateau(_) => peak,
            // Counted from the start of the training, as `StepLR`.
            ScheduleKind::Step { step_size, gamma } => {
                peak * gamma.powi((t / (*step_size).max(1)) as i32)
            }
            ScheduleKind::Cosine {
                min_lr,
                length_epochs,
            } => {
                // A declared length is PyTorch's `T_max`: past it, the curve rises again.
                let done = match length_epochs {
                    Some(_) => (t - self.warmup) as f64 / span as f64,
                    None => done,
                };
                min_lr + (peak - min_lr) * 0.5 * (1.0 + (PI * done).cos())
            }
            ScheduleKind::Linear { end_factor } => peak * (1.0 + (end_factor - 1.0) * done),
            ScheduleKind::Exponential { gamma } => peak * gamma.powi((t - self.warmup) as i32),
            ScheduleKind::Polynomial { power } => peak * (1.0 - done).powf(*power),
            ScheduleKind::OneCycle {
                pct_start,
                div_factor,
                final_div_factor,
            } => {
                // `OneCycleLR(total_steps=span, anneal_strategy="cos", three_phase=False)`.
                let initial = peak / div_factor;
                let end = initial / final_div_factor;
                let rise = pct_start * span as f64 - 1.0;
                let last = span as f64 - 1.0;
                let i = (t - self.warmup) as f64;
                let cos = |from: f64, to: f64, pct: f64| {
                    to + (from - to) / 2.0 * ((PI * pct.min(1.0)).cos() + 1.0)
                };
                // (A phase of no length is over: PyTorch would divide by zero.)
                let part = |x: f64, of: f64| if of > 0.0 { x / of } else { 1.0 };
                if i <= rise {
                    cos(initial, peak, part(i, rise))
                } else {
                    cos(peak, end, part(i - rise, last - rise))
                }
            }
        }
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

    fn spec(kind: ScheduleKind, warmup_epochs: u64) -> ScheduleSpec {
        ScheduleSpec {
            kind,
            warmup_epochs,
            interval: None,
            script: None,
        }
    }

    #[test]
    fn warmup_rises_linearly_to_the_peak() {
        let s = LrSchedule::new(&spec(ScheduleKind::Constant, 1), 0.1, 10, 5);
        assert!((s.lr_at(0) - 0.01).abs() < 1e-12);
        assert!((s.lr_at(9) - 0.1).abs() < 1e-12);
        assert!((s.lr_at(30) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn step_decays_every_step_size_epochs() {
        let s = LrSchedule::new(
            &spec(
                ScheduleKind::Step {
                    step_size: 2,
                    gamma: 0.5,
                },
                0,
            ),
            1.0,
            10,
            6,
        );
        assert_eq!(s.lr_at(19), 1.0);
        assert_eq!(s.lr_at(20), 0.5);
        assert_eq!(s.lr_at(45), 0.25);
    }

    #[test]
    fn cosine_goes_from_peak_to_min() {
        let s = LrSchedule::new(
            &spec(
                ScheduleKind::Cosine {
                    min_lr: 0.001,
                    length_epochs: None,
                },
                0,
            ),
            0.1,
            10,
            10,
        );
        assert!((s.lr_at(0) - 0.1).abs() < 1e-12);
        assert!((s.lr_at(50) - 0.0505).abs() < 1e-9);
        assert!((s.lr_at(100) - 0.001).abs() < 1e-12);
    }
}
