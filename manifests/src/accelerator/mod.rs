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

use std::sync::RwLock;

/// What a registry holds: a description with a unique name.
pub trait Member: Sync + 'static {
    fn name(&self) -> &'static str;

    /// The registry of its family.
    fn registry() -> &'static Registry<Self>
    where
        Self: Sized;
}

/// A registered member, as a manifest names it (`Precision`, `Strategy`,
/// `Accelerator`): compared by name, and serialised as its name (a cache key).
pub struct Chosen<T: Member>(&'static T);

impl<T: Member> Chosen<T> {
    /// The registered member named `name`.
    pub fn named(name: &str) -> Option<Self> {
        T::registry().get(name).map(Chosen)
    }

    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// What the member says of itself.
    pub fn describe(self) -> &'static T {
        self.0
    }
}

impl<T: Member> Clone for Chosen<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Member> Copy for Chosen<T> {}

impl<T: Member> PartialEq for Chosen<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<T: Member> Eq for Chosen<T> {}

impl<T: Member> std::fmt::Debug for Chosen<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.name())
    }
}

impl<T: Member> serde::Serialize for Chosen<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name())
    }
}

/// One family's members: the built-ins, then those registered at run time, in order.
/// The descriptions here are one; `backends::accelerator` keeps the members' code in
/// registries of trait objects (`Registry<dyn Strategy>`), filled by the same calls.
pub struct Registry<T: ?Sized + 'static> {
    builtins: fn() -> Vec<&'static T>,
    registered: RwLock<Vec<&'static T>>,
    name: fn(&T) -> &'static str,
}

impl<T: ?Sized + 'static> Registry<T> {
    /// A registry of `builtins`, each named by `name`.
    pub const fn new(builtins: fn() -> Vec<&'static T>, name: fn(&T) -> &'static str) -> Self {
        Registry {
            builtins,
            registered: RwLock::new(Vec::new()),
            name,
        }
    }

    /// Adds `member`; refused (with why) when its name is taken or cannot be written.
    pub fn register(&self, member: &'static T) -> Result<(), String> {
        let name = (self.name)(member);
        if self.get(name).is_some() {
            return Err(format!("`{name}` is already registered"));
        }
        // `:` separates a device's number (`cuda:1`); `"` ends a KDL string.
        if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == ':' || c == '"') {
            return Err(format!("`{name}` is not a name a manifest can write"));
        }
        self.registered
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(member);
        Ok(())
    }

    /// Every member, built-ins first.
    pub fn all(&self) -> Vec<&'static T> {
        let registered = self.registered.read().unwrap_or_else(|e| e.into_inner());
        let mut all = (self.builtins)();
        all.extend(registered.iter().copied());
        all
    }

    /// The members pipeline itself registers.
    pub fn builtins(&self) -> Vec<&'static T> {
        (self.builtins)()
    }

    pub fn get(&self, name: &str) -> Option<&'static T> {
        self.all().into_iter().find(|m| (self.name)(m) == name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.all().into_iter().map(self.name).collect()
    }
}

/// A family a key's value names a member of (`Ty::Member`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Precision,
    Strategy,
}

impl Family {
    /// The names a manifest may write, in registration order.
    pub fn names(self) -> Vec<&'static str> {
        self.members().into_iter().map(|(name, _)| name).collect()
    }

    /// Each member's name and documentation, in registration order.
    pub fn members(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Family::Precision => PRECISIONS.all().iter().map(|p| (p.name, p.doc)).collect(),
            Family::Strategy => STRATEGIES.all().iter().map(|s| (s.name, s.doc)).collect(),
        }
    }
}

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
