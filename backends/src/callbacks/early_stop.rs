//! `train { early-stop monitor="val.loss" mode="min" patience=5 min-delta=1e-4 }`: ends
//! the training after `patience` validations in which the monitored metric did not
//! improve on its best by more than `min-delta` (Lightning's `EarlyStopping`,
//! pytorch-accelerated's `EarlyStoppingCallback`). Its state, the best value, where it
//! was measured and the validations waited, is in every snapshot.

use super::{Callback, Control, Made, Out, Setup, Validation};
use manifests::{EarlyStopSpec, Mode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(setup.spec.early_stop.clone().map(|spec| {
        Box::new(EarlyStop {
            mode: pipeline_core::metrics::mode_of(setup.manifest, &spec.monitor.value, spec.mode),
            key: spec.monitor.value.record_key(),
            // Validating at every epoch's end only, a validation is an epoch.
            unit: match (
                setup.spec.validate.every_epochs,
                setup.spec.validate.every_steps,
            ) {
                (1, 0) => "epochs",
                _ => "validations",
            },
            spec,
            state: State::default(),
        }) as Box<dyn Callback + 'a>
    }))
}

struct EarlyStop {
    spec: EarlyStopSpec,
    mode: Mode,
    /// The monitor's name in a validation's values.
    key: String,
    unit: &'static str,
    state: State,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct State {
    /// The best value so far and its epoch.
    best: Option<(f64, u64)>,
    /// The optimizer step of the best value.
    #[serde(default)]
    best_step: u64,
    /// Validations since the best.
    waited: u64,
}

impl Callback for EarlyStop {
    fn name(&self) -> &'static str {
        "early-stop"
    }

    fn validated(&mut self, v: &Validation, _out: &mut Out) -> Control {
        let monitor = &self.spec.monitor.value;
        // Absent where this process does not measure it: validation is rank 0's.
        let Some(&value) = v.values.get(&self.key) else {
            return Control::Continue;
        };
        // As Lightning's `check_finite`: nothing can improve on a value that is not a
        // number, and none is ever kept as the best.
        if !value.is_finite() {
            return Control::Finish(format!("`{monitor}` became {value} at epoch {}", v.epoch));
        }
        let delta = self.spec.min_delta;
        let improved = match self.state.best {
            None => true,
            Some((best, _)) => match self.mode {
                Mode::Min => value < best - delta,
                Mode::Max => value > best + delta,
            },
        };
        if improved {
            self.state.best = Some((value, v.epoch));
            self.state.best_step = v.step;
            self.state.waited = 0;
            return Control::Continue;
        }
        self.state.waited += 1;
        if self.state.waited < self.spec.patience {
            return Control::Continue;
        }
        let (best, epoch) = self.state.best.expect("a value was seen before waiting");
        let by = match delta > 0.0 {
            true => format!(" by more than {delta}"),
            false => String::new(),
        };
        let at = match self.unit {
            "epochs" => format!("epoch {epoch}"),
            _ => format!("epoch {epoch}, step {}", self.state.best_step),
        };
        Control::Finish(format!(
            "`{monitor}` did not improve{by} for {} {} (best {best:.6} at {at})",
            self.state.waited, self.unit
        ))
    }

    fn state(&self) -> Value {
        serde_json::to_value(&self.state).expect("plain data")
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        self.state = serde_json::from_value(state.clone()).map_err(|e| e.to_string())?;
        Ok(())
    }
}
