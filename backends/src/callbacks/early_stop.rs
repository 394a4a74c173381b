//! `train { early-stop monitor="val.loss" mode="min" patience=5 min-delta=1e-4 }`: ends
//! the training after `patience` epochs in which the monitored metric did not improve on
//! its best by more than `min-delta` (Lightning's `EarlyStopping`, pytorch-accelerated's
//! `EarlyStoppingCallback`). Its state, the best value, its epoch and the epochs waited,
//! is in every snapshot.

use super::{Callback, Control, Setup};
use crate::observer::EpochRecord;
use manifests::{EarlyStopSpec, Mode, Monitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tch::TchError;

pub fn make(setup: &Setup) -> Result<Option<Box<dyn Callback>>, TchError> {
    Ok(setup.spec.early_stop.clone().map(|spec| {
        Box::new(EarlyStop {
            spec,
            state: State::default(),
        }) as Box<dyn Callback>
    }))
}

struct EarlyStop {
    spec: EarlyStopSpec,
    state: State,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct State {
    /// The best value so far and its epoch.
    best: Option<(f64, u64)>,
    /// Epochs since the best.
    waited: u64,
}

/// The monitored value in an epoch's record (`None` where this process does not have it:
/// validation is rank 0's).
pub fn monitored(monitor: Monitor, record: &EpochRecord) -> Option<f64> {
    match monitor {
        Monitor::Loss => Some(record.loss),
        Monitor::Accuracy => record.accuracy,
        Monitor::ValLoss => record.val_loss,
        Monitor::ValAccuracy => record.val_accuracy,
    }
}

impl Callback for EarlyStop {
    fn name(&self) -> &'static str {
        "early-stop"
    }

    fn epoch_ended(&mut self, record: &EpochRecord) -> Control {
        let monitor = self.spec.monitor.value;
        let Some(value) = monitored(monitor, record) else {
            return Control::Continue;
        };
        // As Lightning's `check_finite`: nothing can improve on a value that is not a
        // number, and none is ever kept as the best.
        if !value.is_finite() {
            return Control::Finish(format!(
                "`{}` became {value} at epoch {}",
                monitor.as_str(),
                record.epoch
            ));
        }
        let delta = self.spec.min_delta;
        let improved = match self.state.best {
            None => true,
            Some((best, _)) => match self.spec.mode {
                Mode::Min => value < best - delta,
                Mode::Max => value > best + delta,
            },
        };
        if improved {
            self.state.best = Some((value, record.epoch));
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
        Control::Finish(format!(
            "`{}` did not improve{by} for {} epochs (best {best:.6} at epoch {epoch})",
            monitor.as_str(),
            self.state.waited
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
