//! `train`: its keys, the blocks it holds (`early-stop`, `keep-best`, `validate`), and
//! its lowering.

use crate::lower::monitor;
use crate::reader::{Fields, Reader};
use crate::registry::Family;
use crate::schema::{
    int, key, section, Key, Section, Ty, Val, MAX_BATCH, MAX_EPOCHS, MAX_STEPS, MODE_DOC,
    NON_NEGATIVE, POSITIVE,
};
use crate::{
    suggest, Diagnostic, EarlyStopSpec, KeepBestSpec, Mode, Spanned, TrainSpec, ValidateSpec,
};
use std::path::PathBuf;

pub const SECTION: Section = section(
    "train",
    &["name"],
    &[
        key(
            "name",
            Ty::Text,
            Some(Val::Text("train")),
            "The stage's name (letters, digits, `-` and `_`).",
        ),
        key(
            "needs",
            Ty::Texts,
            None,
            "Stages to run first; a `train` stage it needs gives the starting weights.",
        ),
        key(
            "epochs",
            int(1, MAX_EPOCHS),
            Some(Val::Int(10)),
            "Passes over the training split.",
        ),
        key(
            "batch-size",
            int(1, MAX_BATCH),
            Some(Val::Int(32)),
            "Samples per optimizer step.",
        ),
        key(
            "shuffle",
            Ty::Bool,
            Some(Val::Bool(true)),
            "Reshuffle the training split every epoch (seeded).",
        ),
        key(
            "drop-last",
            Ty::Bool,
            Some(Val::Bool(false)),
            "Drop the last, incomplete batch of every epoch.",
        ),
        key(
            "snapshot-every-epochs",
            int(0, MAX_EPOCHS),
            Some(Val::Int(1)),
            "Save a resumable snapshot (weights, optimizer state, random state, position) every N epochs, so a killed run resumes; 0: never. Not part of the cache key.",
        ),
        key(
            "snapshot-every-steps",
            int(0, MAX_STEPS),
            Some(Val::Int(0)),
            "Also save a snapshot every N optimizer steps (for long epochs); 0: only at epoch ends. Not part of the cache key.",
        ),
        key(
            "init",
            Ty::Path,
            None,
            "Starting weights: a safetensors file named like PyTorch's `nn.Sequential` state dict (`0.weight`, `0.bias`, `1.running_mean`, …); `strict` says whether it must hold exactly the model's.",
        ),
        key(
            "strict",
            Ty::Bool,
            Some(Val::Bool(true)),
            "With `init`: #true refuses a file that does not hold exactly the model's tensors, with their shapes, and names what is missing, unexpected or of the wrong shape; #false loads every tensor whose name and shape match one of the model's (converted to the model's dtype), keeps a fresh initialisation for the others and reports both lists, for fine-tuning a model with a new last layer. A file of which nothing matches fails the run either way.",
        ),
        key(
            "freeze",
            Ty::Texts,
            None,
            "Parameters the optimizer leaves as they are: one or more glob patterns on their state-dict names, such as `\"0.*\"`, `\"*.bias\"` or `\"2.body.*\"` (`*` matches any characters, dots included; `?` one character; `[…]` one of a set). Frozen parameters get no gradient, no update and no weight decay; batch-norm running statistics still follow the data, as in PyTorch. A pattern that matches no trainable parameter, or freezing all of them, fails the run with the model's names.",
        ),
        key(
            "early-stop",
            Ty::Section(&EARLY_STOP),
            None,
            "Stop training when a metric stops improving (`pipeline explain train.early-stop`).",
        ),
        key(
            "keep-best",
            Ty::Section(&KEEP_BEST),
            None,
            "Keep the weights of the best validations as outputs of the stage (`pipeline explain train.keep-best`).",
        ),
        key(
            "validate",
            Ty::Section(&VALIDATE),
            None,
            "When the validation split is measured, and with which metrics (`pipeline explain train.validate`); default: at the end of every epoch, loss and accuracy.",
        ),
        key(
            "max-steps",
            int(1, MAX_STEPS),
            None,
            "Stop after this many optimizer steps in all (the epoch in progress ends there, and is validated). In the cache key.",
        ),
        key(
            "max-time",
            POSITIVE,
            None,
            "Stop after this many seconds of training (checked at every optimizer step; under `ddp`, every 50 steps, when the processes agree). The epoch in progress ends there and is validated; `run --json` says the stage stopped and why. In the cache key: a stage that stopped on time is cached as it ended.",
        ),
        key(
            "callbacks",
            Ty::Members(Family::Callback),
            None,
            "Callbacks a program built on pipeline registered (`docs/extending.md`), turned on by name, each once: `callbacks \"epochs-csv\"`. They see every event of the loop after pipeline's own deciding callbacks (early stopping, keep-best) and before its reporting ones; their state is in every snapshot. pipeline's own are turned on by their keys. In the cache key.",
        ),
    ],
    "A stage that trains the model.",
);

const MONITOR_DOC: &str = "The value watched at every validation: `loss` and `accuracy` of the training batches of the epoch so far (the whole epoch at its end), or `val.METRIC` over the validation split, where METRIC is `loss` or any metric of one value that `eval`'s `metrics` takes (`val.accuracy`, `val.f1-macro`, `val.auroc`, `val.r2`, …), computed at every validation without being listed in `validate`.";

/// `monitor` and `mode`, as `early-stop` and `keep-best` take them.
const MONITOR: Key = key(
    "monitor",
    Ty::Text,
    Some(Val::Text("val.loss")),
    MONITOR_DOC,
);
const MODE: Key = key("mode", Ty::Choice(Mode::NAMES), None, MODE_DOC);

pub const EARLY_STOP: Section = section(
    "early-stop",
    &[],
    &[
        MONITOR,
        MODE,
        key(
            "patience",
            int(1, MAX_EPOCHS),
            Some(Val::Int(5)),
            "Validations without improvement after which training stops (epochs, with the default `validate`).",
        ),
        key(
            "min-delta",
            NON_NEGATIVE,
            Some(Val::Float(0.0)),
            "How much better than the best so far a value must be to count as an improvement.",
        ),
    ],
    "Stops a `train` stage after `patience` validations in which `monitor` did not improve on its best by more than `min-delta`, as Lightning's `EarlyStopping` and pytorch-accelerated's `EarlyStoppingCallback` do. The stage then ends like a finished one: its weights (those of the last epoch) are its output, and `run --json` says at which epoch it stopped and why. The patience counter and the best value are saved in every snapshot, so a killed run resumes with them and stops at the same epoch. In the cache key.",
);

pub const KEEP_BEST: Section = section(
    "keep-best",
    &[],
    &[
        MONITOR,
        MODE,
        key(
            "k",
            int(1, 100),
            Some(Val::Int(1)),
            "How many of the best weights to keep.",
        ),
    ],
    "Keeps the weights of the `k` best validations by `monitor` (Lightning's `ModelCheckpoint(save_top_k=k)`): they are outputs of the stage, stored in the cache like its last weights, and an `eval` or `checkpoint` stage takes them with `from \"best\"` (or `\"best-2\"`, …). `run --json` gives each one's epoch, step and score. The kept weights and their scores are part of every snapshot, so a killed run resumes with them. A value that is not finite is never kept; of equal values the earlier is better. In the cache key.",
);

pub const VALIDATE: Section = section(
    "validate",
    &[],
    &[
        key(
            "every-epochs",
            int(0, MAX_EPOCHS),
            Some(Val::Int(1)),
            "Validate at the end of every N epochs (the last epoch is always validated); 0: only as `every-steps` says.",
        ),
        key(
            "every-steps",
            int(0, MAX_STEPS),
            Some(Val::Int(0)),
            "Also validate every N optimizer steps (for long epochs); 0: only at epoch ends.",
        ),
        key(
            "metrics",
            Ty::Metrics,
            None,
            "Metrics of the validation split besides its loss (and accuracy), written to `metrics.jsonl` as `val_METRIC` at every validation: the names `eval`'s `metrics` takes, of one value each.",
        ),
    ],
    "When a `train` stage measures its validation split (`data.split val=…`), and what. `early-stop` and `keep-best` decide at every validation. In the cache key.",
);

impl Reader<'_> {
    pub(crate) fn train(&mut self, f: &Fields) -> TrainSpec {
        let init = f.opt_text("init").map(|p| Spanned {
            value: PathBuf::from(p),
            span: f.span("init"),
        });
        if init.is_none() && f.value("strict").is_some() {
            self.diags.push(
                Diagnostic::warning(
                    "pipeline::train::strict_without_init",
                    "`train.strict` has no effect without `init`",
                )
                .label_opt(f.span("strict"), "ignored")
                .help("`strict` says how the weights of `init \"file.safetensors\"` are loaded; remove it, or add `init`"),
            );
        }
        let freeze = f.texts("freeze");
        self.bad_patterns(&freeze);
        let callbacks = self.callbacks(f);
        TrainSpec {
            epochs: f.int("epochs") as u64,
            batch_size: f.int("batch-size") as u64,
            shuffle: f.bool("shuffle"),
            drop_last: f.bool("drop-last"),
            snapshot_every_epochs: f.int("snapshot-every-epochs") as u64,
            snapshot_every_steps: f.int("snapshot-every-steps") as u64,
            // Without `init` there is nothing to be strict about: the default, so that
            // the key is the same as with `strict` left out.
            strict: f.bool("strict") || init.is_none(),
            init,
            freeze,
            callbacks,
            // Set when the stages are cut into folds (`crate::folds`).
            fold: None,
            early_stop: f.section_fields("early-stop").map(|e| EarlyStopSpec {
                monitor: monitor(e),
                mode: e.opt_text("mode").and_then(|m| Mode::parse(&m)),
                patience: e.int("patience") as u64,
                min_delta: e.float("min-delta"),
                span: e.span,
            }),
            keep_best: f.section_fields("keep-best").map(|e| KeepBestSpec {
                monitor: monitor(e),
                mode: e.opt_text("mode").and_then(|m| Mode::parse(&m)),
                k: e.int("k") as u64,
                span: e.span,
            }),
            validate: f
                .section_fields("validate")
                .map_or_else(ValidateSpec::default, |v| ValidateSpec {
                    every_epochs: v.int("every-epochs") as u64,
                    every_steps: v.int("every-steps") as u64,
                    metrics: v.texts("metrics"),
                    span: v.span,
                }),
            max_steps: f.opt_int("max-steps").map(|n| n as u64),
            max_time: f.opt_float("max-time"),
        }
    }

    fn callbacks(&mut self, f: &Fields) -> Vec<Spanned<String>> {
        let names = crate::callbacks::CALLBACKS.names();
        let mut on: Vec<Spanned<String>> = Vec::new();
        for name in f.texts("callbacks") {
            if on.iter().any(|c| c.value == name.value) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::train::callback_twice",
                        format!("the callback `{}` is turned on twice", name.value),
                    )
                    .label_opt(name.span, "again")
                    .help("name each callback once"),
                );
            } else if !names.contains(&name.value.as_str()) {
                let help = match names.is_empty() {
                    true => "this program registers no callback: `callbacks` names those a program built on pipeline registers (`docs/extending.md`); pipeline's own are turned on by their keys (`early-stop`, `keep-best`, …)".to_string(),
                    false => suggest::help_for(&name.value, "callback", &names),
                };
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::train::unknown_callback",
                        format!("no callback is registered as `{}`", name.value),
                    )
                    .label_opt(name.span, "not a registered callback")
                    .help(help),
                );
            } else {
                on.push(name);
            }
        }
        on
    }
}
