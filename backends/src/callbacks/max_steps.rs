//! `train { max-steps N }`: ends the training after its N-th optimizer step, within the
//! epoch in progress (Lightning's `max_steps`). Every process counts the same steps, so
//! they stop together without agreeing.

use super::{Callback, Control, Made, Out, Setup, StepEnd};
use tch::TchError;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(setup
        .spec
        .max_steps
        .map(|max| Box::new(MaxSteps { max }) as Box<dyn Callback + 'a>))
}

struct MaxSteps {
    max: u64,
}

impl Callback for MaxSteps {
    fn name(&self) -> &'static str {
        "max-steps"
    }

    fn step_ended(&mut self, step: &StepEnd, _out: &mut Out) -> Result<Control, TchError> {
        Ok(match step.boundary && step.step >= self.max {
            true => Control::Finish(format!("it reached `max-steps {}`", self.max)),
            false => Control::Continue,
        })
    }
}
