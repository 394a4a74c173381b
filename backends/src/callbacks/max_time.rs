//! `train { max-time SECONDS }`: ends the training at the first optimizer step after that
//! much training time (Lightning's `max_time`). The time spent so far is in every
//! snapshot, so a resumed run spends what is left. With several processes or on a GPU it
//! is read every [`CHECK_EVERY`] steps, where the processes agree (rank 0's clock
//! decides).

use super::{Callback, Control, Made, Out, Setup, StepEnd, CHECK_EVERY};
use serde_json::Value;
use std::time::{Duration, Instant};
use tch::TchError;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(setup.spec.max_time.map(|max| {
        Box::new(MaxTime {
            max,
            spent: Duration::ZERO,
            since: Instant::now(),
            every: match setup.world > 1 {
                true => CHECK_EVERY,
                false => 1,
            },
        }) as Box<dyn Callback + 'a>
    }))
}

struct MaxTime {
    max: f64,
    /// Training time before `since` (in runs before a resume).
    spent: Duration,
    since: Instant,
    every: u64,
}

impl MaxTime {
    fn seconds(&self) -> f64 {
        (self.spent + self.since.elapsed()).as_secs_f64()
    }
}

impl Callback for MaxTime {
    fn name(&self) -> &'static str {
        "max-time"
    }

    fn step_ended(&mut self, step: &StepEnd, _out: &mut Out) -> Result<Control, TchError> {
        let due = step.boundary && step.step.is_multiple_of(self.every);
        Ok(match due && self.seconds() >= self.max {
            true => Control::Finish(format!(
                "it reached `max-time {}` ({:.1} s of training)",
                self.max,
                self.seconds()
            )),
            false => Control::Continue,
        })
    }

    fn state(&self) -> Value {
        serde_json::json!({ "seconds": self.seconds() })
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        let seconds = state["seconds"]
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or("no `seconds`")?;
        self.spent = Duration::from_secs_f64(seconds);
        self.since = Instant::now();
        Ok(())
    }
}
