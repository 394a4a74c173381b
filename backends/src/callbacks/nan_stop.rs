//! Stops training at the step whose loss is NaN or infinite, naming that step and the
//! last finite loss (Keras' `TerminateOnNaN`, pytorch-accelerated's NaN check). Always on.
//!
//! Reading a loss waits for the device, so the losses are followed on the device (the
//! first step that was not finite, its loss, the last finite loss and its step, a few
//! element-wise operations per step) and read every step on the CPU, where reading costs
//! nothing, and every [`CHECK_EVERY`] steps, at every epoch's end and before every
//! snapshot on a GPU or with several processes. Whenever it is read, the step it names
//! is the first bad one.

use super::{Callback, Control, Made, Out, Setup, StepEnd};
use manifests::{Diagnostic, StageSpec};
use tch::{Kind, TchError, Tensor};

/// Steps between reads where a read waits (a GPU, or several processes).
pub const CHECK_EVERY: u64 = 50;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    let every = match setup.device != tch::Device::Cpu || setup.world > 1 {
        true => CHECK_EVERY,
        false => 1,
    };
    let zeros = |kind| {
        Tensor::f_zeros([], (kind, setup.device)).map_err(|e| {
            crate::error::torch_error(
                "pipeline::train::failed",
                &format!("stage `{}`: setting up the NaN check", setup.stage.name()),
                &e,
            )
        })
    };
    Ok(Some(Box::new(NanStop {
        stage: setup.stage.clone(),
        every,
        first_bad: zeros(Kind::Int64)?,
        bad_loss: zeros(Kind::Double)?,
        last_finite: zeros(Kind::Double)?,
        last_finite_step: zeros(Kind::Int64)?,
        count: zeros(Kind::Int64)?,
        batches: Vec::new(),
    })))
}

struct NanStop {
    stage: StageSpec,
    every: u64,
    /// The first batch since the last read (1-based) whose loss was not finite; 0 for
    /// none.
    first_bad: Tensor,
    bad_loss: Tensor,
    /// The last finite loss before it; `last_finite_step` is 0 until there is one.
    last_finite: Tensor,
    last_finite_step: Tensor,
    /// Batches followed since the last read, on the device (no copy to it per step).
    count: Tensor,
    /// (epoch, batch) of every batch since the last read, to name the bad one.
    batches: Vec<(u64, u64)>,
}

impl NanStop {
    /// Follows the loss of the next batch on the device.
    fn follow(&mut self, loss: &Tensor) -> Result<(), TchError> {
        tch::no_grad(|| {
            let _ = self.count.f_add_scalar_(1)?;
            let step = &self.count;
            let loss = loss.f_detach()?.f_to_kind(Kind::Double)?;
            let finite = loss.f_isfinite()?;
            let clean = self.first_bad.f_eq(0)?;
            // Still clean and finite: the last finite loss moves on.
            let keep = finite.f_logical_and(&clean)?;
            self.last_finite = loss.f_where_self(&keep, &self.last_finite)?;
            self.last_finite_step = step.f_where_self(&keep, &self.last_finite_step)?;
            // Clean and not finite: this is the first bad step.
            let first = finite.f_logical_not()?.f_logical_and(&clean)?;
            self.first_bad = step.f_where_self(&first, &self.first_bad)?;
            self.bad_loss = loss.f_where_self(&first, &self.bad_loss)?;
            Ok(())
        })
    }
}

impl Callback for NanStop {
    fn name(&self) -> &'static str {
        "nan-stop"
    }

    fn step_ended(&mut self, step: &StepEnd, _out: &mut Out) -> Result<Control, TchError> {
        self.batches.push((step.epoch, step.batch));
        self.follow(step.loss)?;
        let due = step.boundary && step.step.is_multiple_of(self.every);
        if !due {
            return Ok(Control::Continue);
        }
        Ok(self.read())
    }

    fn epoch_ended(&mut self, _record: &crate::observer::EpochRecord, _out: &mut Out) -> Control {
        self.read()
    }

    /// A snapshot must never hold weights a bad loss already spoilt unseen.
    fn before_snapshot(&mut self) -> Control {
        self.read()
    }
}

impl NanStop {
    /// Reads what was followed since the last read, and starts afresh.
    fn read(&mut self) -> Control {
        let bad = self.first_bad.int64_value(&[]);
        if bad == 0 {
            self.batches.clear();
            let _ = self.count.zero_();
            return Control::Continue;
        }
        let (epoch, batch) = self.batches[(bad - 1) as usize];
        let loss = self.bad_loss.double_value(&[]);
        let last = match self.last_finite_step.int64_value(&[]) {
            0 => String::new(),
            _ => format!(
                "; the last finite loss before it was {}",
                short(self.last_finite.double_value(&[]))
            ),
        };
        let name = self.stage.name();
        Control::Fail(Box::new(
            Diagnostic::error(
                "pipeline::train::diverged",
                format!("stage `{name}`: the training loss became {loss} at epoch {epoch}, batch {batch}{last}"),
            )
            .label_opt(self.stage.name.span, "diverged")
            .help("lower `optimizer.lr`, add a warm-up (`schedule … warmup-epochs=2`), clip gradients (`accelerator { max-norm 1.0 }`), or scale the data (`scale \"standard\"`)"),
        ))
    }
}

/// A loss as people write it: six decimals, or four significant digits and an exponent
/// when that would be long or show nothing.
fn short(x: f64) -> String {
    match x.abs() {
        a if a != 0.0 && !(1e-4..1e6).contains(&a) => format!("{x:.4e}"),
        _ => format!("{x:.6}"),
    }
}
