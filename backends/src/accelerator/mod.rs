//! What runs the accelerator's open sets (`manifests::accelerator` describes them):
//! one trait per family, [`Accelerator`], [`Strategy`] and [`Precision`], each with a
//! registry by name. The built-ins (`cpu`, `cuda`; `none`, `ddp`, `zero1`; the six
//! precisions) are members like any other; a program built on pipeline adds its own
//! with [`register_accelerator`], [`register_strategy`] or [`register_precision`]
//! before it runs the command line (`examples/extension/`), and a manifest then names
//! them as it names the built-ins — `pipeline check` holds them to the compatibility
//! rules by what their descriptions say.

mod cpu;
mod cuda;
mod device;
mod precision;
mod strategy;

pub use device::{of, resolve, Accelerator, Unavailable};
pub use precision::{kind, Precision};
pub use strategy::Strategy;

use crate::process_group::Backend;
use manifests::accelerator::{Registry, ACCELERATORS, PRECISIONS, STRATEGIES};
use manifests::{CommBackend, Diagnostic};
use tch::Device;

static RUN_ACCELERATORS: Registry<dyn Accelerator> = Registry::new(
    || vec![&cpu::Cpu as &dyn Accelerator, &cuda::Cuda],
    |a| a.describe().name,
);

static RUN_STRATEGIES: Registry<dyn Strategy> =
    Registry::new(strategy::builtins, |s| s.describe().name);

static RUN_PRECISIONS: Registry<dyn Precision> =
    Registry::new(precision::builtins, |p| p.describe().name);

/// Adds an accelerator: its description (what `check` knows) and its code. Refused when
/// the name is taken.
pub fn register_accelerator(member: &'static dyn Accelerator) -> Result<(), String> {
    ACCELERATORS.register(member.describe())?;
    RUN_ACCELERATORS.register(member)
}

/// Adds a strategy: its description and its code. Refused when the name is taken.
pub fn register_strategy(member: &'static dyn Strategy) -> Result<(), String> {
    STRATEGIES.register(member.describe())?;
    RUN_STRATEGIES.register(member)
}

/// Adds a precision: its description and its code. Refused when the name is taken.
pub fn register_precision(member: &'static dyn Precision) -> Result<(), String> {
    PRECISIONS.register(member.describe())?;
    RUN_PRECISIONS.register(member)
}

/// The code of a member the manifest names (registered with its description, so always
/// found unless a library registered a description alone).
fn find<T: ?Sized>(
    members: &Registry<T>,
    family: &str,
    name: &'static str,
    key: &str,
    manifest: &manifests::AcceleratorSpec,
) -> Result<&'static T, Diagnostic> {
    members.get(name).ok_or_else(|| {
        Diagnostic::error(
            "pipeline::accelerator::no_implementation",
            format!("the {family} `{name}` is described, but this program has no code for it"),
        )
        .label_opt(manifest.span(key), "named here")
        .help(format!(
            "register it with `backends::accelerator::register_{family}`, which registers its description and its code together"
        ))
    })
}

/// The engine for a group's collectives (`accelerator.backend`): `auto` is the first
/// engine the device's accelerator pairs with, as torch.distributed picks NCCL for CUDA
/// tensors and Gloo otherwise. (`check` refuses an engine the accelerator cannot use.)
pub fn comm_backend(asked: CommBackend, device: Device) -> Backend {
    let pairs = of(device).map_or(&[CommBackend::Gloo][..], |a| a.describe().backends);
    let chosen = match asked {
        CommBackend::Auto => pairs.first().copied().unwrap_or(CommBackend::Gloo),
        CommBackend::Gloo | CommBackend::Nccl => asked,
    };
    match (chosen, device) {
        (CommBackend::Nccl, Device::Cuda(device)) => Backend::Nccl { device },
        _ => Backend::Gloo,
    }
}

/// The strategy the manifest names.
pub fn strategy(spec: &manifests::AcceleratorSpec) -> Result<&'static dyn Strategy, Diagnostic> {
    let name = spec.distributed.strategy.as_str();
    find(&RUN_STRATEGIES, "strategy", name, "strategy", spec)
}

/// The registered strategy of this name (`zero1`, …), if any: a snapshot says which
/// strategy took it.
pub fn strategy_named(name: &str) -> Option<&'static dyn Strategy> {
    RUN_STRATEGIES.get(name)
}

/// The precision the manifest names.
pub fn precision(spec: &manifests::AcceleratorSpec) -> Result<&'static dyn Precision, Diagnostic> {
    find(
        &RUN_PRECISIONS,
        "precision",
        spec.precision.as_str(),
        "precision",
        spec,
    )
}

/// Every runtime member has its description registered (the built-ins' are
/// `manifests`'s), so `check` and a run know the same names.
#[cfg(test)]
mod tests {
    use super::*;
    use manifests::accelerator::{Member, StrategyDescription};

    /// The built-in members' code and descriptions are the same members, in the same
    /// order (what another test registers comes after them).
    #[test]
    fn every_builtin_member_is_described_and_has_code() {
        fn same<T: Member, R: ?Sized>(described: Vec<&'static T>, run: &Registry<R>) {
            let run = run.names();
            let described: Vec<&str> = described.iter().map(|d| d.name()).collect();
            assert_eq!(described, run[..described.len()]);
        }
        same(ACCELERATORS.builtins(), &RUN_ACCELERATORS);
        same(STRATEGIES.builtins(), &RUN_STRATEGIES);
        same(PRECISIONS.builtins(), &RUN_PRECISIONS);
        for (a, b) in PRECISIONS.builtins().iter().zip(RUN_PRECISIONS.all()) {
            assert!(std::ptr::eq(*a, b.describe()), "{}", a.name);
        }
    }

    /// A description registered without code (straight into `manifests`) passes
    /// `check`, and a run says what is missing instead of running something else.
    #[test]
    fn a_member_described_without_code_is_a_clear_error() {
        static ONLY_DESCRIBED: StrategyDescription = StrategyDescription {
            name: "described-only",
            doc: "a test's",
            distributed: true,
            shards_optimizer: false,
        };
        STRATEGIES.register(&ONLY_DESCRIBED).unwrap();
        let spec = |strategy: &str| {
            let text = format!("data \"d.csv\"\nmodel {{ linear 2 }}\nloss \"mse\"\noptimizer \"sgd\"\naccelerator {{ strategy \"{strategy}\"; }}\ntrain\n");
            let lowered = manifests::lower(&text, "t", std::path::Path::new(""), &[]);
            assert!(lowered.diagnostics.is_empty(), "{:?}", lowered.diagnostics);
            lowered.manifest.unwrap().accelerator
        };
        let d = strategy(&spec("described-only")).err().unwrap();
        assert_eq!(d.code, "pipeline::accelerator::no_implementation");
        assert_eq!(
            d.message,
            "the strategy `described-only` is described, but this program has no code for it"
        );
        assert!(strategy(&spec("ddp")).is_ok());
    }
}
