//! The `categorical` and `date` nodes inside `data` → [`CategoricalSpec`]s and
//! [`DateSpec`]s: feature columns read as categories (one-hot or by index), or as dates
//! (a feature per part). What a column holds is known once the data is read
//! (`pipeline_core::categorical`, `pipeline_core::table`).

use crate::diagnostic::Diagnostic;
use crate::manifest::{
    CategoricalSpec, Column, DataSpec, DatePart, DateSpec, Encoding, FormatKind, DEFAULT_DATE_PARTS,
};
use crate::reader::Reader;
use crate::schema::{CATEGORICAL, DATE};
use kdl::KdlNode;

impl<'a> Reader<'a> {
    /// The `categorical` nodes of the `data` node, once `data` (with its inputs) is
    /// lowered: for tables of numbers and text (not texts to tokenise), each index input
    /// named once among the model's inputs.
    pub(crate) fn categorical(
        &mut self,
        data_node: Option<&KdlNode>,
        data: &DataSpec,
    ) -> Vec<CategoricalSpec> {
        let mut out: Vec<CategoricalSpec> = Vec::new();
        let nodes = data_node
            .and_then(KdlNode::children)
            .map_or(&[][..], |c| c.nodes())
            .iter()
            .filter(|n| n.name().value() == CATEGORICAL.name);
        for (i, child) in nodes.enumerate() {
            // `--set` cannot reach one: the path has a space.
            let path = ["data".to_string(), format!("categorical {i}")];
            let f = self.read(Some(child), &CATEGORICAL, &path, "data.categorical");
            let span = Some(child.name().span());
            let columns: Vec<Column> = f.columns("columns").into_iter().map(|c| c.value).collect();
            // Not reached: `encoding` has a default.
            let encoding = Encoding::parse(&f.text("encoding")).unwrap_or(Encoding::OneHot);
            let input = f.opt_text("input");
            let refuse = |code: &'static str, message: String, label: &str, help: &str| {
                Diagnostic::error(code, message)
                    .label_opt(span, label.to_string())
                    .help(help.to_string())
            };
            let table = matches!(data.format.kind(), FormatKind::Table { .. });
            if !table || data.text.is_some() || data.padding_id.is_some() {
                let what = if data.text.is_some() {
                    "texts tokenised into the features".to_string()
                } else if data.padding_id.is_some() {
                    "token ids".to_string()
                } else {
                    format!("{} data", data.format.title())
                };
                self.diags.push(refuse(
                    "pipeline::data::key_not_for_format",
                    format!("`data.categorical` reads columns of a table, not {what}"),
                    "not for this data",
                    "categorical columns are columns of a CSV, JSON or Parquet table; remove `categorical`",
                ));
                continue;
            }
            if input.is_some() && encoding != Encoding::Index {
                self.diags.push(
                    refuse(
                        "pipeline::data::bad_categorical",
                        "`input` names the model input of an `index` encoding, and this one is one-hot".into(),
                        "one-hot",
                        "add `encoding=\"index\"`, or remove `input`: one-hot columns are features",
                    )
                    .label_opt(f.span("input"), "an input's name"),
                );
                continue;
            }
            let spec = CategoricalSpec {
                columns,
                encoding,
                input,
                span,
            };
            let one_column =
                matches!(spec.columns.as_slice(), [c] if !matches!(c, Column::Range { .. }));
            if encoding == Encoding::Index {
                let name = spec.input_name().filter(|_| one_column);
                let Some(name) = name else {
                    self.diags.push(refuse(
                        "pipeline::data::bad_categorical",
                        "an `index` encoding gives each column a model input of its own, named after it: name one column, by its name, or the input with `input`".into(),
                        "which input?",
                        "write one node per column (`categorical \"island\" encoding=\"index\"`), or name the input: `input=\"island\"`",
                    ));
                    continue;
                };
                let own = data.own_inputs();
                let taken = own.contains(&name.as_str())
                    || data.extra_inputs.iter().any(|i| i.name == name)
                    || out
                        .iter()
                        .any(|c| c.input_name().as_deref() == Some(name.as_str()));
                if taken || !crate::lower::valid_stage_name(&name) {
                    let why = match taken {
                        true => format!("the model has an input `{name}` already"),
                        false => format!("`{name}` is not a valid input name"),
                    };
                    self.diags.push(refuse(
                        "pipeline::data::bad_input_name",
                        format!("the column's ids cannot be the model input `{name}`: {why}"),
                        "this input",
                        "name the input with `input=\"…\"`: letters, digits, `-` and `_`, unlike the other inputs",
                    ));
                    continue;
                }
            }
            out.push(spec);
        }
        out
    }

    /// The `date` nodes of the `data` node: for tables (not texts to tokenise), each
    /// part named once.
    pub(crate) fn dates(&mut self, data_node: Option<&KdlNode>, data: &DataSpec) -> Vec<DateSpec> {
        let mut out = Vec::new();
        let nodes = data_node
            .and_then(KdlNode::children)
            .map_or(&[][..], |c| c.nodes())
            .iter()
            .filter(|n| n.name().value() == DATE.name);
        for (i, child) in nodes.enumerate() {
            let path = ["data".to_string(), format!("date {i}")];
            let f = self.read(Some(child), &DATE, &path, "data.date");
            let span = Some(child.name().span());
            let table = matches!(data.format.kind(), FormatKind::Table { .. });
            if !table || data.text.is_some() || data.padding_id.is_some() {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::key_not_for_format",
                        "`data.date` reads columns of a table of numbers and text".to_string(),
                    )
                    .label_opt(span, "not for this data")
                    .help("date columns are columns of a CSV or JSON table; remove `date`"),
                );
                continue;
            }
            let written = f.texts("parts");
            let mut parts: Vec<DatePart> = Vec::new();
            let mut bad = false;
            for part in &written {
                // The default is one text of names.
                for name in part.value.split_whitespace() {
                    match DatePart::parse(name) {
                        Some(p) if !parts.contains(&p) => parts.push(p),
                        found => {
                            bad = true;
                            let why = match found {
                                Some(_) => format!("`{name}` is named twice"),
                                None => format!("`{name}` is not a part of a date"),
                            };
                            self.diags.push(
                                Diagnostic::error("pipeline::data::bad_date_part", why)
                                    .label_opt(part.span.or(span), "parts")
                                    .help(format!(
                                        "name each once, among {}",
                                        DatePart::NAMES
                                            .iter()
                                            .map(|n| format!("`{n}`"))
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    )),
                            );
                        }
                    }
                }
            }
            if bad {
                continue;
            }
            if parts.is_empty() {
                parts = DEFAULT_DATE_PARTS.to_vec();
            }
            out.push(DateSpec {
                columns: f.columns("columns").into_iter().map(|c| c.value).collect(),
                parts,
                span,
            });
        }
        out
    }
}
