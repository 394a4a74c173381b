//! The registries of the manifest's open sets: a family's members are descriptions (what
//! can be known of a member without libtorch: its name, its documentation, the facts
//! `check` asks of it), the built-ins first and then those a program built on the library
//! registers (`backends::accelerator::register_strategy`, `backends::loss::register_loss`,
//! which register a member's code and its description together). A manifest names a
//! member by string; [`Chosen`] is the member it named, serialised as that name.

use crate::accelerator::{PRECISIONS, STRATEGIES};
use crate::callbacks::CALLBACKS;
use crate::losses::LOSSES;
use crate::optimizers::OPTIMIZERS;
use crate::schedules::SCHEDULES;
use crate::schema::{Key, Section, Ty};
use std::sync::RwLock;

/// What a registry holds: a description with a unique name.
pub trait Member: Sync + 'static {
    fn name(&self) -> &'static str;

    /// Its keys in its family's section (a loss's, an optimizer's, a schedule's): they
    /// join the section, for the members that declare them.
    fn keys(&self) -> &'static [&'static Key] {
        &[]
    }

    /// The registry of its family.
    fn registry() -> &'static Registry<Self>
    where
        Self: Sized;
}

/// A registered member, as a manifest names it (`Precision`, `Strategy`,
/// `Accelerator`): compared by name, and serialised as its name (a cache key).
pub struct Chosen<T: Member>(pub(crate) &'static T);

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
    Loss,
    Optimizer,
    Schedule,
    Callback,
    /// `data.format`: `auto`, the built-in formats, then the registered ones.
    DataFormat,
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
            Family::Loss => LOSSES.all().iter().map(|l| (l.name, l.doc)).collect(),
            Family::Optimizer => OPTIMIZERS.all().iter().map(|o| (o.name, o.doc)).collect(),
            Family::Schedule => SCHEDULES.all().iter().map(|s| (s.name, s.doc)).collect(),
            Family::Callback => CALLBACKS.all().iter().map(|c| (c.name, c.doc)).collect(),
            Family::DataFormat => {
                let auto = (
                    crate::schema::AUTO_FORMAT,
                    "the format the source's name says (`.csv`, `.npy`, …); a name without an extension is an image folder",
                );
                let formats = crate::formats::FORMATS.all().into_iter();
                std::iter::once(auto)
                    .chain(formats.map(|f| (f.name, f.doc)))
                    .collect()
            }
        }
    }
}

/// Whether a member's `keys` may be its keys beside those of `others` (each member's name
/// and keys): a key another member declares is that member's `static` itself (the same
/// meaning), and a key of its own is an optional number not named `kind` (its value goes
/// to the spec's `settings`). Refused with why.
fn own_keys_are_numbers(
    family: &str,
    member: &str,
    keys: &[&'static Key],
    others: &[(&str, &[&'static Key])],
) -> Result<(), String> {
    let known = |key: &Key| {
        others
            .iter()
            .flat_map(|(_, keys)| keys.iter())
            .any(|k| std::ptr::eq(*k, key))
    };
    for key in keys.iter().filter(|k| !known(k)) {
        if let Some((owner, _)) = others
            .iter()
            .find(|(_, keys)| keys.iter().any(|k| k.name == key.name))
        {
            return Err(format!(
                "`{member}`'s key `{}` is already `{owner}`'s, with another meaning: name it differently (or take that member's key itself)",
                key.name
            ));
        }
        if key.name == "kind" || !matches!(key.ty, Ty::Float { .. }) || key.required {
            return Err(format!(
                "`{member}`'s key `{}`: a registered {family}'s own keys are optional numbers (`Ty::Float`), not named `kind`",
                key.name
            ));
        }
    }
    Ok(())
}

/// Adds `member` to its family (whose every member takes the keys `common` besides its
/// own): refused, with why, when its name is taken or one of its keys cannot be its own
/// ([`own_keys_are_numbers`]).
pub(crate) fn register_keyed<T: Member>(
    family: &str,
    member: &'static T,
    common: &'static [&'static Key],
) -> Result<(), String> {
    let every = format!("every {family}");
    let others: Vec<(&str, &[&'static Key])> = keyed::<T>()
        .into_iter()
        .chain([(every.as_str(), common)])
        .collect();
    own_keys_are_numbers(family, member.name(), member.keys(), &others)?;
    T::registry().register(member)
}

/// Each member of a family, its name and its keys: what [`BuiltSection::get`] builds from.
pub(crate) fn keyed<T: Member>() -> Vec<(&'static str, &'static [&'static Key])> {
    T::registry()
        .all()
        .iter()
        .map(|m| (m.name(), m.keys()))
        .collect()
}

/// The section of a family whose keys are its members' (`loss`, `optimizer`), built
/// again when a member is registered, and leaked once per registration (a program
/// registers a handful of members).
pub(crate) struct BuiltSection(RwLock<Option<(usize, &'static Section)>>);

impl BuiltSection {
    pub(crate) const fn new() -> Self {
        BuiltSection(RwLock::new(None))
    }

    /// The section `make` builds from the keys `keys` gives it, a `head` followed by
    /// every member's keys (each once, applying to the members that declare it), for
    /// `members` (each one's name and keys).
    pub(crate) fn get(
        &self,
        members: &[(&'static str, &'static [&'static Key])],
        make: impl FnOnce(&dyn Fn(Vec<Key>) -> &'static [Key]) -> Section,
    ) -> &'static Section {
        if let Some((count, section)) = *self.0.read().unwrap_or_else(|e| e.into_inner()) {
            if count == members.len() {
                return section;
            }
        }
        let with_members = |mut keys: Vec<Key>| -> &'static [Key] {
            for (_, own) in members {
                for key in own.iter() {
                    if keys.iter().any(|k| k.name == key.name) {
                        continue;
                    }
                    let only_for: Vec<&'static str> = members
                        .iter()
                        .filter(|(_, keys)| keys.iter().any(|k| k.name == key.name))
                        .map(|(name, _)| *name)
                        .collect();
                    keys.push(crate::schema::only(**key, Vec::leak(only_for)));
                }
            }
            Vec::leak(keys)
        };
        let section: &'static Section = Box::leak(Box::new(make(&with_members)));
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some((members.len(), section));
        section
    }
}
