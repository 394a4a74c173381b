//! The `data.inputs` block → [`InputSpec`]s: more model inputs, each from a file of its
//! own, one node each named after the input (`meta "meta.csv" features=…`).

use crate::diagnostic::Diagnostic;
use crate::manifest::{
    Column, DataFormat, DataSpec, Encoding, FormatKind, InputSpec, ModelSpec, Node, Scale, Spanned,
};
use crate::reader::Reader;
use crate::schema::{INPUT, INPUTS};
use kdl::KdlNode;
use std::path::PathBuf;

/// Whether some file of the `data` node's `inputs` block is a CSV (by its name): the
/// data's dialect keys then apply, whatever the data's own format.
pub(crate) fn any_csv(data_node: Option<&KdlNode>) -> bool {
    data_node
        .and_then(KdlNode::children)
        .and_then(|c| c.nodes().iter().find(|n| n.name().value() == INPUTS.name))
        .and_then(KdlNode::children)
        .is_some_and(|c| {
            c.nodes().iter().any(|input| {
                input
                    .entries()
                    .iter()
                    .filter(|e| e.name().is_none_or(|k| k.value() == "source"))
                    .filter_map(|e| e.value().as_string())
                    .any(|path| {
                        DataFormat::of_name(std::path::Path::new(path))
                            .is_some_and(DataFormat::is_text_table)
                    })
            })
        })
}

impl<'a> Reader<'a> {
    /// The inputs of the `data` node's `inputs` block, once `data` (without them) is
    /// lowered: their names must differ from the data's own inputs and each other's.
    pub(crate) fn extra_inputs(
        &mut self,
        data_node: Option<&KdlNode>,
        data: &DataSpec,
    ) -> Vec<InputSpec> {
        let block = data_node
            .and_then(KdlNode::children)
            .and_then(|c| c.nodes().iter().find(|n| n.name().value() == INPUTS.name));
        let mut inputs: Vec<InputSpec> = Vec::new();
        for child in block
            .and_then(KdlNode::children)
            .map_or(&[][..], |c| c.nodes())
        {
            let name = child.name().value();
            let display = format!("data.inputs.{name}");
            let f = self.read(
                Some(child),
                &INPUT,
                &["data".into(), INPUTS.name.into(), name.into()],
                &display,
            );
            let own = data.own_inputs();
            if !crate::lower::valid_stage_name(name)
                || own.contains(&name)
                || inputs.iter().any(|i| i.name == name)
            {
                let why = if own.contains(&name) {
                    format!("the data gives `{name}` already")
                } else if inputs.iter().any(|i| i.name == name) {
                    "given twice".to_string()
                } else {
                    "not a valid name".to_string()
                };
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::bad_input_name",
                        format!("`{name}` cannot name a model input: {why}"),
                    )
                    .label(child.name().span(), why)
                    .help(format!(
                        "name each input once, with letters, digits, `-` and `_`; the data's own are {}",
                        own.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                    )),
                );
                continue;
            }
            let source = PathBuf::from(f.text("source"));
            let span = f.span("source");
            let format = match DataFormat::of_name(&source).filter(|f| !f.is_images()) {
                Some(format) => format,
                None => {
                    if f.value("source").is_some() {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::data::unknown_format",
                                format!("cannot tell the format of the input `{name}`'s file `{}` from its name", source.display()),
                            )
                            .label_opt(span, "unknown extension")
                            .help(format!("name the file {}", DataFormat::endings(false))),
                        );
                    }
                    continue;
                }
            };
            let written: Vec<Column> = f.columns("features").into_iter().map(|c| c.value).collect();
            let features = match format.kind() {
                FormatKind::Table { .. } => written,
                FormatKind::Arrays => match written.as_slice() {
                    [] => vec![Column::Name("x".to_string())],
                    [Column::Name(array)] => vec![Column::Name(array.clone())],
                    _ => {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::data::features_not_an_array",
                                format!("for {} inputs, `features` is the name of one array in the file", format.title()),
                            )
                            .label_opt(f.span("features"), "not one array name")
                            .help("write `features=\"x\"`"),
                        );
                        continue;
                    }
                },
                // (Images are refused above.)
                FormatKind::Array | FormatKind::Samples | FormatKind::Images { .. } => {
                    if f.value("features").is_some() {
                        let what = format.title();
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::data::key_not_for_format",
                                format!("`{display}.features` does not apply to {what} files"),
                            )
                            .label_opt(f.span("features"), format!("not read for {what}"))
                            .help("the input is the whole array; remove `features`"),
                        );
                    }
                    Vec::new()
                }
            };
            inputs.push(InputSpec {
                name: name.to_string(),
                source: Spanned {
                    value: source,
                    span,
                },
                format,
                features,
                // Not reached: `scale` has a default.
                scale: Scale::parse(&f.text("scale")).unwrap_or(Scale::None),
                span: Some(child.name().span()),
            });
        }
        inputs
    }

    /// Warns of every `data.inputs` input that no branch (`input=`) and no layer
    /// (`mask=`) of a native model reads: it would be read and hashed for nothing.
    pub(crate) fn unused_inputs(&mut self, data: &DataSpec, model: &ModelSpec) {
        if model.torchscript.is_some() {
            return; // a module takes its inputs by its `forward`'s arguments
        }
        fn read(nodes: &[Node], out: &mut Vec<String>) {
            for node in nodes {
                match node {
                    Node::Layer(l) => out.extend(l.layer.mask().map(str::to_string)),
                    Node::Residual { body, .. }
                    | Node::Repeat { body, .. }
                    | Node::Block { body, .. } => read(body, out),
                    Node::Parallel {
                        branches, inputs, ..
                    } => {
                        out.extend(inputs.iter().flatten().map(|i| i.value.clone()));
                        branches.iter().for_each(|b| read(b, out));
                    }
                }
            }
        }
        let mut used = Vec::new();
        read(&model.nodes, &mut used);
        let ids = data.categorical.iter().filter_map(|c| {
            c.input_name()
                .filter(|_| c.encoding == Encoding::Index)
                .map(|n| (n, c.span))
        });
        let inputs = data.extra_inputs.iter().map(|i| (i.name.clone(), i.span));
        for (name, span) in inputs.chain(ids) {
            if !used.contains(&name) {
                self.diags.push(
                    Diagnostic::warning(
                        "pipeline::data::unused_input",
                        format!("the input `{name}` is never read by the model"),
                    )
                    .label_opt(span, "defined here")
                    .help(format!(
                        "read it from a branch (`parallel {{ branch {{ … }} branch input=\"{name}\" {{ … }} }}`), or remove it"
                    )),
                );
            }
        }
    }
}
