//! The accelerator's open sets, as Lightning separates them: the **accelerator** (the
//! hardware a device string names: `cpu`, `cuda:1`), the **strategy** (how processes
//! share a training: `ddp`, `zero1`) and the **precision** (`bf16-mixed`). A manifest
//! names a member by string; each family is a [`Registry`] of descriptions, with the
//! built-ins registered first and a library user's members after them
//! (`backends::accelerator::register_strategy` registers a member's code and its
//! description together).
//!
//! A description is what can be known of a member without libtorch: its name and
//! documentation (`pipeline explain`, `docs/compatibility.md`) and the facts the
//! compatibility rules (`core/src/compat.rs`) ask of it — whether a precision needs
//! CUDA, whether a strategy runs several processes or shards the optimizer's state —
//! so that the rules hold for every member, not only for the built-in ones.

mod device;
mod precision;
mod strategy;

pub use device::{Accelerator, AcceleratorDescription, DeviceSpec, ACCELERATORS};
pub use device::{CPU, CUDA};
pub use precision::{Dtype, Precision, PrecisionDescription, PRECISIONS};
pub use strategy::{Strategy, StrategyDescription, STRATEGIES};
pub use strategy::{DDP, NONE, ZERO1};

pub use crate::registry::{Chosen, Family, Member, Registry};

#[cfg(test)]
mod tests {
    use super::*;

    /// Members serialise (in the specs, so in cache keys) to the names a manifest writes,
    /// as the enums they replaced did: keys from before the registries stay valid.
    #[test]
    fn members_serialise_as_the_enums_they_replaced() {
        for name in PRECISIONS.names() {
            assert_eq!(
                json(&Precision::named(name).unwrap()),
                format!("\"{name}\"")
            );
        }
        for name in STRATEGIES.names() {
            assert_eq!(json(&Strategy::named(name).unwrap()), format!("\"{name}\""));
        }
        let device = |text| DeviceSpec::parse(text, 1023).unwrap();
        assert_eq!(json(&device("auto")), "\"auto\"");
        assert_eq!(json(&device("cpu")), "\"cpu\"");
        assert_eq!(json(&device("cuda")), "{\"cuda\":0}");
        assert_eq!(json(&device("cuda:3")), "{\"cuda\":3}");
        assert_eq!(device("cuda:3").to_string(), "cuda:3");
        for bad in ["cuda:x", "cuda:1024", "cpu:1", "tpu"] {
            assert!(DeviceSpec::parse(bad, 1023).is_err(), "{bad}");
        }
        assert_eq!(
            PRECISIONS.names(),
            ["32", "64", "bf16-mixed", "bf16-true", "16-mixed", "16-true"]
        );
        // (Another test registers a strategy after these.)
        assert_eq!(STRATEGIES.names()[..3], ["none", "ddp", "zero1"]);
    }

    fn json<T: serde::Serialize>(v: &T) -> String {
        serde_json::to_string(v).unwrap()
    }

    /// A registered member is named like a built-in, and a taken name is refused.
    #[test]
    fn a_registered_member_is_found_by_name_and_names_are_unique() {
        static MINE: StrategyDescription = StrategyDescription {
            name: "test-only-strategy",
            doc: "a test's",
            distributed: true,
            shards_optimizer: false,
        };
        static TAKEN: StrategyDescription = StrategyDescription {
            name: "ddp",
            doc: "a second ddp",
            distributed: true,
            shards_optimizer: false,
        };
        STRATEGIES.register(&MINE).unwrap();
        assert_eq!(
            Strategy::named("test-only-strategy").map(|s| s.describe().doc),
            Some("a test's")
        );
        assert!(STRATEGIES.names().contains(&"test-only-strategy"));
        assert_eq!(
            STRATEGIES.register(&TAKEN).unwrap_err(),
            "`ddp` is already registered"
        );
        assert_eq!(
            Strategy::named("ddp").unwrap().describe().doc,
            STRATEGIES.all()[1].doc
        );
    }
}
