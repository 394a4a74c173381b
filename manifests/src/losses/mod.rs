//! `loss`: the training objective, a registry of members, one file each. A member here is
//! what can be known of a loss without libtorch — its name and documentation, what it
//! compares the outputs with ([`Target`]: which decides how labels are read, which
//! metrics measure it and what a prediction is), and its own keys — and
//! `backends::loss` holds each member's code. A program built on the library adds one
//! with `backends::loss::register_loss`, which registers both; `pipeline explain loss`
//! lists them all.

mod bce_with_logits;
mod cross_entropy;
mod huber;
mod l1;
mod mse;
mod nll;

pub use bce_with_logits::BCE_WITH_LOGITS;
pub use cross_entropy::CROSS_ENTROPY;
pub use huber::HUBER;
pub use l1::L1;
pub use mse::MSE;
pub use nll::NLL;

use crate::registry::{self, Chosen, Family, Member, Registry};
use crate::schema::{self, Children, Key, Section, Ty};

/// What a loss compares the model's outputs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// A class index per sample (labels read as integers); the outputs are a score per
    /// class, and accuracy and the class metrics measure it.
    Classes,
    /// Several 0/1 labels per sample (multi-label); the outputs are a logit per label.
    Labels,
    /// Values to approach (regression): `mse`, `mae`, `r2` measure it.
    Values,
}

impl Target {
    /// As `loss { target "…" }` writes it, in [`TARGETS`]' order.
    pub const ALL: [Target; 3] = [Target::Classes, Target::Labels, Target::Values];

    pub fn as_str(self) -> &'static str {
        match self {
            Target::Classes => "classes",
            Target::Labels => "labels",
            Target::Values => "values",
        }
    }

    pub fn parse(text: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// The names of the targets, for the schema.
pub const TARGETS: &[&str] = &["classes", "labels", "values"];

/// What a loss is, without libtorch.
#[derive(Debug)]
pub struct LossDescription {
    /// As a manifest writes it: `loss "huber"`.
    pub name: &'static str,
    pub doc: &'static str,
    pub target: Target,
    /// Its keys beside `kind` (`loss "huber" delta=2.0`). A key two members share is the
    /// same `static` ([`CLASS_WEIGHTS`]); a registered member's own keys are numbers
    /// (`Ty::Float`), in its `LossSpec::settings`.
    pub keys: &'static [&'static Key],
}

impl Member for LossDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn keys(&self) -> &'static [&'static Key] {
        self.keys
    }

    fn registry() -> &'static Registry<Self> {
        &LOSSES
    }
}

const BUILTINS: &[&LossDescription] = &[&CROSS_ENTROPY, &MSE, &BCE_WITH_LOGITS, &NLL, &L1, &HUBER];

/// Every loss a manifest may name.
pub static LOSSES: Registry<LossDescription> = Registry::new(|| BUILTINS.to_vec(), |m| m.name);

/// A registered loss, as a manifest names it (serialised as its name: a cache key).
pub type Loss = Chosen<LossDescription>;

impl Loss {
    pub fn target(self) -> Target {
        self.describe().target
    }

    /// Whether labels are class indices (and accuracy is reported).
    pub fn is_classification(self) -> bool {
        self.target() == Target::Classes
    }

    /// Whether targets are values to approach (regression: R², `mse`, `mae`, …).
    pub fn is_regression(self) -> bool {
        self.target() == Target::Values
    }

    /// Whether the member declares the key `name`.
    pub fn takes(self, name: &str) -> bool {
        self.describe().keys.iter().any(|k| k.name == name)
    }
}

/// The built-in members' keys that [`crate::LossSpec`] has a field for; any other key of
/// a member is a number in its `settings`.
pub(crate) const TYPED_KEYS: &[&str] = &["label-smoothing", "class-weights", "pos-weight", "delta"];

/// Adds a loss's description (`backends::loss::register_loss` calls it with the code).
/// Refused, with why, when its name is taken or a key cannot be one of its keys.
pub fn register(member: &'static LossDescription) -> Result<(), String> {
    registry::register_keyed("loss", member, &[])
}

/// The `loss` section of the schema: `kind`, then every member's keys, each applying to
/// the members that declare it. Built again when a member is registered.
pub fn section() -> &'static Section {
    static BUILT: registry::BuiltSection = registry::BuiltSection::new();
    let members = registry::keyed::<LossDescription>();
    BUILT.get(&members, |keys| Section {
        name: "loss",
        doc: "The training objective.",
        args: &["kind"],
        keys: keys(vec![
            schema::key(
                "kind",
                Ty::Member(Family::Loss),
                None,
                "The loss function, one of the losses below (each with what it compares); a program built on pipeline may register more (`docs/extending.md`). Required unless the loss is a `torchscript` module.",
            ),
            schema::key(
                "torchscript",
                Ty::Path,
                None,
                "A loss written in Python and scripted, instead of `kind`: `loss { torchscript \"focal.pt\" }`, written by `torch.jit.script(FocalLoss()).save(\"focal.pt\")`. Its `forward(self, output, target)` returns the batch's loss as a scalar tensor (the mean over the samples): `output` is the model's output, `target` the labels (class indices as int64 for `target \"classes\"`, else floats of the output's shape). libtorch runs it, not Python; the file's content is in the cache key.",
            ),
            schema::key(
                "target",
                Ty::Choice(TARGETS),
                Some(schema::Val::Text("classes")),
                "What a `torchscript` loss compares the outputs with, which decides how labels are read and which metrics apply: `classes` (a class index per sample, accuracy and the class metrics), `labels` (several 0/1 labels, multi-label metrics) or `values` (regression: `mse`, `mae`, `r2`). A registered loss says it itself.",
            ),
        ]),
        children: Children::Keys,
    })
}

/// `class-weights`, which both class-index losses take.
pub static CLASS_WEIGHTS: Key = schema::key(
    "class-weights",
    Ty::Weights,
    None,
    "A weight per class, multiplying each sample's loss by its class's (PyTorch's `weight`; the mean is over the weights): one number per class in index order, or `\"balanced\"`: samples / (classes × the class's samples) over the training split, as scikit-learn's `compute_class_weight`. Applies to training, validation and evaluation losses alike.",
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Val;

    /// The built-ins, in the order the enum they replaced listed them (`explain`, the
    /// schema's keys), each key applying to the members that declare it.
    #[test]
    fn the_builtins_section_holds_every_members_keys_for_the_members_that_take_them() {
        assert_eq!(
            LOSSES.builtins().iter().map(|l| l.name).collect::<Vec<_>>(),
            [
                "cross-entropy",
                "mse",
                "bce-with-logits",
                "nll",
                "l1",
                "huber"
            ]
        );
        // Other tests register members meanwhile: the built-ins' part is compared.
        let builtins = LOSSES.builtins();
        let keys: Vec<(&str, Vec<&str>)> = section()
            .keys
            .iter()
            .map(|k| {
                let only = k.only_for.iter().copied();
                (
                    k.name,
                    only.filter(|m| builtins.iter().any(|b| b.name == *m))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            keys[..7],
            [
                ("kind", vec![]),
                ("torchscript", vec![]),
                ("target", vec![]),
                ("label-smoothing", vec!["cross-entropy"]),
                ("class-weights", vec!["cross-entropy", "nll"]),
                ("pos-weight", vec!["bce-with-logits"]),
                ("delta", vec!["huber"]),
            ]
        );
    }

    static GAMMA: Key = schema::key(
        "gamma",
        schema::POSITIVE,
        Some(Val::Float(2.0)),
        "How much easy samples are discounted.",
    );
    static FOCAL: LossDescription = LossDescription {
        name: "focal-test",
        doc: "a registered loss",
        target: Target::Classes,
        keys: &[&GAMMA, &CLASS_WEIGHTS],
    };
    static TAKES_DELTA: LossDescription = LossDescription {
        name: "takes-delta",
        doc: "a key of another member's name",
        target: Target::Values,
        keys: &[&DELTA_AGAIN],
    };
    static DELTA_AGAIN: Key = schema::key("delta", schema::POSITIVE, None, "another delta");
    static TEXT_KEY: Key = schema::key("mode", Ty::Text, None, "a text");
    static TAKES_TEXT: LossDescription = LossDescription {
        name: "takes-text",
        doc: "a key that is not a number",
        target: Target::Values,
        keys: &[&TEXT_KEY],
    };

    /// (One test: registering changes what the first part reads.)
    #[test]
    fn a_registered_loss_brings_its_keys_and_a_key_of_another_meaning_is_refused() {
        the_builtins_section_holds_every_members_keys_for_the_members_that_take_them();
        register(&FOCAL).unwrap();
        let s = section();
        let gamma = s.key("gamma").expect("the member's key is in the section");
        assert_eq!(gamma.only_for, ["focal-test"]);
        assert_eq!(
            s.key("class-weights").unwrap().only_for,
            ["cross-entropy", "nll", "focal-test"]
        );
        assert!(Loss::named("focal-test").unwrap().is_classification());
        assert_eq!(
            register(&FOCAL).unwrap_err(),
            "`focal-test` is already registered"
        );
        assert_eq!(
            register(&TAKES_DELTA).unwrap_err(),
            "`takes-delta`'s key `delta` is already `huber`'s, with another meaning: name it differently (or take that member's key itself)"
        );
        assert_eq!(
            register(&TAKES_TEXT).unwrap_err(),
            "`takes-text`'s key `mode`: a registered loss's own keys are optional numbers (`Ty::Float`), not named `kind`"
        );
        assert!(Loss::named("takes-delta").is_none() && Loss::named("takes-text").is_none());
    }
}
