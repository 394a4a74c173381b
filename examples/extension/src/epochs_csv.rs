//! `train { callbacks "epochs-csv" }`: a CSV of the stage's epochs beside the run's
//! `metrics.jsonl` (`RUN/STAGE-epochs.csv`), one row per epoch — its number, the
//! training loss and accuracy, the validation's loss, accuracy and metrics, the learning
//! rate, its seconds — for a spreadsheet. Rewritten whole at every epoch (a temporary
//! file, then renamed: never half-written); its rows are its state in every snapshot, so
//! a resumed run writes the rows of the run that was killed, not twice.

use backends::callbacks::{Callback, CallbackMember, Control, Made, Out, Setup};
use backends::EpochRecord;
use manifests::callbacks::CallbackDescription;
use manifests::Diagnostic;
use serde_json::Value;
use std::path::PathBuf;

pub static EPOCHS_CSV: CallbackMember = CallbackMember {
    description: &CallbackDescription {
        name: "epochs-csv",
        doc: "a CSV of the stage's epochs (losses, accuracies, validation metrics, learning rate, seconds) beside metrics.jsonl: RUN/STAGE-epochs.csv",
    },
    make,
};

fn make<'a>(setup: &Setup<'a>) -> Made<'a> {
    // Every process sees the same epochs; rank 0 alone has the validation's values.
    if setup.rank != 0 {
        return Ok(None);
    }
    Ok(Some(Box::new(EpochsCsv {
        path: setup
            .run_dir
            .join(format!("{}-epochs.csv", setup.stage.name())),
        rows: Vec::new(),
    })))
}

struct EpochsCsv {
    path: PathBuf,
    /// Each epoch's columns by name, in order.
    rows: Vec<Vec<(String, f64)>>,
}

impl EpochsCsv {
    fn write(&self) -> Result<(), String> {
        // The columns of every row (a later epoch may have validated where an earlier
        // did not): the first row's order, then any new ones.
        let mut header: Vec<&str> = Vec::new();
        for (name, _) in self.rows.iter().flatten() {
            if !header.contains(&name.as_str()) {
                header.push(name);
            }
        }
        let tmp = self.path.with_extension("csv.tmp");
        let mut w = csv::Writer::from_path(&tmp).map_err(|e| e.to_string())?;
        w.write_record(&header).map_err(|e| e.to_string())?;
        for row in &self.rows {
            let cells = header.iter().map(|h| {
                row.iter()
                    .find(|(n, _)| n == h)
                    .map_or(String::new(), |(_, v)| v.to_string())
            });
            w.write_record(cells).map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())?;
        drop(w);
        std::fs::rename(&tmp, &self.path).map_err(|e| e.to_string())
    }
}

impl Callback for EpochsCsv {
    fn name(&self) -> &'static str {
        "epochs-csv"
    }

    fn epoch_ended(&mut self, r: &EpochRecord, _out: &mut Out) -> Control {
        let mut row = vec![
            ("epoch".to_string(), r.epoch as f64),
            ("loss".into(), r.loss),
        ];
        let optional = [
            ("accuracy", r.accuracy),
            ("val_loss", r.val_loss),
            ("val_accuracy", r.val_accuracy),
        ];
        row.extend(
            optional
                .iter()
                .filter_map(|(n, v)| Some((n.to_string(), (*v)?))),
        );
        row.extend(r.val_metrics.iter().map(|(n, v)| (format!("val_{n}"), *v)));
        row.extend([("lr".into(), r.lr), ("seconds".into(), r.seconds)]);
        self.rows.push(row);
        match self.write() {
            Ok(()) => Control::Continue,
            Err(why) => Control::Fail(Box::new(Diagnostic::error(
                "pipeline::train::callback_failed",
                format!("`epochs-csv` cannot write {}: {why}", self.path.display()),
            ))),
        }
    }

    fn state(&self) -> Value {
        serde_json::to_value(&self.rows).unwrap_or(Value::Null)
    }

    fn restore(&mut self, state: &Value) -> Result<(), String> {
        self.rows = serde_json::from_value(state.clone()).map_err(|e| e.to_string())?;
        Ok(())
    }
}
