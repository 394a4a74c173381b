//! The learning rate of every optimizer step: the schedule's curve
//! (`pipeline_core::schedule`), or a scripted schedule's `forward(step, epoch)` — the
//! factor on the peak rate — run by libtorch.

use crate::error::short_message;
use manifests::{Diagnostic, ScheduleSpec};
use pipeline_core::schedule::LrSchedule;
use tch::{CModule, IValue, TchError};

/// Where a training's learning rates come from.
pub enum Rates {
    Curve(LrSchedule),
    Script {
        module: CModule,
        peak: f64,
        steps_per_epoch: u64,
    },
}

impl Rates {
    /// The rates of a training of `epochs` epochs of `steps_per_epoch` optimizer steps
    /// from the peak `peak`; a scripted schedule is loaded and asked for its first
    /// factor, so that a module that cannot answer fails before the first step.
    pub fn new(
        spec: &ScheduleSpec,
        peak: f64,
        steps_per_epoch: u64,
        epochs: u64,
    ) -> Result<Rates, Diagnostic> {
        let Some(script) = &spec.script else {
            return Ok(Rates::Curve(LrSchedule::new(
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
        let rates = Rates::Script {
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

    /// [`Rates::lr_at`], or what is wrong with the module's answer.
    fn rate(&self, step: u64) -> Result<f64, String> {
        let (module, peak, per_epoch) = match self {
            Rates::Curve(curve) => return Ok(curve.lr_at(step)),
            Rates::Script {
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
