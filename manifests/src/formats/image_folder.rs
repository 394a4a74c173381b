//! `format "image-folder"`: torchvision's `ImageFolder`, a sub-directory of images per
//! class. `format "auto"` takes a source without an extension as one.

use super::{FormatDescription, FormatKind};

pub static IMAGE_FOLDER: FormatDescription = FormatDescription {
    name: "image-folder",
    title: "image-folder",
    doc: "a directory with one sub-directory of images per class (torchvision's `ImageFolder`)",
    extensions: &[],
    kind: FormatKind::Images { listed: false },
};
