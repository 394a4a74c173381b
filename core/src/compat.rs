//! The accelerator's compatibility rules: combinations of settings that cannot work, or
//! that do not do what they seem to, found before any training starts.
//!
//! One table, [`RULES`]; one small function per rule, with a stable code, a label on each
//! entry involved and a help line saying what to write instead. `pipeline check` runs them
//! with what can be known without libtorch ([`Facts::at_check`]); a run runs them again
//! with what it found (a GPU or not, the size of the training split), so rules that need
//! those facts warn at check time and decide at run time. `docs/compatibility.md` is
//! generated from this table ([`markdown`]); a test keeps it current.
//!
//! The rules know no member by name: they ask the registered accelerators, precisions
//! and strategies (`manifests::accelerator`) what they are — whether a precision needs
//! CUDA, a strategy runs several processes — so a member a library registers is checked
//! like a built-in. The generated doc lists the members with what each says.

use manifests::accelerator::{ACCELERATORS, PRECISIONS, STRATEGIES};
use manifests::{
    AcceleratorSpec, CommBackend, DeviceSpec, Diagnostic, Manifest, Severity, StageConfig,
};

/// What the rules may know beyond the manifest.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Whether CUDA is usable: `Some(false)` when there is certainly none (no NVIDIA
    /// driver at check time; libtorch's answer at run time), `None` when unknown.
    pub cuda: Option<bool>,
    /// Samples in the training split, known once the data is loaded.
    pub train_samples: Option<u64>,
    /// Processes in the run, known once it starts.
    pub world: Option<usize>,
    /// Set at run time: rules that only warned at check time decide now.
    pub at_run: bool,
    /// `pipeline check --device`: what the job will have, said on the command line
    /// (the rules that need the device decide as at run time, from it).
    pub told: bool,
}

impl Facts {
    /// What `pipeline check` knows: only whether an NVIDIA driver is present at all.
    pub fn at_check() -> Facts {
        let driver = std::path::Path::new("/proc/driver/nvidia/version").exists();
        Facts {
            cuda: (!driver).then_some(false),
            train_samples: None,
            world: None,
            at_run: false,
            told: false,
        }
    }

    /// What `pipeline check` is told of the job the run will be (`--nproc-per-node`,
    /// `--nnodes`, `--device`): its processes, and whether it has CUDA; the rest as
    /// [`Facts::at_check`].
    pub fn launched(processes: Option<usize>, cuda: Option<bool>) -> Facts {
        let here = Facts::at_check();
        Facts {
            cuda: cuda.or(here.cuda),
            world: processes,
            at_run: cuda.is_some(),
            told: cuda.is_some(),
            ..here
        }
    }
}

/// One rule: what it is about and how it is checked.
pub struct Rule {
    /// Stable, for CI filters and `docs/compatibility.md`.
    pub code: &'static str,
    /// The manifest keys it involves (`section.key`), for `pipeline explain`.
    pub keys: &'static [&'static str],
    /// What the rule refuses, in one sentence.
    pub summary: &'static str,
    /// Error or warning, and when it is decided.
    pub severity: Severity,
    pub when: &'static str,
    /// What to write instead (the help line of its diagnostic).
    pub help: &'static str,
    pub check: fn(&Rule, &Manifest, &Facts) -> Vec<Diagnostic>,
}

pub const RULES: &[Rule] = &[
    Rule {
        code: "pipeline::accelerator::fp16_on_cpu",
        keys: &["accelerator.precision", "accelerator.device"],
        summary: "a precision that needs CUDA (float16: `16-mixed`, `16-true`) on another accelerator (the CPU).",
        severity: Severity::Error,
        when: "check (`cpu`, or `auto` with `check --device cpu`); run (`auto` without a GPU; check warns)",
        help: "write `precision \"bf16-mixed\"`: bfloat16 autocast runs on the CPU; float16 needs `device \"cuda\"`",
        check: fp16_on_cpu,
    },
    Rule {
        code: "pipeline::accelerator::cuda_unavailable",
        keys: &["accelerator.device"],
        summary: "`cuda` or `cuda:N` where no CUDA device is usable.",
        severity: Severity::Error,
        when: "run; check warns when the machine has no NVIDIA driver, and refuses with `check --device cpu`",
        help: "use `device \"auto\"` to fall back to the CPU, or run on a machine with a GPU",
        check: cuda_unavailable,
    },
    Rule {
        code: "pipeline::accelerator::loss_scale_without_fp16",
        keys: &["accelerator.loss-scale", "accelerator.precision"],
        summary: "a dynamic loss scaler with a precision that needs none (of the built-ins, all but `16-mixed`: bfloat16 has fp32's range; `16-true` has no fp32 weights to unscale into).",
        severity: Severity::Error,
        when: "check",
        help: "remove `loss-scale`, or use `precision \"16-mixed\"`",
        check: loss_scale_without_fp16,
    },
    Rule {
        code: "pipeline::accelerator::two_clippings",
        keys: &["accelerator.max-norm", "accelerator.clip-value"],
        summary: "clipping by norm and by value at once: two contradicting settings for one step.",
        severity: Severity::Error,
        when: "check",
        help: "keep one: `max-norm` (the usual choice) or `clip-value`",
        check: two_clippings,
    },
    Rule {
        code: "pipeline::accelerator::norm_type_without_max_norm",
        keys: &["accelerator.norm-type", "accelerator.max-norm"],
        summary: "`norm-type` without `max-norm`, where it does nothing.",
        severity: Severity::Warning,
        when: "check",
        help: "add `max-norm`, or remove `norm-type`",
        check: norm_type_without_max_norm,
    },
    Rule {
        code: "pipeline::accelerator::uneven_accumulation",
        keys: &["accelerator.accumulate", "train.batch-size"],
        summary: "accumulation that does not divide an epoch's batches: the last optimizer step of every epoch sums fewer micro-batches.",
        severity: Severity::Warning,
        when: "run (the number of batches depends on the data)",
        help: "pick an `accumulate` that divides the number of batches per epoch, or accept the shorter last step",
        check: uneven_accumulation,
    },
    Rule {
        code: "pipeline::accelerator::strategy_with_one_process",
        keys: &["accelerator.strategy"],
        summary: "a distributed strategy run as a single process (no launcher started the others).",
        severity: Severity::Error,
        when: "run (the launcher decides the number of processes), or `check --nproc-per-node 1`",
        help: "start the processes: `pipeline run FILE --nproc-per-node 2` (or torchrun, srun); or write `strategy \"none\"`",
        check: strategy_with_one_process,
    },
    Rule {
        code: "pipeline::accelerator::processes_without_strategy",
        keys: &["accelerator.strategy"],
        summary: "several processes with a strategy of one process (`none`): each would train the same model alone.",
        severity: Severity::Error,
        when: "run, or `check --nproc-per-node N --nnodes M` (N × M > 1)",
        help: "write `strategy \"ddp\"`, or run one process",
        check: processes_without_strategy,
    },
    Rule {
        code: "pipeline::accelerator::clip_value_with_sharded_state",
        keys: &["accelerator.clip-value", "accelerator.strategy"],
        summary: "clipping by value with a strategy that shards the optimizer's state (`zero1`), which clips by norm only (as fairscale's OSS).",
        severity: Severity::Error,
        when: "check",
        help: "clip by norm (`max-norm`), or use `strategy \"ddp\"`",
        check: clip_value_with_sharded_state,
    },
    Rule {
        code: "pipeline::accelerator::bucketed_sampler_without_key",
        keys: &["accelerator.sampler", "accelerator.bucket-by"],
        summary: "the bucketed sampler without the feature to sort the samples by.",
        severity: Severity::Error,
        when: "check",
        help: "add `bucket-by N`: the index of the feature to sort by (e.g. a sequence length)",
        check: bucketed_sampler_without_key,
    },
    Rule {
        code: "pipeline::accelerator::nccl_without_cuda",
        keys: &["accelerator.backend", "accelerator.device"],
        summary: "`backend \"nccl\"` on an accelerator NCCL cannot carry (the CPU): NCCL carries CUDA tensors only.",
        severity: Severity::Error,
        when: "check (`cpu`, or `auto` with `check --device cpu`); run (`auto` without a GPU; check warns)",
        help: "write `backend \"gloo\"` (or `\"auto\"`, which picks Gloo on the CPU and NCCL on CUDA), or `device \"cuda\"`",
        check: nccl_without_cuda,
    },
    Rule {
        code: "pipeline::accelerator::sync_batch_norm_without_strategy",
        keys: &["accelerator.sync-batch-norm", "accelerator.strategy"],
        summary: "`sync-batch-norm` without a strategy of several processes: one process already normalises over its whole batch.",
        severity: Severity::Warning,
        when: "check",
        help: "remove `sync-batch-norm`, or write `strategy \"ddp\"` and start several processes",
        check: sync_batch_norm_without_strategy,
    },
    Rule {
        code: "pipeline::accelerator::sync_batch_norm_torchscript",
        keys: &["accelerator.sync-batch-norm", "model.torchscript.path"],
        summary: "`sync-batch-norm` with a `torchscript` model: the batch-norm layers inside a scripted module are its own, and cannot be synchronised from outside.",
        severity: Severity::Error,
        when: "check",
        help: "remove `sync-batch-norm` (each process then normalises over its own share of the batch), or write the model with native layers",
        check: sync_batch_norm_torchscript,
    },
    Rule {
        code: "pipeline::accelerator::nondeterministic_op",
        keys: &["accelerator.deterministic"],
        summary: "`deterministic #true` with an operation libtorch has no deterministic kernel for (mostly CUDA scatter-type backward passes).",
        severity: Severity::Error,
        when: "run (libtorch reports it when the operation runs)",
        help: "set `deterministic #false`, or change the layer that needs the operation",
        check: |_, _, _| Vec::new(),
    },
];

/// Every rule's diagnostics, in table order.
pub fn check(manifest: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    RULES
        .iter()
        .flat_map(|rule| (rule.check)(rule, manifest, facts))
        .collect()
}

/// The rule with this code (every code a rule function emits is in the table).
pub fn rule(code: &str) -> &'static Rule {
    RULES
        .iter()
        .find(|r| r.code == code)
        .expect("every rule code is in the table")
}

/// Points a diagnostic at the entry of an accelerator key.
trait Entry {
    /// A label on `key` where the file writes it; a value given with `--set` is not in
    /// the file, so the message says which `--set` gave it instead (`(float16: from --set
    /// accelerator.precision=16-mixed)`); nothing for a default.
    fn entry(self, a: &AcceleratorSpec, key: &str, text: impl Into<String>) -> Self;
}

impl Entry for Diagnostic {
    fn entry(mut self, a: &AcceleratorSpec, key: &str, text: impl Into<String>) -> Diagnostic {
        match (a.span(key), a.from_set(key)) {
            (Some(span), _) => self.label(span, text),
            (None, Some(set)) => {
                self.message += &format!(" ({}: from --set {set})", text.into());
                self
            }
            (None, None) => self,
        }
    }
}

impl Rule {
    fn error(&self, message: String) -> Diagnostic {
        Diagnostic::error(self.code, message).help(self.help)
    }

    fn warning(&self, message: String) -> Diagnostic {
        Diagnostic::warning(self.code, message).help(self.help)
    }
}

fn fp16_on_cpu(rule: &Rule, m: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    if !a.precision.describe().needs_cuda {
        return Vec::new();
    }
    let p = a.precision.as_str();
    let d = match a.device {
        DeviceSpec::On(acc, _) if !acc.describe().cuda => rule.error(format!(
            "precision `{p}` needs CUDA, but the device is {}",
            acc.describe().called
        )),
        DeviceSpec::Auto if facts.cuda == Some(false) && facts.at_run => rule.error(format!(
            "precision `{p}` needs CUDA, but `auto` found no GPU and chose the CPU"
        )),
        DeviceSpec::Auto if !facts.at_run => rule.warning(format!(
            "precision `{p}` needs CUDA; `auto` falls back to the CPU where there is no GPU, and the run would stop there"
        )),
        _ => return Vec::new(),
    };
    let called = a
        .device
        .accelerator()
        .map_or("the CPU", |acc| acc.describe().called);
    vec![d
        .entry(a, "precision", "float16")
        .entry(a, "device", called)]
}

fn cuda_unavailable(rule: &Rule, m: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    match (a.device, facts.cuda) {
        (DeviceSpec::On(acc, _), Some(false)) if acc.describe().cuda && facts.told => vec![rule
            .error(format!(
                "`device \"{}\"`, but the job will have no GPU (`--device cpu`)",
                a.device
            ))
            .entry(a, "device", "CUDA requested here")],
        (DeviceSpec::On(acc, _), Some(false)) if acc.describe().cuda && !facts.at_run => vec![rule
            .warning(format!(
                "`device \"{}\"`, but this machine has no NVIDIA driver: a run here would stop",
                a.device
            ))
            .entry(a, "device", "CUDA requested here")],
        // At run time `device::resolve` reports it, with what libtorch found.
        _ => Vec::new(),
    }
}

fn loss_scale_without_fp16(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    if a.loss_scale != Some(manifests::LossScale::Dynamic) || a.precision.describe().loss_scaling {
        return Vec::new();
    }
    vec![rule
        .error(format!(
            "a dynamic loss scaler does nothing useful with precision `{}`",
            a.precision.as_str()
        ))
        .entry(a, "loss-scale", "loss scaler")
        .entry(a, "precision", "no float16 gradients to protect")]
}

fn two_clippings(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    match (a.clipping.max_norm, a.clipping.value) {
        (Some(_), Some(_)) => vec![rule
            .error("gradients are clipped both by norm and by value".into())
            .entry(a, "max-norm", "by norm")
            .entry(a, "clip-value", "by value")],
        _ => Vec::new(),
    }
}

fn norm_type_without_max_norm(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    match (a.is_given("norm-type"), a.clipping.max_norm) {
        (true, None) => vec![rule
            .warning("`norm-type` is set but nothing clips by norm".into())
            .entry(a, "norm-type", "no effect without `max-norm`")],
        _ => Vec::new(),
    }
}

fn uneven_accumulation(rule: &Rule, m: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    let (Some(n), k) = (facts.train_samples, m.accelerator.accumulate) else {
        return Vec::new();
    };
    if k <= 1 {
        return Vec::new();
    }
    let mut diags = Vec::new();
    for stage in &m.stages {
        let StageConfig::Train(t) = &stage.config else {
            continue;
        };
        let (batch, batches) = crate::sampler::batches_per_epoch(n, t.batch_size, t.drop_last);
        if batches % k != 0 {
            diags.push(
                rule.warning(format!(
                    "stage `{}`: {batches} batches per epoch do not divide into steps of {k}; the last step of each epoch sums {}",
                    stage.name(),
                    batches % k
                ))
                .entry(&m.accelerator, "accumulate", format!("{k} micro-batches per step"))
                .label_opt(stage.name.span, format!("{batches} batches of {batch}")),
            );
        }
    }
    diags
}

fn strategy_with_one_process(rule: &Rule, m: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    let strategy = m.accelerator.distributed.strategy;
    let name = strategy.as_str();
    match facts.world {
        Some(1) if strategy.describe().distributed => vec![rule
            .error(format!("`strategy \"{name}\"` in a run of one process"))
            .entry(&m.accelerator, "strategy", "needs several processes")],
        _ => Vec::new(),
    }
}

fn clip_value_with_sharded_state(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    match (
        a.distributed.strategy.describe().shards_optimizer,
        a.clipping.value,
    ) {
        (true, Some(_)) => vec![rule
            .error("clipping by value with sharded optimizer state".into())
            .entry(a, "clip-value", "by value")
            .entry(a, "strategy", "sharded optimizer state")],
        _ => Vec::new(),
    }
}

fn bucketed_sampler_without_key(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let d = &m.accelerator.distributed;
    match (d.bucketed, d.bucket_by) {
        (true, None) => vec![rule
            .error("`sampler \"bucketed\"` has nothing to sort the samples by".into())
            .entry(&m.accelerator, "sampler", "needs `bucket-by`")],
        _ => Vec::new(),
    }
}

fn nccl_without_cuda(rule: &Rule, m: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    if a.distributed.backend != CommBackend::Nccl {
        return Vec::new();
    }
    let d = match a.device {
        DeviceSpec::On(acc, _) if !acc.describe().backends.contains(&CommBackend::Nccl) => rule
            .error(format!(
                "`backend \"nccl\"` with {} as the device",
                acc.describe().called
            )),
        DeviceSpec::Auto if facts.cuda == Some(false) && facts.at_run => {
            rule.error("`backend \"nccl\"`, but `auto` found no GPU and chose the CPU".into())
        }
        DeviceSpec::Auto if !facts.at_run => rule.warning(
            "`backend \"nccl\"` needs CUDA; `auto` falls back to the CPU where there is no GPU, and the run would stop there".into(),
        ),
        _ => return Vec::new(),
    };
    let called = a
        .device
        .accelerator()
        .map_or("the CPU", |acc| acc.describe().called);
    vec![d
        .entry(a, "backend", "CUDA tensors only")
        .entry(a, "device", called)]
}

fn sync_batch_norm_without_strategy(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    match (
        a.distributed.sync_batch_norm,
        a.distributed.strategy.describe().distributed,
    ) {
        (true, false) => vec![rule
            .warning("`sync-batch-norm` has nothing to synchronise in a run of one process".into())
            .entry(a, "sync-batch-norm", "no effect")
            .entry(a, "strategy", "one process")],
        _ => Vec::new(),
    }
}

fn sync_batch_norm_torchscript(rule: &Rule, m: &Manifest, _: &Facts) -> Vec<Diagnostic> {
    let a = &m.accelerator;
    match (&m.model.torchscript, a.distributed.sync_batch_norm) {
        (Some(script), true) => vec![rule
            .error(
                "`sync-batch-norm` cannot reach the batch-norm layers of a TorchScript model"
                    .into(),
            )
            .entry(a, "sync-batch-norm", "synchronised batch-norm")
            .label_opt(script.path.span, "a scripted module")],
        _ => Vec::new(),
    }
}

fn processes_without_strategy(rule: &Rule, m: &Manifest, facts: &Facts) -> Vec<Diagnostic> {
    match (
        m.accelerator.distributed.strategy.describe().distributed,
        facts.world,
    ) {
        (false, Some(world)) if world > 1 => vec![rule
            .error(format!("{world} processes, but no distributed strategy"))
            .entry(&m.accelerator, "strategy", "one process's strategy")],
        _ => Vec::new(),
    }
}

/// `docs/compatibility.md`: the table of rules.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Compatibility rules\n\n\
         Generated from `core/src/compat.rs` (`RULES`) by `cargo test`; do not edit by hand.\n\
         `pipeline check` runs every rule it can decide without the GPU or the data, and\n\
         warns about the others; `pipeline run` decides those before training starts.\n\n\
         | code | refuses | severity | decided at | keys | write instead |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in RULES {
        let severity = match r.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let keys: Vec<String> = r.keys.iter().map(|k| format!("`{k}`")).collect();
        out += &format!(
            "| `{}` | {} | {severity} | {} | {} | {} |\n",
            r.code,
            r.summary,
            r.when,
            keys.join(", "),
            r.help
        );
    }
    out + &members()
}

/// The registered members the rules ask (`manifests::accelerator`), with what each says
/// of itself: a member a library registers is held to the same rules by what it says.
fn members() -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut out = String::from(
        "\n## Members\n\n\
         The rules above ask each member what it is, rather than knowing the built-in names:\n\
         a member registered by a program built on pipeline (`docs/extending.md`) is checked\n\
         the same way.\n\n\
         ### Accelerators (`accelerator.device`)\n\n\
         | name | numbered (`NAME:N`) | CUDA | collectives | |\n|---|---|---|---|---|\n",
    );
    for a in ACCELERATORS.all() {
        let backends: Vec<String> = a
            .backends
            .iter()
            .map(|b| format!("`{}`", b.as_str()))
            .collect();
        out += &format!(
            "| `{}` | {} | {} | {} | {} |\n",
            a.name,
            yes(a.indexed),
            yes(a.cuda),
            backends.join(", "),
            a.doc
        );
    }
    out += "\n### Precisions (`accelerator.precision`)\n\n\
            | name | weights | autocast | loss scaler | needs CUDA | |\n|---|---|---|---|---|---|\n";
    for p in PRECISIONS.all() {
        out += &format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            p.name,
            p.weights.as_str(),
            p.autocast.map_or("none", |d| d.as_str()),
            yes(p.loss_scaling),
            yes(p.needs_cuda),
            p.doc
        );
    }
    out += "\n### Strategies (`accelerator.strategy`)\n\n\
            | name | several processes | shards the optimizer's state | |\n|---|---|---|---|\n";
    for st in STRATEGIES.all() {
        out += &format!(
            "| `{}` | {} | {} | {} |\n",
            st.name,
            yes(st.distributed),
            yes(st.shards_optimizer),
            st.doc
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/compatibility.md` is generated from [`RULES`]; `PIPELINE_BLESS=1` rewrites it.
    #[test]
    fn the_compatibility_docs_are_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/compatibility.md");
        if std::env::var_os("PIPELINE_BLESS").is_some() {
            std::fs::write(&path, markdown()).unwrap();
        }
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            written == markdown(),
            "docs/compatibility.md is stale: run `PIPELINE_BLESS=1 cargo test -p pipeline-core`"
        );
    }

    #[test]
    fn codes_are_unique_and_keys_exist() {
        let mut codes: Vec<&str> = RULES.iter().map(|r| r.code).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), RULES.len());
        for rule in RULES {
            for key in rule.keys {
                let (section, name) = key.rsplit_once('.').unwrap();
                // `model.torchscript.path`: a key of a model node.
                let found = match section.split_once('.') {
                    Some(("model", node)) => {
                        manifests::schema::model_node(node).is_some_and(|s| s.key(name).is_some())
                    }
                    _ => manifests::schema::sections()
                        .into_iter()
                        .chain(manifests::schema::STAGES.iter().copied())
                        .any(|s| s.name == section && s.key(name).is_some()),
                };
                assert!(found, "{}: no key {key}", rule.code);
            }
        }
    }
}
