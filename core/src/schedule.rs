//! Learning-rate schedules, evaluated per optimizer step.
//!
//! Linear warm-up from 0 to the peak over `warmup-epochs`, then the schedule's shape:
//! constant, step decay (every `step-size` epochs, counted from the start of training,
//! as PyTorch's `StepLR`), or cosine annealing to `min-lr` over the remaining steps.

use manifests::{ScheduleKind, ScheduleSpec};
use std::f64::consts::PI;

#[derive(Debug, Clone)]
pub struct LrSchedule {
    kind: ScheduleKind,
    peak: f64,
    steps_per_epoch: u64,
    warmup_steps: u64,
    total_steps: u64,
}

impl LrSchedule {
    pub fn new(spec: &ScheduleSpec, peak: f64, steps_per_epoch: u64, epochs: u64) -> Self {
        let steps_per_epoch = steps_per_epoch.max(1);
        LrSchedule {
            kind: spec.kind.clone(),
            peak,
            steps_per_epoch,
            warmup_steps: spec.warmup_epochs * steps_per_epoch,
            total_steps: epochs * steps_per_epoch,
        }
    }

    /// The learning rate for optimizer step `step` (counted from 0).
    pub fn lr_at(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        match self.kind {
            ScheduleKind::Constant => self.peak,
            ScheduleKind::Step { step_size, gamma } => {
                let epoch = step / self.steps_per_epoch;
                self.peak * gamma.powi((epoch / step_size.max(1)) as i32)
            }
            ScheduleKind::Cosine { min_lr } => {
                let span = self.total_steps.saturating_sub(self.warmup_steps).max(1);
                let t = (step - self.warmup_steps).min(span) as f64 / span as f64;
                min_lr + (self.peak - min_lr) * 0.5 * (1.0 + (PI * t).cos())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: ScheduleKind, warmup_epochs: u64) -> ScheduleSpec {
        ScheduleSpec {
            kind,
            warmup_epochs,
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
            &spec(ScheduleKind::Cosine { min_lr: 0.001 }, 0),
            0.1,
            10,
            10,
        );
        assert!((s.lr_at(0) - 0.1).abs() < 1e-12);
        assert!((s.lr_at(50) - 0.0505).abs() < 1e-9);
        assert!((s.lr_at(100) - 0.001).abs() < 1e-12);
    }
}
