//! `train { snapshot-every-epochs N snapshot-every-steps N }`: takes a resumable snapshot
//! as often as the stage says (Lightning's `ModelCheckpoint` for fault tolerance): the weights, the
//! optimizer's and the loss scaler's state, the random generators, the epoch's sums so far
//! and every callback's state, replacing the one before ([`crate::snapshot`] writes and
//! reads the files). A killed run resumes from the last, bit for bit. None is taken after
//! the last epoch: the stage's result is stored instead. A stage that takes none on a
//! schedule still has this callback where there is a cache: a signal's snapshot
//! (`crate::preemption`) is written by it.

use super::{At, Callback, Made, Setup, Snapshot};
use crate::snapshot::Snapshots;
use manifests::Diagnostic;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    Ok(setup.snapshots.map(|snapshots| {
        Box::new(SaveSnapshots {
            snapshots,
            epochs: setup.spec.epochs,
        }) as Box<dyn Callback + 'a>
    }))
}

struct SaveSnapshots<'a> {
    snapshots: &'a Snapshots,
    epochs: u64,
}

impl Callback for SaveSnapshots<'_> {
    fn name(&self) -> &'static str {
        "snapshots"
    }

    fn snapshot_due(&self, at: At) -> bool {
        match at {
            At::Step(step) => self.snapshots.due_after_step(step),
            At::EpochEnd(epoch) => self.snapshots.due_after_epoch(epoch, self.epochs),
        }
    }

    fn save(&mut self, _at: At, s: &Snapshot) -> Result<(), Diagnostic> {
        s.save_to(self.snapshots)
    }

    fn writes_snapshots(&self) -> bool {
        true
    }
}
