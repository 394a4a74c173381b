//! Writes the run's `metrics.jsonl` (pytorch-accelerated's `LogMetricsCallback`,
//! Lightning's `CSVLogger`): a line per epoch with its training metrics, its validation
//! metrics when it was validated, the learning rate and the throughput (`"record":
//! "epoch"`), a line per validation within an epoch (`validate every-steps=N`, `"record":
//! "validation"`) and a line per step record (`logging { log-every-steps N }`, `"record":
//! "step"`). Always on; under `ddp` every process writes its own (rank 0's is the run's).

use super::{Callback, Control, Made, Out, Setup, Validation};
use crate::observer::{EpochRecord, StepRecord};
use serde_json::{json, Value};

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(Some(Box::new(MetricsLog {
        stage: setup.stage.name().to_string(),
    })))
}

struct MetricsLog {
    stage: String,
}

/// Writes `line`; a line that cannot be written fails the training.
fn write(line: &Value, out: &mut Out) -> Control {
    match (out.log)(line) {
        Ok(()) => Control::Continue,
        Err(d) => Control::Fail(Box::new(d)),
    }
}

impl Callback for MetricsLog {
    fn name(&self) -> &'static str {
        "metrics-log"
    }

    fn validated(&mut self, v: &Validation, out: &mut Out) -> Control {
        if !v.within_epoch {
            return Control::Continue;
        }
        let mut line =
            json!({"record": "validation", "stage": self.stage, "epoch": v.epoch, "step": v.step});
        for (k, x) in v.values.iter().filter(|(k, _)| k.starts_with("val_")) {
            line[k] = json!(x);
        }
        write(&line, out)
    }

    fn step_logged(&mut self, record: &StepRecord, out: &mut Out) -> Control {
        write(&record.to_json(), out)
    }

    fn epoch_ended(&mut self, record: &EpochRecord, out: &mut Out) -> Control {
        write(&record.to_json(), out)
    }
}
