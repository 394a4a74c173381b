//! `logging { tensorboard #true }` (the default): writes the training to TensorBoard event
//! files (Lightning's `TensorBoardLogger`), in `RUN/tensorboard/STAGE/` of the run
//! directory, so that `tensorboard --logdir .pipeline/runs` shows and compares runs (or in
//! `DIR/PIPELINE/RUN/STAGE/` under `run --tensorboard-dir DIR`, to collect the runs of
//! several manifests in one tree).
//!
//! Every scalar is at the optimizer step it was measured at: at each epoch's end the
//! training loss and accuracy of the epoch (`train/loss`, `train/accuracy`), its
//! validation (`val/loss`, `val/accuracy`, `val/METRIC`), `lr`, `samples_per_second` and
//! `epoch`; at each validation within an epoch, its `val/…`; at each step record
//! (`logging { log-every-steps N }`), `step/loss`, `step/accuracy`, `step/lr`,
//! `step/grad_norm`, `step/loss_scale` and `step/samples_per_second`. The values are those of
//! `metrics.jsonl`, in float32 as TensorBoard keeps them. At the end, the run's
//! hyper-parameters and the metrics shown beside them go to the HParams plugin, with
//! whether the training succeeded. Only rank 0 writes (its values are the run's).

use super::{Callback, Control, Made, Out, RunEnd, Setup, StepEnd, Validation};
use crate::observer::{EpochRecord, StepRecord};
use manifests::{Diagnostic, Manifest, TrainSpec};
use pipeline_core::tfevents::{EventWriter, HParam};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};
use tch::TchError;

pub fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    if !setup.manifest.logging.tensorboard || setup.rank != 0 {
        return Ok(None);
    }
    let stage = setup.stage.name();
    let dir = setup.tensorboard.join(stage);
    // The directory now, so that one that cannot be made fails before training; the file
    // at the first value (callbacks built and discarded leave none).
    std::fs::create_dir_all(&dir).map_err(|e| failed(&dir, e))?;
    Ok(Some(Box::new(TensorBoard {
        writer: None,
        dir,
        hparams: hparams(setup.manifest, setup.spec),
        step: 0,
        tags: Vec::new(),
    })))
}

struct TensorBoard {
    writer: Option<EventWriter>,
    dir: std::path::PathBuf,
    hparams: BTreeMap<String, HParam>,
    /// Optimizer steps taken so far.
    step: u64,
    /// Every tag written so far, in order: the metrics the HParams tab shows.
    tags: Vec<String>,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn failed(dir: &Path, e: std::io::Error) -> Diagnostic {
    Diagnostic::error(
        "pipeline::run::write_failed",
        format!("cannot write TensorBoard's event file in {}: {e}", dir.display()),
    )
    .help("check that the directory is writable and the disk is not full, or turn it off with `logging { tensorboard #false }`")
}

/// What the HParams tab shows of a run: what one changes between runs.
fn hparams(manifest: &Manifest, spec: &TrainSpec) -> BTreeMap<String, HParam> {
    let o = &manifest.optimizer;
    let number = |x: f64| HParam::Number(x);
    let text = |s: &str| HParam::Text(s.to_string());
    BTreeMap::from([
        ("optimizer".into(), text(o.kind.as_str())),
        ("lr".into(), number(o.lr)),
        ("weight_decay".into(), number(o.weight_decay)),
        ("schedule".into(), text(manifest.schedule.kind.name())),
        ("loss".into(), text(manifest.loss.kind.as_str())),
        ("epochs".into(), number(spec.epochs as f64)),
        ("batch_size".into(), number(spec.batch_size as f64)),
        (
            "accumulate".into(),
            number(manifest.accelerator.accumulate.max(1) as f64),
        ),
        (
            "precision".into(),
            text(manifest.accelerator.precision.as_str()),
        ),
        ("seed".into(), number(manifest.seed as f64)),
    ])
}

impl TensorBoard {
    /// The event file, created at the first value.
    fn writer(&mut self) -> std::io::Result<&mut EventWriter> {
        if self.writer.is_none() {
            self.writer = Some(EventWriter::create(&self.dir, now())?);
        }
        Ok(self.writer.as_mut().expect("just made"))
    }

    /// Writes `values` at the current step; a failure fails the training.
    fn write(&mut self, values: &[(String, f64)], flush: bool) -> Control {
        for (tag, _) in values {
            if !self.tags.contains(tag) {
                self.tags.push(tag.clone());
            }
        }
        let values: Vec<(&str, f64)> = values.iter().map(|(t, x)| (t.as_str(), *x)).collect();
        let step = self.step;
        let written = self.writer().and_then(|w| {
            w.scalars(step, now(), &values)?;
            match flush {
                true => w.flush(),
                false => Ok(()),
            }
        });
        match written {
            Ok(()) => Control::Continue,
            Err(e) => Control::Fail(Box::new(failed(&self.dir, e))),
        }
    }

    /// Ends the HParams session, with the metrics written; a failure to write is said,
    /// not fatal: the training itself is over.
    fn end(&mut self, succeeded: bool, out: &mut Out) {
        let tags: Vec<String> = self.tags.clone();
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        let hparams = self.hparams.clone();
        let t = now();
        let written = self.writer().and_then(|w| {
            w.hparams(&hparams, &tags, t)?;
            w.hparams_end(succeeded, t)?;
            w.flush()
        });
        if let Err(e) = written {
            let d = failed(&self.dir, e);
            out.obs.notice(&format!("warning: {}", d.message));
        }
    }
}

/// `val_loss` → `val/loss`: TensorBoard groups tags by what comes before the slash.
fn val_tag(key: &str) -> Option<String> {
    key.strip_prefix("val_").map(|m| format!("val/{m}"))
}

impl Callback for TensorBoard {
    fn name(&self) -> &'static str {
        "tensorboard"
    }

    fn step_ended(&mut self, step: &StepEnd, _out: &mut Out) -> Result<Control, TchError> {
        self.step = step.step;
        Ok(Control::Continue)
    }

    fn step_logged(&mut self, r: &StepRecord, _out: &mut Out) -> Control {
        let mut values = vec![("step/loss".to_string(), r.loss)];
        for (tag, x) in [
            ("step/accuracy", r.accuracy),
            ("step/lr", Some(r.lr)),
            ("step/grad_norm", r.grad_norm),
            ("step/loss_scale", r.loss_scale),
            ("step/samples_per_second", Some(r.samples_per_second)),
        ] {
            if let Some(x) = x.filter(|x| x.is_finite()) {
                values.push((tag.to_string(), x));
            }
        }
        self.step = r.step;
        self.write(&values, false)
    }

    fn validated(&mut self, v: &Validation, _out: &mut Out) -> Control {
        if !v.within_epoch {
            return Control::Continue;
        }
        let values: Vec<(String, f64)> = v
            .values
            .iter()
            .filter_map(|(k, x)| Some((val_tag(k)?, *x)))
            .collect();
        self.write(&values, false)
    }

    fn epoch_ended(&mut self, r: &EpochRecord, _out: &mut Out) -> Control {
        let mut values = vec![("train/loss".to_string(), r.loss)];
        if let Some(a) = r.accuracy {
            values.push(("train/accuracy".into(), a));
        }
        if let Some(l) = r.val_loss {
            values.push(("val/loss".into(), l));
        }
        if let Some(a) = r.val_accuracy {
            values.push(("val/accuracy".into(), a));
        }
        for (name, x) in &r.val_metrics {
            values.push((format!("val/{name}"), *x));
        }
        values.push(("lr".into(), r.lr));
        values.push(("samples_per_second".into(), r.samples_per_second));
        values.push(("epoch".into(), r.epoch as f64));
        self.write(&values, true)
    }

    fn run_ended(&mut self, _end: &RunEnd, out: &mut Out) {
        self.end(true, out);
    }

    fn failed(&mut self, _error: &Diagnostic, out: &mut Out) {
        self.end(false, out);
    }
}
