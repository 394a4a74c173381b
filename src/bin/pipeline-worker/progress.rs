//! Progress while running: a bar on a terminal, plain lines otherwise, nothing for
//! `--json` runs that are not on a terminal. Everything goes to stderr.

use backends::{EpochRecord, Observer, StageResult};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use manifests::{Diagnostic, StageKind};
use pipeline_cli::summary::{percent, stage_line};
use std::io::IsTerminal;

fn epoch_line(r: &EpochRecord) -> String {
    let mut line = format!(
        "{} epoch {}/{}  loss {:.4}",
        r.stage, r.epoch, r.epochs, r.loss
    );
    if let Some(a) = r.accuracy {
        line += &format!("  acc {}", percent(a));
    }
    if let Some(l) = r.val_loss {
        line += &format!("  val loss {l:.4}");
    }
    if let Some(a) = r.val_accuracy {
        line += &format!("  val acc {}", percent(a));
    }
    line + &format!("  lr {:.2e}  {:.0} samples/s", r.lr, r.samples_per_second)
}

/// Plain lines, one per epoch and stage: for logs and CI.
pub struct Lines;

impl Observer for Lines {
    fn message(&mut self, text: &str) {
        eprintln!("{text}");
    }
    fn stage_started(&mut self, name: &str, kind: StageKind) {
        eprintln!("→ {name} ({})", kind.as_str());
    }
    fn epoch_finished(&mut self, record: &EpochRecord) {
        eprintln!("  {}", epoch_line(record));
    }
    fn stage_finished(&mut self, result: &StageResult) {
        eprintln!("{}", stage_line(result));
    }
}

/// A progress bar per `train` stage: epoch, step, last loss, throughput.
#[derive(Default)]
pub struct Bar {
    stage: String,
    bar: Option<ProgressBar>,
}

impl Observer for Bar {
    fn message(&mut self, text: &str) {
        self.notice(text);
    }
    fn notice(&mut self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }
    fn stage_started(&mut self, name: &str, kind: StageKind) {
        self.stage = format!("{name} ({})", kind.as_str());
    }
    fn epoch_started(&mut self, _stage: &str, epoch: u64, epochs: u64, steps: u64) {
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(Some(epochs * steps), ProgressDrawTarget::stderr_with_hz(10));
            bar.set_style(
                ProgressStyle::with_template("{prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} steps  {msg}  {per_sec} · {elapsed}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(self.stage.clone());
            bar
        });
        if epoch == 1 {
            bar.set_message(format!("epoch 1/{epochs}"));
        }
    }
    fn step(&mut self, _done: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
    fn epoch_finished(&mut self, record: &EpochRecord) {
        if let Some(bar) = &self.bar {
            let mut msg = format!(
                "epoch {}/{} loss {:.4}",
                record.epoch, record.epochs, record.loss
            );
            if let Some(a) = record.val_accuracy.or(record.accuracy) {
                msg += &format!(" acc {}", percent(a));
            }
            bar.set_message(msg);
        }
    }
    /// The bar stays where the stage failed, above the error.
    fn stage_failed(&mut self, _stage: &str, _error: &Diagnostic) {
        if let Some(bar) = self.bar.take() {
            let message = format!("{} · failed", bar.message());
            bar.abandon_with_message(message);
        }
    }
    fn stage_finished(&mut self, result: &StageResult) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        eprintln!("{}", stage_line(result));
    }
}

/// The observer for this terminal: a bar on a terminal, lines otherwise (or nothing).
pub fn for_stderr(quiet_unless_terminal: bool) -> Box<dyn Observer> {
    if std::io::stderr().is_terminal() {
        Box::new(Bar::default())
    } else if quiet_unless_terminal {
        Box::new(backends::observer::Silent)
    } else {
        Box::new(Lines)
    }
}
