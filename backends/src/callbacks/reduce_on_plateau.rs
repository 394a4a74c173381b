//! `schedule "reduce-on-plateau" monitor="val.loss" factor=0.1 patience=10`: multiplies
//! the learning rate by `factor` when the monitored value has not improved for more than
//! `patience` validations (PyTorch's `ReduceLROnPlateau`, `pipeline_core::schedule::Plateau`).
//! Its state, the learning rate included, is in every snapshot. Under `ddp` every process
//! sees rank 0's values, so all of them reduce together.

use super::{Callback, Control, Made, Out, Setup, Validation};
use manifests::{Mode, PlateauSpec};
use pipeline_core::schedule::Plateau;
use serde_json::Value;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    let Some(spec) = setup.schedule.kind.plateau() else {
        return Ok(None);
    };
    Ok(Some(Box::new(ReduceOnPlateau {
        mode: pipeline_core::metrics::mode_of(setup.manifest, &spec.monitor.value, spec.mode),
        key: spec.monitor.value.record_key(),
        spec,
        peak: setup.lr,
        plateau: Plateau::new(setup.lr),
    })))
}

struct ReduceOnPlateau {
    spec: PlateauSpec,
    mode: Mode,
    /// The monitor's name in a validation's values.
    key: String,
    peak: f64,
    plateau: Plateau,
}

impl Callback for ReduceOnPlateau {
    fn name(&self) -> &'static str {
        "reduce-on-plateau"
    }

    fn validated(&mut self, v: &Validation, _out: &mut Out) -> Control {
        if let Some(&value) = v.values.get(&self.key) {
            self.plateau.step(&self.spec, self.mode, value);
        }
        Control::Continue
    }

    fn lr_scale(&self) -> f64 {
        self.plateau.lr / self.peak
    }

    fn state(&self) -> Value {
        serde_json::to_value(&self.plateau).expect("plain data")
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        self.plateau = serde_json::from_value(state.clone()).map_err(|e| e.to_string())?;
        Ok(())
    }
}
