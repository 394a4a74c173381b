//! The `data.images` block → [`ImageSpec`]: the channels images are read as, and each
//! transform written inside, read by its own schema from the registry in `transforms/`.

use crate::diagnostic::Diagnostic;
use crate::manifest::{DataFormat, ImageSpec, TransformSpec};
use crate::reader::{Fields, Reader};
use crate::schema::IMAGES;
use crate::suggest;
use crate::transforms::{self, Transform, TRANSFORMS};
use kdl::KdlNode;

impl<'a> Reader<'a> {
    /// `data.images` of the `data` node (`f`, its fields); `None` for data that is not
    /// images (an `images` block there is reported by `keys_for_format`).
    pub(crate) fn images(
        &mut self,
        data: Option<&KdlNode>,
        f: &Fields,
        format: DataFormat,
    ) -> Option<ImageSpec> {
        if !format.is_images() {
            return None;
        }
        let fields = f.section_fields("images");
        let channels = fields.map_or(3, |i| i.text("channels").parse().unwrap_or(3));
        let node = data
            .and_then(KdlNode::children)
            .and_then(|c| c.nodes().iter().find(|n| n.name().value() == IMAGES.name));
        let mut spec = ImageSpec {
            channels,
            transforms: Vec::new(),
        };
        for child in node
            .and_then(KdlNode::children)
            .map_or(&[][..], |c| c.nodes())
        {
            let name = child.name().value();
            let Some(section) = transforms::transform(name) else {
                let names: Vec<&str> = TRANSFORMS.iter().map(|t| t.name).collect();
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::unknown_transform",
                        format!("unknown image transform `{name}`"),
                    )
                    .label(child.name().span(), "not a transform")
                    .help(suggest::help_for(name, "transform", &names)),
                );
                continue;
            };
            let fields = self.read(
                Some(child),
                section,
                &["data".into(), IMAGES.name.into(), name.into()],
                &format!("data.images.{name}"),
            );
            let Some(transform) = Transform::lower(name, &fields) else {
                unreachable!("`{name}` has a schema, so it is registered")
            };
            spec.transforms.push(TransformSpec {
                transform,
                span: Some(child.span()),
            });
        }
        self.check_transforms(&spec);
        Some(spec)
    }

    /// What can be told of the transforms without an image: `normalize` last, once, with
    /// a value per channel; sizes that no input could give.
    fn check_transforms(&mut self, spec: &ImageSpec) {
        let mut normalized = None;
        for (i, t) in spec.transforms.iter().enumerate() {
            if let Some((mean, std)) = t.transform.normalization() {
                if let Some(first) = normalized {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::data::normalize_twice",
                            "`normalize` is written twice",
                        )
                        .label_opt(first, "first here")
                        .label_opt(t.span, "again")
                        .help("keep one `normalize`, last"),
                    );
                } else if i + 1 != spec.transforms.len() {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::data::normalize_not_last",
                            "`normalize` comes last: it turns the 8-bit pixels the other transforms work on into the model's floats",
                        )
                        .label_opt(t.span, "not the last transform")
                        .help("move `normalize` after the other transforms"),
                    );
                }
                normalized = normalized.or(Some(t.span));
                for (key, values) in [("mean", mean), ("std", std)] {
                    if values.len() != 1 && values.len() != spec.channels as usize {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::data::normalize_channels",
                                format!(
                                    "`normalize` has {} values of `{key}` for images of {} channel{}",
                                    values.len(),
                                    spec.channels,
                                    if spec.channels == 1 { "" } else { "s" }
                                ),
                            )
                            .label_opt(t.span, "here")
                            .help(format!(
                                "write one value for every channel (`{key}=0.5`) or one per channel"
                            )),
                        );
                    }
                }
            }
        }
        if let Err((t, e)) = spec.size(None) {
            self.diags.push(
                Diagnostic::error("pipeline::data::bad_transform", e.message)
                    .label_opt(t.span, "this transform")
                    .help(e.help),
            );
        }
    }
}
