//! `train { keep-best monitor="val.accuracy" k=3 }`: keeps the weights of the `k` best
//! validations by the monitored metric (Lightning's `ModelCheckpoint(save_top_k=k)`,
//! pytorch-accelerated's `SaveBestModelCallback`), as outputs of the stage.
//!
//! Each kept set of weights is written when it is measured, to a file of its own named by
//! its epoch and step (the same weights always make the same bytes), in the callback's
//! directory: beside the snapshots when there are any, so that a killed run finds them.
//! The state, in every snapshot, lists the files with their scores and blake3; a resume
//! whose files are missing or changed is refused (the training starts over). A file
//! that leaves the best `k` is removed once a snapshot no longer names it.
//!
//! Only rank 0 validates, so only rank 0 keeps weights (every process holds the same).

use super::{Callback, Control, Made, Out, Setup, Validation};
use crate::checkpoint;
use manifests::{Diagnostic, KeepBestSpec, Mode};
use pipeline_core::report::KeptWeights;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    let Some(spec) = setup.spec.keep_best.clone().filter(|_| setup.rank == 0) else {
        return Ok(None);
    };
    Ok(Some(Box::new(KeepBest {
        mode: pipeline_core::metrics::mode_of(setup.manifest, &spec.monitor.value, spec.mode),
        key: spec.monitor.value.record_key(),
        dir: setup.dir.join("best"),
        snapshots: setup.snapshots.is_some(),
        stage: setup.stage.name().to_string(),
        spec,
        kept: Vec::new(),
        dropped: Vec::new(),
    })))
}

struct KeepBest {
    spec: KeepBestSpec,
    mode: Mode,
    /// The monitor's name in a validation's values.
    key: String,
    dir: PathBuf,
    snapshots: bool,
    stage: String,
    /// The best first; of equal scores, the earlier first.
    kept: Vec<Entry>,
    /// Files no longer kept that the last snapshot may still name.
    dropped: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    epoch: u64,
    step: u64,
    score: f64,
    file: String,
    blake3: String,
}

impl KeepBest {
    fn better(&self, a: f64, b: f64) -> bool {
        match self.mode {
            Mode::Min => a < b,
            Mode::Max => a > b,
        }
    }

    /// Writes the weights of `v` and lists them in their place among the best.
    fn keep(&mut self, v: &Validation, score: f64) -> Result<(), Diagnostic> {
        std::fs::create_dir_all(&self.dir).map_err(|e| {
            Diagnostic::error(
                "pipeline::train::keep_best_failed",
                format!("cannot create {}: {e}", self.dir.display()),
            )
        })?;
        let file = format!("epoch-{}-step-{}.safetensors", v.epoch, v.step);
        let path = self.dir.join(&file);
        checkpoint::write_weights(v.model, &path, v.model.kind)?;
        let blake3 = cache::hash_file(&path).map_err(|e| {
            Diagnostic::error(
                "pipeline::train::keep_best_failed",
                format!("cannot read back {}: {e}", path.display()),
            )
        })?;
        let at = self
            .kept
            .iter()
            .position(|e| self.better(score, e.score))
            .unwrap_or(self.kept.len());
        let entry = Entry {
            epoch: v.epoch,
            step: v.step,
            score,
            file,
            blake3,
        };
        self.kept.insert(at, entry);
        for gone in self
            .kept
            .split_off((self.spec.k as usize).min(self.kept.len()))
        {
            match self.snapshots {
                true => self.dropped.push(gone.file),
                false => {
                    let _ = std::fs::remove_file(self.dir.join(gone.file));
                }
            }
        }
        Ok(())
    }
}

impl Callback for KeepBest {
    fn name(&self) -> &'static str {
        "keep-best"
    }

    fn validated(&mut self, v: &Validation, _out: &mut Out) -> Control {
        let Some(&score) = v.values.get(&self.key) else {
            return Control::Continue;
        };
        let full = self.kept.len() as u64 >= self.spec.k;
        let worst = self.kept.last().map(|e| e.score);
        if !score.is_finite() || (full && !worst.is_some_and(|w| self.better(score, w))) {
            return Control::Continue;
        }
        match self.keep(v, score) {
            Ok(()) => Control::Continue,
            Err(d) => Control::Fail(Box::new(d.help(format!(
                "stage `{}` keeps its best weights in {}: check that it is writable and the disk is not full",
                self.stage,
                self.dir.display()
            )))),
        }
    }

    fn snapshot_saved(&mut self) {
        for file in self.dropped.drain(..) {
            let _ = std::fs::remove_file(self.dir.join(file));
        }
    }

    fn outputs(&self) -> Vec<KeptWeights> {
        self.kept
            .iter()
            .enumerate()
            .map(|(i, e)| KeptWeights {
                rank: i + 1,
                epoch: e.epoch,
                step: e.step,
                monitor: self.spec.monitor.value.to_string(),
                score: e.score,
                path: self.dir.join(&e.file),
            })
            .collect()
    }

    fn state(&self) -> Value {
        serde_json::to_value(&self.kept).expect("plain data")
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        let kept: Vec<Entry> = serde_json::from_value(state.clone()).map_err(|e| e.to_string())?;
        for e in &kept {
            let path = self.dir.join(&e.file);
            match cache::hash_file(&path) {
                Ok(hash) if hash == e.blake3 => {}
                Ok(_) => return Err(format!("the kept weights {} changed", path.display())),
                Err(err) => return Err(format!("the kept weights {}: {err}", path.display())),
            }
        }
        self.kept = kept;
        Ok(())
    }
}
