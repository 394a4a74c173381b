//! `accelerator.strategy`: how processes share a training. `backends::accelerator::
//! strategy` runs the built-ins.

use super::{Chosen, Member, Registry};

/// What a strategy is, without libtorch.
#[derive(Debug)]
pub struct StrategyDescription {
    /// As a manifest writes it: `strategy "ddp"`.
    pub name: &'static str,
    pub doc: &'static str,
    /// Whether it trains with several processes (and refuses to run as one).
    pub distributed: bool,
    /// Whether each process keeps only its share of the optimizer's state (then clipping
    /// by value, which needs every gradient element in one place, is refused).
    pub shards_optimizer: bool,
}

impl Member for StrategyDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn registry() -> &'static Registry<Self> {
        &STRATEGIES
    }
}

/// One process.
pub static NONE: StrategyDescription = StrategyDescription {
    name: "none",
    doc: "one process",
    distributed: false,
    shards_optimizer: false,
};

/// Data parallel.
pub static DDP: StrategyDescription = StrategyDescription {
    name: "ddp",
    doc: "data parallel: every process trains on its shard of each epoch; gradients averaged over the processes each optimizer step",
    distributed: true,
    shards_optimizer: false,
};

/// Data parallel with the optimizer's state sharded.
pub static ZERO1: StrategyDescription = StrategyDescription {
    name: "zero1",
    doc: "`ddp` with the optimizer's state sharded (ZeRO stage 1, fairscale's OSS): each process updates its share of the parameters and sends them to the others",
    distributed: true,
    shards_optimizer: true,
};

const BUILTINS: &[&StrategyDescription] = &[&NONE, &DDP, &ZERO1];

/// Every strategy a manifest may name.
pub static STRATEGIES: Registry<StrategyDescription> =
    Registry::new(|| BUILTINS.to_vec(), |m| m.name);

/// A registered strategy, as a manifest names it.
pub type Strategy = Chosen<StrategyDescription>;

impl Strategy {
    /// The default, `none`.
    pub const NONE: Strategy = Chosen(&NONE);
}
