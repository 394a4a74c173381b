//! `format "npz"`: NumPy's archive of named arrays.

use super::{FormatDescription, FormatKind};

pub static NPZ: FormatDescription = FormatDescription {
    name: "npz",
    title: "NPZ",
    doc: "NumPy arrays in one `.npz`: the features `x` and the labels `y`, or the arrays `features` and `labels` name",
    extensions: &[".npz"],
    kind: FormatKind::Arrays,
};
