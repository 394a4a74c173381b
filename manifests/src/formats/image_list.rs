//! `format "image-list"`: a CSV naming images (a path column) and their labels.

use super::{FormatDescription, FormatKind};

pub static IMAGE_LIST: FormatDescription = FormatDescription {
    name: "image-list",
    title: "image-list",
    doc: "a CSV listing images (a path column) and their labels",
    extensions: &[],
    kind: FormatKind::Images { listed: true },
};
