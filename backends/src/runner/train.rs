//! Running a `train` stage: the model trained (`crate::train`) from the weights of the
//! `train` stage it needs or from its `init`, and the weights stored: the last, those
//! kept as best, and the final state a longer training extends.

use super::{append, Context, Produced, Trained};
use crate::observer::Observer;
use crate::snapshot::{Saved, Snapshots};
use crate::train::{train, Dirs};
use manifests::{Diagnostic, TrainSpec, WeightsFrom};
use pipeline_core::extend::{FINAL_STATE, FINAL_TENSORS};
use pipeline_core::freshness::StageState;
use pipeline_core::report::best_output;
use pipeline_core::stages::MODEL_OUTPUT;
use std::collections::BTreeMap;
use std::path::Path;

impl Context<'_> {
    /// A `train` stage: trains from the last weights of `train` stage `source` (or from
    /// `init`, or from scratch), resuming from `saved`'s snapshot when there is one.
    pub(super) fn train(
        &mut self,
        state: &StageState,
        spec: &TrainSpec,
        source: Option<usize>,
        scratch: &Path,
        saved: Saved,
        obs: &mut dyn Observer,
    ) -> Result<Produced, Diagnostic> {
        let index = state.index;
        let stage = &self.session.manifest.stages[index];
        self.use_fold(spec.fold.as_ref().map(|f| f.index), obs)?;
        if let Some(s) = source {
            self.model_of(s, WeightsFrom::Last)?;
        }
        let start = source.map(|s| &self.trained[&(s, WeightsFrom::Last)].model);
        let log = &mut self.log;
        let mut write = |line: &serde_json::Value| append(log, line);
        // Callbacks keep their files beside the snapshots, which outlive a kill.
        let dir = saved.snapshots.map_or(scratch, |s| s.dir.as_path());
        let trained = train(
            &self.session,
            stage,
            spec,
            start,
            saved,
            &state.read,
            Dirs {
                own: dir,
                tensorboard: &self.tensorboard,
                run: &self.run_dir.path,
            },
            &mut write,
            obs,
        )?;
        let metrics = training_metrics(&trained);
        let init = trained.init.clone();
        // The weights for the cache, which only rank 0 writes.
        let mut store = Vec::new();
        if self.session.rank() == 0 {
            let weights = scratch.join(MODEL_OUTPUT);
            crate::checkpoint::write_weights(&trained.model, &weights, trained.model.kind)?;
            store.push((MODEL_OUTPUT.into(), weights));
            for k in &trained.kept {
                store.push((best_output(k.rank), k.path.clone()));
            }
            if let Some((index, tensors)) = saved.final_state.and_then(Snapshots::files) {
                store.push((FINAL_STATE.into(), index));
                store.push((FINAL_TENSORS.into(), tensors));
            }
        }
        self.trained.insert(
            (index, WeightsFrom::Last),
            Trained {
                model: trained.model,
                metrics: metrics.clone(),
            },
        );
        Ok(Produced {
            metrics,
            store,
            init,
            stopped: trained.stopped.clone(),
            resumed_at: trained.resumed_at,
            reordered: trained.reordered,
            kept: trained.kept,
            std: BTreeMap::new(),
        })
    }
}

fn training_metrics(trained: &crate::train::Trained) -> BTreeMap<String, f64> {
    let last = &trained.last_epoch;
    let mut metrics = BTreeMap::from([
        ("loss".to_string(), last.loss),
        ("epochs".to_string(), last.epoch as f64),
        ("steps".to_string(), trained.steps as f64),
    ]);
    if let Some(skipped) = trained.skipped_steps {
        metrics.insert("skipped_steps".into(), skipped as f64);
    }
    if let Some((epoch, _)) = trained.stopped {
        metrics.insert("stopped_epoch".into(), epoch as f64);
    }
    for (k, v) in [
        ("accuracy", last.accuracy),
        ("val_loss", last.val_loss),
        ("val_accuracy", last.val_accuracy),
    ] {
        if let Some(v) = v {
            metrics.insert(k.into(), v);
        }
    }
    for (name, v) in &last.val_metrics {
        metrics.insert(format!("val_{name}"), *v);
    }
    metrics
}
