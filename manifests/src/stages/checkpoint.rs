//! `checkpoint`: its keys and its lowering.

use super::{FROM_DOC, NEEDS_DOC};
use crate::lower::path;
use crate::reader::{Fields, Reader};
use crate::schema::{key, section, Section, Ty, Val};
use crate::CheckpointSpec;

pub const SECTION: Section = section(
    "checkpoint",
    &["name"],
    &[
        key(
            "name",
            Ty::Text,
            Some(Val::Text("checkpoint")),
            "The stage's name (letters, digits, `-` and `_`).",
        ),
        key("needs", Ty::Texts, None, NEEDS_DOC),
        key(
            "path",
            Ty::Path,
            None,
            "Where to write the weights (default: `<name>.safetensors` in the run directory).",
        ),
        key("from", Ty::Text, Some(Val::Text("last")), FROM_DOC),
    ],
    "A stage that exports a trained model's weights as safetensors plus a JSON of metadata.",
);

impl Reader<'_> {
    pub(crate) fn checkpoint(&mut self, f: &Fields) -> CheckpointSpec {
        CheckpointSpec {
            path: path(f, "path"),
            from: self.weights_from(f),
        }
    }
}
