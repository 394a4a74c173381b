//! `optimizer`: how the weights are updated, a registry of members, one file each. A
//! member here is what can be known of an optimizer without libtorch — its name, its
//! documentation and its keys beside `lr` and `weight-decay`, which every optimizer takes
//! — and `backends::optimizer` holds each member's code. A program built on the library
//! adds one with `backends::optimizer::register_optimizer`, which registers both;
//! `pipeline explain optimizer` lists them all.
//!
//! `group` nodes inside `optimizer` ([`GROUP`]) give some parameters settings of their
//! own (PyTorch's parameter groups): no weight decay on biases and norms, a smaller rate
//! for pretrained layers.

mod adam;
mod adamw;
mod rmsprop;
mod sgd;

pub use adam::ADAM;
pub use adamw::ADAMW;
pub use rmsprop::RMSPROP;
pub use sgd::SGD;

use crate::registry::{self, Chosen, Family, Member, Registry};
use crate::schema::{
    self, Children, Key, Section, Ty, Val, FRACTION, NON_NEGATIVE, POSITIVE, PROBABILITY_BELOW_ONE,
};

/// What an optimizer is, without libtorch.
#[derive(Debug)]
pub struct OptimizerDescription {
    /// As a manifest writes it: `optimizer "adamw"`.
    pub name: &'static str,
    pub doc: &'static str,
    /// Its keys beside `kind`, `lr` and `weight-decay`. A key two members share is the
    /// same `static` ([`MOMENTUM`], [`BETA1`], …); a registered member's own keys are
    /// numbers (`Ty::Float`), in its `OptimizerSpec::settings`.
    pub keys: &'static [&'static Key],
}

impl Member for OptimizerDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn keys(&self) -> &'static [&'static Key] {
        self.keys
    }

    fn registry() -> &'static Registry<Self> {
        &OPTIMIZERS
    }
}

const BUILTINS: &[&OptimizerDescription] = &[&SGD, &ADAM, &ADAMW, &RMSPROP];

/// Every optimizer a manifest may name.
pub static OPTIMIZERS: Registry<OptimizerDescription> =
    Registry::new(|| BUILTINS.to_vec(), |m| m.name);

/// A registered optimizer, as a manifest names it (serialised as its name: a cache key).
pub type Optimizer = Chosen<OptimizerDescription>;

impl Optimizer {
    /// Whether the member takes the key `name` (`lr` and `weight-decay`: every one).
    pub fn takes(self, name: &str) -> bool {
        COMMON.iter().any(|k| k.name == name) || self.describe().keys.iter().any(|k| k.name == name)
    }
}

/// The keys of the built-ins that [`crate::OptimizerSpec`] has a field for; any other
/// key of a member is a number in its `settings`.
pub(crate) const TYPED_KEYS: &[&str] = &[
    "momentum", "nesterov", "beta1", "beta2", "eps", "alpha", "centered",
];

/// Adds an optimizer's description (`backends::optimizer::register_optimizer` calls it
/// with the code). Refused, with why, when its name is taken or a key cannot be one of
/// its keys.
pub fn register(member: &'static OptimizerDescription) -> Result<(), String> {
    registry::register_keyed("optimizer", member, COMMON_KEYS)
}

/// The `optimizer` section of the schema: `kind`, `lr`, `weight-decay`, then every
/// member's keys, each applying to the members that declare it; `group` nodes inside.
/// Built again when a member is registered.
pub fn section() -> &'static Section {
    static BUILT: registry::BuiltSection = registry::BuiltSection::new();
    let members = registry::keyed::<OptimizerDescription>();
    BUILT.get(&members, |keys| Section {
        name: "optimizer",
        doc: "How the weights are updated. `group` nodes inside give some parameters settings of their own: `optimizer \"adamw\" weight-decay=0.01 { group \"*.bias\" \"*norm*\" weight-decay=0; }`.",
        args: &["kind"],
        keys: keys(vec![
            schema::required(
                "kind",
                Ty::Member(Family::Optimizer),
                "The optimization algorithm, one of those below; a program built on pipeline may register more (`docs/extending.md`).",
            ),
            LR,
            WEIGHT_DECAY,
        ]),
        children: Children::Repeated(GROUPS),
    })
}

/// The nodes an `optimizer` repeats: its `group`s.
static GROUPS: &[&Section] = &[&GROUP];

static COMMON: [Key; 2] = [LR, WEIGHT_DECAY];
static COMMON_KEYS: &[&Key] = &[&COMMON[0], &COMMON[1]];

const LR: Key = schema::key(
    "lr",
    POSITIVE,
    Some(Val::Float(1e-3)),
    "The peak learning rate (the schedule scales it).",
);

const WEIGHT_DECAY: Key = schema::key(
    "weight-decay",
    NON_NEGATIVE,
    Some(Val::Float(0.0)),
    "Weight decay: L2 (added to the gradient) or decoupled (`adamw`), as the optimizer says.",
);

/// `momentum`, which `sgd` and `rmsprop` take.
pub static MOMENTUM: Key = schema::key(
    "momentum",
    FRACTION,
    Some(Val::Float(0.0)),
    "Momentum factor.",
);

/// `beta1`, which Adam's kind take.
pub static BETA1: Key = schema::key(
    "beta1",
    PROBABILITY_BELOW_ONE,
    Some(Val::Float(0.9)),
    "Decay rate of the first-moment estimate (PyTorch's `betas[0]`).",
);

/// `beta2`, which Adam's kind take.
pub static BETA2: Key = schema::key(
    "beta2",
    PROBABILITY_BELOW_ONE,
    Some(Val::Float(0.999)),
    "Decay rate of the second-moment estimate (PyTorch's `betas[1]`).",
);

/// `eps`, the term added to a denominator.
pub static EPS: Key = schema::key(
    "eps",
    POSITIVE,
    Some(Val::Float(1e-8)),
    "Term added to the denominator for stability.",
);

/// The keys a `group` may set for its parameters (those its optimizer takes).
pub const GROUP_KEYS: &[&str] = &["lr", "weight-decay", "momentum", "beta1", "beta2", "eps"];

/// A `group` node inside `optimizer`: parameters by name, and settings of their own.
pub static GROUP: Section = Section {
    name: "group",
    doc: "Parameters with settings of their own (PyTorch's parameter groups): `group \"*.bias\" \"*norm*\" weight-decay=0`. The patterns are globs over the parameters' names, those of the exported checkpoint and of `train.freeze` (`0.weight`, `2.body.1.bias`); a parameter takes the first group one of whose patterns matches it, and the optimizer's own settings when none does. A key left out is the optimizer's. A pattern that matches no trainable parameter fails the run, with the model's names.",
    args: &["params"],
    keys: &[
        schema::required(
            "params",
            Ty::Texts,
            "Glob patterns over parameter names (`*` matches any characters, dots included; `?` one character; `[…]` one of a set).",
        ),
        schema::key(
            "lr",
            NON_NEGATIVE,
            None,
            "The group's peak learning rate (the schedule scales it as it scales the optimizer's); 0 holds its weights where they are.",
        ),
        schema::key("weight-decay", NON_NEGATIVE, None, "The group's weight decay: 0 for biases and norms, as transformer recipes do."),
        schema::key("momentum", FRACTION, None, "The group's momentum factor."),
        schema::key("beta1", PROBABILITY_BELOW_ONE, None, "The group's first-moment decay rate."),
        schema::key("beta2", PROBABILITY_BELOW_ONE, None, "The group's second-moment decay rate."),
        schema::key("eps", POSITIVE, None, "The group's denominator term."),
    ],
    children: Children::Keys,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-ins, in the order the enum they replaced listed them, and the section's
    /// keys in the order the constant section had them, each for the members that take it.
    #[test]
    fn the_builtins_section_holds_every_members_keys_for_the_members_that_take_them() {
        assert_eq!(OPTIMIZERS.names(), ["sgd", "adam", "adamw", "rmsprop"]);
        let keys: Vec<(&str, &[&str])> = section()
            .keys
            .iter()
            .map(|k| (k.name, k.only_for))
            .collect();
        assert_eq!(
            keys,
            [
                ("kind", &[][..]),
                ("lr", &[][..]),
                ("weight-decay", &[][..]),
                ("momentum", &["sgd", "rmsprop"][..]),
                ("nesterov", &["sgd"][..]),
                ("beta1", &["adam", "adamw"][..]),
                ("beta2", &["adam", "adamw"][..]),
                ("eps", &["adam", "adamw", "rmsprop"][..]),
                ("alpha", &["rmsprop"][..]),
                ("centered", &["rmsprop"][..]),
            ]
        );
        for key in GROUP_KEYS {
            assert!(GROUP.key(key).is_some(), "{key}");
        }
    }

    static OWN: Key = schema::key("lr", POSITIVE, None, "another lr");
    static TAKES_LR: OptimizerDescription = OptimizerDescription {
        name: "takes-lr",
        doc: "a key every optimizer has, with another meaning",
        keys: &[&OWN],
    };
    static BRANDED: Key = schema::key("lookahead", Ty::Bool, None, "not a number");
    static TAKES_BOOL: OptimizerDescription = OptimizerDescription {
        name: "takes-bool",
        doc: "a key that is not a number",
        keys: &[&BRANDED],
    };

    #[test]
    fn a_registered_optimizer_cannot_take_a_common_key_anew_nor_a_key_that_is_not_a_number() {
        assert!(register(&TAKES_LR).unwrap_err().contains("already"));
        assert!(register(&TAKES_BOOL)
            .unwrap_err()
            .contains("optional numbers"));
        assert!(register(&ADAM).unwrap_err().contains("already registered"));
    }
}
