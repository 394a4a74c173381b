//! `format "safetensors"`: Hugging Face's file of named tensors.

use super::{FormatDescription, FormatKind};

pub static SAFETENSORS: FormatDescription = FormatDescription {
    name: "safetensors",
    title: "safetensors",
    doc: "arrays in one `.safetensors` file: the features `x` and the labels `y`, or the arrays `features` and `labels` name",
    extensions: &[".safetensors"],
    kind: FormatKind::Arrays,
};
