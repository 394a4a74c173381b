//! Progress while running: a bar on a terminal, plain lines otherwise, nothing for
//! `--json` runs that are not on a terminal. Everything goes to stderr.

use backends::{EpochRecord, Observer, StageResult, StepRecord};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use manifests::{Diagnostic, StageKind};
use pipeline_cli::summary::{percent, stage_line, value};
use std::io::IsTerminal;

fn epoch_line(r: &EpochRecord) -> String {
    let mut line = format!(
        "{} epoch {}/{}  loss {}",
        r.stage,
        r.epoch,
        r.epochs,
        value(r.loss)
    );
    if let Some(a) = r.accuracy {
        line += &format!("  acc {}", percent(a));
    }
    if let Some(l) = r.val_loss {
        line += &format!("  val loss {}", value(l));
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

/// A progress bar per `train` stage, over all its epochs: the epoch, the step within it,
/// the running loss (and accuracy) and throughput of the last step or epoch record, and
/// the time the stage has left.
#[derive(Default)]
pub struct Bar {
    stage: String,
    bar: Option<ProgressBar>,
    epoch: u64,
    epochs: u64,
    batches: u64,
}

/// What a record says of the training so far, for the bar.
fn running(loss: f64, accuracy: Option<f64>, samples_per_second: f64) -> String {
    let mut msg = format!(" · loss {}", value(loss));
    if let Some(a) = accuracy {
        msg += &format!(" · acc {}", percent(a));
    }
    msg + &format!(" · {samples_per_second:.0} samples/s")
}

impl Bar {
    fn prefix(&self) -> String {
        format!("{} · epoch {}/{}", self.stage, self.epoch, self.epochs)
    }
}

/// The bar's look, with `end` (the time left, or why it stopped) before the message, which
/// is cut to the terminal's width.
fn style(batches: u64, end: &str) -> ProgressStyle {
    // The batch within the epoch, from the position over all epochs.
    let step = move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
        let within = s.pos().checked_sub(1).map_or(0, |p| p % batches.max(1) + 1);
        let _ = write!(w, "{within}/{batches}");
    };
    ProgressStyle::with_template(&format!(
        "{{prefix:.bold}} [{{bar:20.cyan/blue}}] step {{step}} · {end}{{wide_msg}}"
    ))
    .expect("valid template")
    .with_key("step", step)
    .progress_chars("=> ")
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
    fn epoch_started(&mut self, _stage: &str, epoch: u64, epochs: u64, batches: u64) {
        (self.epoch, self.epochs, self.batches) = (epoch, epochs, batches);
        let prefix = self.prefix();
        let fresh = self.bar.is_none();
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(
                Some(epochs * batches),
                ProgressDrawTarget::stderr_with_hz(10),
            );
            bar.set_style(style(batches, "ETA {eta}"));
            bar
        });
        bar.set_prefix(prefix);
        if fresh {
            // A resumed training starts where its snapshot was.
            bar.set_position((epoch - 1) * batches);
            bar.reset_eta();
        }
    }
    fn step(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position((self.epoch - 1) * self.batches + done);
        }
    }
    fn step_logged(&mut self, r: &StepRecord) {
        if let Some(bar) = &self.bar {
            bar.set_message(running(r.loss, r.accuracy, r.samples_per_second));
        }
    }
    fn epoch_finished(&mut self, r: &EpochRecord) {
        if let Some(bar) = &self.bar {
            let mut msg = running(r.loss, r.accuracy, r.samples_per_second);
            if let Some(a) = r.val_accuracy {
                msg += &format!(" · val acc {}", percent(a));
            }
            bar.set_message(msg);
        }
    }
    /// The bar stays where the stage failed, above the error.
    fn stage_failed(&mut self, _stage: &str, _error: &Diagnostic) {
        if let Some(bar) = self.bar.take() {
            bar.set_style(style(self.batches, "failed"));
            bar.abandon();
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
