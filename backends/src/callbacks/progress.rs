//! Shows the training as it goes (pytorch-accelerated's `PrintProgressCallback` and
//! `ProgressBarCallback`): the plan of an epoch, where a resumed training resumes, every
//! epoch and step, the running loss and throughput of step records, why it stopped early,
//! and where it failed. The observer decides how it
//! looks: a bar on a terminal, a line per epoch otherwise, nothing for `--json`. Always on.

use super::{Callback, Control, Made, Out, RunEnd, RunStart, Setup, StepEnd};
use crate::observer::{EpochRecord, StepRecord};
use manifests::Diagnostic;
use tch::TchError;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(Some(Box::new(Progress {
        stage: setup.stage.name().to_string(),
        epochs: setup.spec.epochs,
        batches: setup.batches,
        world: setup.world,
    })))
}

struct Progress {
    stage: String,
    epochs: u64,
    batches: u64,
    world: usize,
}

impl Callback for Progress {
    fn name(&self) -> &'static str {
        "progress"
    }

    fn run_started(&mut self, start: &RunStart, out: &mut Out) {
        let (name, batches, batch) = (&self.stage, self.batches, start.batch);
        let processes = match self.world {
            1 => "1 process".to_string(),
            w => format!("{w} processes"),
        };
        out.obs.message(&format!(
            "`{name}`: {batches} batches of {batch} per epoch · effective batch {} ({batch} × {} accumulated × {processes}) · {} optimizer steps per epoch",
            batch * start.accumulate * self.world as u64,
            start.accumulate,
            start.steps,
        ));
        // The final state of a shorter training says how long that one was.
        let shorter = start
            .resumed
            .and_then(|at| at.last.as_ref())
            .map(|l| l.epochs);
        match (start.resumed, shorter) {
            (Some(at), Some(epochs)) if epochs < self.epochs => out.obs.notice(&format!(
                "continuing `{name}` from the cached {epochs}-epoch training: epochs {}–{}",
                at.epoch, self.epochs
            )),
            (Some(at), _) => out.obs.notice(&format!(
                "resuming `{name}` from its snapshot: epoch {}/{}, batch {}/{batches}",
                at.epoch, self.epochs, at.step_in_epoch
            )),
            (None, _) => {}
        }
    }

    fn epoch_started(&mut self, epoch: u64, out: &mut Out) {
        out.obs
            .epoch_started(&self.stage, epoch, self.epochs, self.batches);
    }

    fn step_ended(&mut self, step: &StepEnd, out: &mut Out) -> Result<Control, TchError> {
        out.obs.step(step.batch);
        Ok(Control::Continue)
    }

    fn step_logged(&mut self, record: &StepRecord, out: &mut Out) -> Control {
        out.obs.step_logged(record);
        Control::Continue
    }

    fn epoch_ended(&mut self, record: &EpochRecord, out: &mut Out) -> Control {
        out.obs.epoch_finished(record);
        Control::Continue
    }

    fn run_ended(&mut self, end: &RunEnd, out: &mut Out) {
        let Some((epoch, why, within)) = end.stopped else {
            return;
        };
        let within = match within {
            true => format!(" at step {}, within", end.step),
            false => " after".into(),
        };
        out.obs.notice(&format!(
            "`{}` stopped early{within} epoch {epoch} of {}: {why}",
            self.stage, self.epochs
        ));
    }

    fn failed(&mut self, error: &Diagnostic, out: &mut Out) {
        out.obs.stage_failed(&self.stage, error);
    }
}
