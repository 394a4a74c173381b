//! `format "npy"`: one NumPy array of the features, or shards of it (`x-*.npy`).

use super::{FormatDescription, FormatKind};

pub static NPY: FormatDescription = FormatDescription {
    name: "npy",
    title: "NPY",
    doc: "a NumPy array (`.npy`, or shards `x-*.npy`) of the features; the labels in a labels file",
    extensions: &[".npy"],
    kind: FormatKind::Array,
};
