//! Callbacks a program built on pipeline registers (`backends::callbacks::
//! register_callback`), which a `train` stage turns on by name: `callbacks "epochs-csv"`.
//! What can be known of one without libtorch is its name and documentation, for `check`
//! and `explain train.callbacks`. pipeline's own callbacks (early stopping, keep-best,
//! snapshots, …) are turned on by their own keys, not listed here.

use crate::registry::{Member, Registry};

/// What a registered callback is, without libtorch.
#[derive(Debug)]
pub struct CallbackDescription {
    /// As `train { callbacks "…" }` names it; also the name its state is saved under in a
    /// snapshot.
    pub name: &'static str,
    pub doc: &'static str,
}

impl Member for CallbackDescription {
    fn name(&self) -> &'static str {
        self.name
    }

    fn registry() -> &'static Registry<Self> {
        &CALLBACKS
    }
}

/// Every callback a stage may turn on by name: none but those registered.
pub static CALLBACKS: Registry<CallbackDescription> = Registry::new(Vec::new, |c| c.name);

/// Adds a callback's description (`backends::callbacks::register_callback` calls it with
/// the code). Refused when its name is taken or cannot be written.
pub fn register(member: &'static CallbackDescription) -> Result<(), String> {
    CALLBACKS.register(member)
}
