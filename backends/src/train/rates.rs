//! The learning rate of every optimizer step: the schedule's curve
//! (`pipeline_core::schedule`), or a scripted schedule's `forward(step, epoch)` — the
//! factor on the peak rate — run by libtorch; under `schedule "reduce-on-plateau"`, scaled
//! by what the validations so far decided (PyTorch's `ReduceLROnPlateau`,
//! `pipeline_core::schedule::Plateau`), a state every snapshot keeps. Under `ddp` every
//! process sees rank 0's values, so all of them reduce together.

use crate::error::short_message;
use manifests::{Diagnostic, Manifest, Mode, PlateauSpec, ScheduleSpec};
use pipeline_core::schedule::{LrSchedule, Plateau};
use serde_json::Value;
use std::collections::BTreeMap;
use tch::{CModule, IValue, TchError};

/// A training's learning rates: the schedule's, and the plateau's scale on them.
pub struct Rates {
    source: Source,
    plateau: Option<PlateauWatch>,
}

/// Where a training's learning rates come from.
enum Source {
    Curve(LrSchedule),
    Script {
        module: CModule,
        peak: f64,
        steps_per_epoch: u64,
    },
}

/// `schedule "reduce-on-plateau"`: the monitor it watches, and where it stands.
struct PlateauWatch {
    spec: PlateauSpec,
    mode: Mode,
    /// The monitor's name in a validation's values.
    key: String,
    peak: f64,
    plateau: Plateau,
}

impl Rates {
    /// The rates of `manifest`'s schedule for a training of `epochs` epochs of
    /// `steps_per_epoch` optimizer steps.
    pub fn of(manifest: &Manifest, steps_per_epoch: u64, epochs: u64) -> Result<Rates, Diagnostic> {
        let peak = manifest.optimizer.lr;
        let source = Source::new(&manifest.schedule, peak, steps_per_epoch, epochs)?;
        let plateau = manifest.schedule.kind.plateau().map(|spec| PlateauWatch {
            mode: pipeline_core::metrics::mode_of(manifest, &spec.monitor.value, spec.mode),
            key: spec.monitor.value.record_key(),
            spec,
            peak,
            plateau: Plateau::new(peak),
        });
        Ok(Rates { source, plateau })
    }

    /// The learning rate of optimizer step `step` (counted from 0).
    pub fn lr_at(&self, step: u64) -> Result<f64, TchError> {
        let rate = self.source.lr_at(step)?;
        Ok(match &self.plateau {
            Some(watch) => rate * (watch.plateau.lr / watch.peak),
            None => rate,
        })
    }

    /// Follows a validation's `values` (reduce-on-plateau's monitor among them).
    pub fn validated(&mut self, values: &BTreeMap<String, f64>) {
        if let Some(watch) = &mut self.plateau {
            if let Some(&value) = values.get(&watch.key) {
                watch.plateau.step(&watch.spec, watch.mode, value);
            }
        }
    }

    /// What a snapshot keeps of the rates: the plateau's state (`None` without one).
    pub fn state(&self) -> Option<Value> {
        let watch = self.plateau.as_ref()?;
        Some(serde_json::to_value(&watch.plateau).expect("plain data"))
    }

    /// Puts back what [`Rates::state`] saved; `Err` says why it cannot be.
    pub fn restore(&mut self, state: Option<&Value>) -> Result<(), String> {
        let (Some(watch), Some(state)) = (&mut self.plateau, state) else {
            return Ok(());
        };
        watch.plateau = serde_json::from_value(state.clone())
            .map_err(|e| format!("the state of `reduce-on-plateau`: {e}"))?;
        Ok(())
    }

    /// Back to the start: no validation followed yet.
    pub fn restart(&mut self) {
        if let Some(watch) = &mut self.plateau {
            watch.plateau = Plateau::new(watch.peak);
        }
    }
}

impl Source {
    /// The rates of a training of `epochs` epochs of `steps_per_epoch` optimizer steps
    /// from the peak `peak`; a scripted schedule is loaded and asked for its first
    /// factor, so that a module that cannot answer fails before the first step.
    pub fn new(
        spec: &ScheduleSpec,
        peak: f64,
        steps_per_epoch: u64,
        epochs: u64,
    ) -> Result<Source, Diagnostic> {
        let Some(script) = &spec.script else {
            return Ok(Source::Curve(LrSchedule::new(
                spec,
                peak,
                steps_per_epoch,
                epochs,
            )));
        };
        let refused = |why: String| {
            Diagnostic::error(
                "pipeline::schedule::bad_torchscript",
                format!(
                    "the TorchScript schedule {} {why}",
                    script.path.value.display()
                ),
            )
            .label_opt(script.path.span, "this module")
            .help("its `forward(self, step: int, epoch: int) -> float` gives the factor on the peak learning rate, a number ≥ 0")
        };
        let module = CModule::load(&script.file)
            .map_err(|e| refused(format!("cannot be loaded: {}", short_message(&e))))?;
        let rates = Source::Script {
            module,
            peak,
            steps_per_epoch: steps_per_epoch.max(1),
        };
        rates.rate(0).map_err(refused)?;
        Ok(rates)
    }

    /// The learning rate of optimizer step `step` (counted from 0).
    pub fn lr_at(&self, step: u64) -> Result<f64, TchError> {
        self.rate(step)
            .map_err(|why| TchError::Torch(format!("the TorchScript schedule {why}")))
    }

    /// [`Source::lr_at`], or what is wrong with the module's answer.
    fn rate(&self, step: u64) -> Result<f64, String> {
        let (module, peak, per_epoch) = match self {
            Source::Curve(curve) => return Ok(curve.lr_at(step)),
            Source::Script {
                module,
                peak,
                steps_per_epoch,
            } => (module, *peak, *steps_per_epoch),
        };
        let epoch = step / per_epoch;
        let args = [IValue::Int(step as i64), IValue::Int(epoch as i64)];
        let answer = module
            .method_is("forward", &args)
            .map_err(|e| format!("failed at step {step}: {}", short_message(&e)))?;
        let factor = match answer {
            IValue::Double(f) => f,
            IValue::Int(i) => i as f64,
            other => return Err(format!("returned {other:?} for step {step}, not a number")),
        };
        if !factor.is_finite() || factor < 0.0 {
            return Err(format!(
                "returned {factor} for step {step} (epoch {epoch}): the factor is a number ≥ 0"
            ));
        }
        Ok(peak * factor)
    }
}
