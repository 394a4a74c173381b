//! `schedule`: how the learning rate changes during training, a registry of members, one
//! file each. A member is its name, its documentation, its keys and its curve — the
//! learning rate at every point of the training, as PyTorch's scheduler of that name
//! computes it — all of it plain arithmetic, known without libtorch. A program built on
//! the library adds one with `pipeline_core::schedule::register_schedule`;
//! `pipeline explain schedule` lists them all. `tests/e2e/schedules.rs` compares every
//! built-in with PyTorch's own scheduler.
//!
//! A linear warm-up from 0 to the peak over `warmup-epochs` comes first
//! (`pipeline_core::schedule::LrSchedule`); the curve then spans the rest of the
//! training, or its own length.

mod constant;
mod cosine;
mod exponential;
mod linear;
mod one_cycle;
mod polynomial;
mod reduce_on_plateau;
mod step;

pub use constant::CONSTANT;
pub use cosine::COSINE;
pub use exponential::EXPONENTIAL;
pub use linear::LINEAR;
pub use one_cycle::ONE_CYCLE;
pub use polynomial::POLYNOMIAL;
pub(crate) use reduce_on_plateau::MONITOR;
pub use reduce_on_plateau::REDUCE_ON_PLATEAU;
pub use step::STEP;

use crate::registry::{self, Chosen, Family, Member, Registry};
use crate::schema::{self, int, Bound, Children, Key, Section, Ty, Val, MAX_EPOCHS, NON_NEGATIVE};
use crate::Interval;
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::BTreeMap;

/// What a schedule is: everything about it, its curve included (plain arithmetic).
#[derive(Debug)]
pub struct ScheduleDescription {
    /// As a manifest writes it: `schedule "cosine"`.
    pub name: &'static str,
    pub doc: &'static str,
    /// Its keys beside `kind`, `warmup-epochs`, `interval` and `torchscript`. A key two
    /// members share is the same `static` ([`GAMMA`], [`MIN_LR`]); a registered member's
    /// own keys are numbers (`Ty::Float`).
    pub keys: &'static [&'static Key],
    /// What its curve counts when `interval` is not written: optimizer steps or epochs.
    pub counts: Interval,
    /// How long its curve is, which says whether a longer training can continue a
    /// cached shorter one (`pipeline_core::extend`).
    pub length: Length,
    /// The key that sets a warm-up of its own (`one-cycle`'s `pct-start`): then
    /// `warmup-epochs` would warm up twice, and is refused.
    pub own_warmup: Option<&'static str>,
    /// The learning rate at a point of the curve (after the warm-up).
    pub lr: fn(&Point) -> f64,
}

/// How long a schedule's curve is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// It has no length: the rate of an epoch does not depend on how many follow
    /// (`constant`, `step`, `exponential`).
    Unbounded,
    /// It spans the training after the warm-up, so the first epochs' rates change with
    /// the number of epochs (`linear`, `polynomial`, `one-cycle`).
    Training,
    /// Its length in epochs is the key named when written (`cosine`'s `length-epochs`);
    /// absent, the training's.
    Key(&'static str),
}

/// A point of a schedule's curve, and the schedule's settings. A *unit* is what the
/// curve counts: an optimizer step or an epoch (`interval`).
#[derive(Debug, Clone, Copy)]
pub struct Point<'a> {
    /// The peak learning rate (`optimizer.lr`).
    pub peak: f64,
    /// Units since the training's start, the warm-up included.
    pub t: u64,
    /// Units since the warm-up ended.
    pub into: u64,
    /// The curve's length in units (at least 1): the training after the warm-up, or
    /// the schedule's own ([`Length::Key`]).
    pub span: u64,
    pub settings: &'a Settings,
}

impl Point<'_> {
    /// The fraction of the curve done, from 0 to 1 (1 past its end).
    pub fn done(&self) -> f64 {
        self.into.min(self.span) as f64 / self.span as f64
    }

    /// The value of the schedule's key `name` (its default when not written). Every key
    /// a member declares with a default has a value.
    ///
    /// # Panics
    /// When `name` is not one of the member's keys, or has no default and was not
    /// written: a mistake in the member's curve, which its first test shows.
    pub fn get(&self, name: &str) -> f64 {
        self.settings.get(name).unwrap_or_else(|| {
            panic!("the schedule's curve reads `{name}`, which it does not declare with a default")
        })
    }
}

/// The numbers a schedule was given, each by its key's name, defaults applied (a key
/// with no default and not written is absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings(BTreeMap<&'static str, Number>);

/// A setting: an integer (`step-size`) or a real number (`gamma`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
}

impl Settings {
    pub fn insert(&mut self, key: &'static str, value: Number) {
        self.0.insert(key, value);
    }

    /// The value of `key`, if it has one.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).map(|n| match *n {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        })
    }

    /// Each key (as a cache key writes it: `step_size`) and its value.
    fn serialize_into<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        for (key, value) in &self.0 {
            let key = key.replace('-', "_");
            match *value {
                Number::Int(i) => map.serialize_entry(&key, &i)?,
                Number::Float(f) => map.serialize_entry(&key, &f)?,
            }
        }
        Ok(())
    }
}

impl Member for ScheduleDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn keys(&self) -> &'static [&'static Key] {
        self.keys
    }

    fn registry() -> &'static Registry<Self> {
        &SCHEDULES
    }
}

const BUILTINS: &[&ScheduleDescription] = &[
    &CONSTANT,
    &STEP,
    &COSINE,
    &ONE_CYCLE,
    &LINEAR,
    &EXPONENTIAL,
    &POLYNOMIAL,
    &REDUCE_ON_PLATEAU,
];

/// Every schedule a manifest may name.
pub static SCHEDULES: Registry<ScheduleDescription> =
    Registry::new(|| BUILTINS.to_vec(), |m| m.name);

/// A registered schedule, as a manifest names it (serialised as its name).
pub type Schedule = Chosen<ScheduleDescription>;

/// A schedule and what it was given: the `kind` of a [`crate::ScheduleSpec`].
/// Serialised as `{"kind": "step", "gamma": 0.5, "step_size": 2}`, a cache key's form.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleKind {
    pub member: Schedule,
    pub settings: Settings,
    /// `reduce-on-plateau`'s: the value whose plateaus reduce the rate, and whether
    /// lower or higher is better (absent: the metric's own direction).
    pub plateau: Option<crate::PlateauWatch>,
}

impl ScheduleKind {
    /// The member's name.
    pub fn name(&self) -> &'static str {
        self.member.as_str()
    }

    /// The settings of `reduce-on-plateau` (`None` for any other schedule).
    pub fn plateau(&self) -> Option<crate::PlateauSpec> {
        let watch = self.plateau.as_ref()?;
        let get = |key: &str| self.settings.get(key).unwrap_or_default();
        Some(crate::PlateauSpec {
            monitor: watch.monitor.clone(),
            mode: watch.mode,
            factor: get("factor"),
            patience: get("patience") as u64,
            threshold: get("threshold"),
            cooldown: get("cooldown") as u64,
            min_lr: get("min-lr"),
        })
    }
}

impl Serialize for ScheduleKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("kind", self.name())?;
        self.settings.serialize_into(&mut map)?;
        if let Some(watch) = &self.plateau {
            map.serialize_entry("monitor", &watch.monitor)?;
            if let Some(mode) = watch.mode {
                map.serialize_entry("mode", &mode)?;
            }
        }
        map.end()
    }
}

/// Adds a schedule (`pipeline_core::schedule::register_schedule` calls it). Refused, with
/// why, when its name is taken or a key cannot be one of its keys.
pub fn register(member: &'static ScheduleDescription) -> Result<(), String> {
    registry::register_keyed("schedule", member, COMMON_KEYS)
}

/// The `schedule` section of the schema: `kind`, `warmup-epochs`, `torchscript`,
/// `interval`, then every member's keys, each applying to the members that declare it.
/// Built again when a member is registered.
pub fn section() -> &'static Section {
    static BUILT: registry::BuiltSection = registry::BuiltSection::new();
    let members = registry::keyed::<ScheduleDescription>();
    BUILT.get(&members, |keys| Section {
        name: "schedule",
        doc: "How the learning rate changes during training. The state of `reduce-on-plateau` (the best value, the validations waited, the learning rate) is in every snapshot.",
        args: &["kind"],
        keys: keys(vec![
            schema::key(
                "kind",
                Ty::Member(Family::Schedule),
                Some(Val::Text(CONSTANT.name)),
                "The shape of the learning-rate curve after warm-up, one of those below, each as PyTorch's scheduler of that name; a program built on pipeline may register more (`docs/extending.md`).",
            ),
            COMMON[0],
            COMMON[1],
            COMMON[2],
        ]),
        children: Children::Keys,
    })
}

static COMMON: [Key; 3] = [
    schema::key(
        "warmup-epochs",
        int(0, MAX_EPOCHS),
        Some(Val::Int(0)),
        "Epochs of linear warm-up from 0 to the peak learning rate, before the curve (which then spans the remaining training).",
    ),
    schema::key(
        "torchscript",
        Ty::Path,
        None,
        "A schedule written in Python and scripted, instead of `kind`: `schedule { torchscript \"lr.pt\" }`, written by `torch.jit.script(Schedule()).save(\"lr.pt\")`. Its `forward(self, step: int, epoch: int) -> float` gives the factor on the peak learning rate (`optimizer.lr`, and every group's) for the optimizer step `step` (counted from 0 over the whole training) in the epoch `epoch` (from 0): the whole curve, warm-up included. libtorch runs it, not Python; the file's content is in the cache key.",
    ),
    schema::key(
        "interval",
        Ty::Choice(Interval::NAMES),
        None,
        "What the curve counts, as a PyTorch scheduler stepped after every optimizer step or every epoch: `step` or `epoch`; absent, the schedule's own (`epoch` for `step`, `step` for the others).",
    ),
];
static COMMON_KEYS: &[&Key] = &[&COMMON[0], &COMMON[1], &COMMON[2]];

/// `gamma`, which `step` and `exponential` take.
pub static GAMMA: Key = schema::key(
    "gamma",
    Ty::Float {
        min: Bound::Exclusive(0.0),
        max: Bound::Inclusive(1.0),
    },
    Some(Val::Float(0.1)),
    "Factor applied to the learning rate at each decay (`step`), or every interval (`exponential`).",
);

/// `min-lr`, which `cosine` and `reduce-on-plateau` take.
pub static MIN_LR: Key = schema::key(
    "min-lr",
    NON_NEGATIVE,
    Some(Val::Float(0.0)),
    "The learning rate at the end of the cosine curve; the lowest `reduce-on-plateau` goes.",
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-ins in the order the enum they replaced listed them, and the section's
    /// keys in the order the constant section had them, each for the members that take it.
    #[test]
    fn the_builtins_section_holds_every_members_keys_for_the_members_that_take_them() {
        assert_eq!(
            SCHEDULES
                .builtins()
                .iter()
                .map(|m| m.name)
                .collect::<Vec<_>>(),
            [
                "constant",
                "step",
                "cosine",
                "one-cycle",
                "linear",
                "exponential",
                "polynomial",
                "reduce-on-plateau"
            ]
        );
        let keys: Vec<(&str, &[&str])> = section()
            .keys
            .iter()
            .map(|k| (k.name, k.only_for))
            .collect();
        assert_eq!(
            keys[..4],
            [
                ("kind", &[][..]),
                ("warmup-epochs", &[][..]),
                ("torchscript", &[][..]),
                ("interval", &[][..]),
            ]
        );
        assert!(keys.contains(&("gamma", &["step", "exponential"][..])));
        assert!(keys.contains(&("min-lr", &["cosine", "reduce-on-plateau"][..])));
        assert!(keys.contains(&("monitor", &["reduce-on-plateau"][..])));
    }

    static OWN: Key = schema::key("warmup-epochs", NON_NEGATIVE, None, "another warm-up");
    static TAKES_WARMUP: ScheduleDescription = ScheduleDescription {
        name: "takes-warmup",
        doc: "a key every schedule has, with another meaning",
        keys: &[&OWN],
        counts: Interval::Step,
        length: Length::Unbounded,
        own_warmup: None,
        lr: |p| p.peak,
    };

    #[test]
    fn a_registered_schedule_cannot_take_a_common_key_anew_nor_a_taken_name() {
        assert!(register(&TAKES_WARMUP).unwrap_err().contains("already"));
        assert!(register(&COSINE)
            .unwrap_err()
            .contains("already registered"));
    }

    #[test]
    fn settings_serialise_as_the_cache_keys_of_the_enum_they_replaced() {
        let mut settings = Settings::default();
        settings.insert("step-size", Number::Int(10));
        settings.insert("gamma", Number::Float(0.3));
        let kind = ScheduleKind {
            member: Schedule::named("step").unwrap(),
            settings,
            plateau: None,
        };
        assert_eq!(
            serde_json::to_string(&kind).unwrap(),
            r#"{"kind":"step","gamma":0.3,"step_size":10}"#
        );
    }
}
