//! Keeps a training's final state, so that a longer training of the same settings
//! continues from it instead of starting over (`pipeline_core::extend`): a snapshot taken
//! after the last epoch, which the runner stores in the cache beside the weights. The loop
//! takes none when a callback ended the training, even at its last epoch: a longer
//! training would have ended there too.

use super::{At, Callback, Made, Setup, Snapshot};
use crate::snapshot::{Snapshots, Sums};
use manifests::Diagnostic;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(setup.final_state.map(|snapshots| {
        Box::new(FinalState {
            snapshots,
            epochs: setup.spec.epochs,
        }) as Box<dyn Callback + 'a>
    }))
}

struct FinalState<'a> {
    snapshots: &'a Snapshots,
    epochs: u64,
}

impl Callback for FinalState<'_> {
    fn name(&self) -> &'static str {
        "final-state"
    }

    fn snapshot_due(&self, at: At) -> bool {
        at == At::EpochEnd(self.epochs)
    }

    fn save(&mut self, _at: At, s: &Snapshot) -> Result<(), Diagnostic> {
        let sums = Sums {
            loss: s.sums.loss,
            hits: s.sums.hits,
        };
        self.snapshots
            .save(s.position, s.model, s.opt, s.scaler, sums, s.device)
    }
}
