//! Keeps a training's final state, so that a longer training of the same settings
//! continues from it instead of starting over (`pipeline_core::extend`): a snapshot taken
//! after the last epoch, which the runner stores in the cache beside the weights. The loop
//! takes none when a callback ended the training, even at its last epoch: a longer
//! training would have ended there too. Failing to write it fails nothing: the training
//! is stored without it, and a warning says a longer one will start over.

use super::{At, Callback, Made, Out, RunEnd, Setup, Snapshot};
use crate::snapshot::Snapshots;
use manifests::Diagnostic;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(setup.final_state.map(|snapshots| {
        Box::new(FinalState {
            snapshots,
            epochs: setup.spec.epochs,
            stage: setup.stage.name().to_string(),
            failed: None,
        }) as Box<dyn Callback + 'a>
    }))
}

struct FinalState<'a> {
    snapshots: &'a Snapshots,
    epochs: u64,
    stage: String,
    /// Why the final state could not be written.
    failed: Option<String>,
}

impl Callback for FinalState<'_> {
    fn name(&self) -> &'static str {
        "final-state"
    }

    fn snapshot_due(&self, at: At) -> bool {
        at == At::EpochEnd(self.epochs)
    }

    fn save(&mut self, _at: At, s: &Snapshot) -> Result<(), Diagnostic> {
        if let Err(d) = s.save_to(self.snapshots) {
            // Nothing half-written is stored: the runner stores what the index names.
            let _ = std::fs::remove_dir_all(&self.snapshots.dir);
            self.failed = Some(d.message);
        }
        Ok(())
    }

    fn run_ended(&mut self, _end: &RunEnd, out: &mut Out) {
        if let Some(why) = self.failed.take() {
            out.obs.notice(&format!(
                "warning: the final state of `{}` was not kept ({why}): a longer training of it will start from its first epoch",
                self.stage
            ));
        }
    }
}
