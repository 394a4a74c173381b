//! The `data.text` block → [`TextSpec`]: which column holds the texts and how they become
//! token ids; the keys that cannot go with it are errors here.

use crate::diagnostic::Diagnostic;
use crate::manifest::{Column, DataFormat, Missing, PaddingSide, Scale, Spanned, TextSpec};
use crate::reader::{Fields, Reader};
use std::path::PathBuf;

impl<'a> Reader<'a> {
    /// `data.text` of the data's fields `f`, for data in `format`.
    pub(crate) fn text(&mut self, f: &Fields, format: DataFormat) -> Option<TextSpec> {
        let t = f.section_fields("text")?;
        let refuse = |this: &mut Self, key: &str, message: String, help: &str| {
            this.diags.push(
                Diagnostic::error("pipeline::data::text_and_key", message)
                    .label_opt(f.span(key), "here")
                    .label_opt(t.span, "text data")
                    .help(help.to_string()),
            );
        };
        // Other formats are reported by `keys_for_format`.
        if !format.is_table() {
            return None;
        }
        if f.value("features").is_some() {
            refuse(
                self,
                "features",
                "with `text`, the features are its tokens: `features` does not apply".into(),
                "remove `features`; `text \"column\"` names the texts",
            );
        }
        if Scale::parse(&f.text("scale")).is_some_and(|s| s != Scale::None) {
            refuse(
                self,
                "scale",
                "token ids are not scaled".into(),
                "remove `scale`",
            );
        }
        if Missing::parse(&f.text("missing"))
            .is_some_and(|m| matches!(m, Missing::Mean | Missing::Median))
        {
            refuse(
                self,
                "missing",
                format!(
                    "a missing text cannot be filled with a {}",
                    f.text("missing")
                ),
                "leave such rows out (`missing \"drop-row\"`), or fix the texts",
            );
        }
        let columns = t.columns("column");
        let column = match columns.as_slice() {
            [one] if !matches!(one.value, Column::Range { .. }) => one.value.clone(),
            [] => Column::First, // missing: reported by the reader
            _ => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::data::text_columns",
                        "`data.text` reads one column of texts",
                    )
                    .label_opt(t.span("column"), "not one column")
                    .help("name one column: `text \"review\" …`; join several texts into one column first"),
                );
                Column::First
            }
        };
        Some(TextSpec {
            column,
            tokenizer: Spanned {
                value: PathBuf::from(t.text("tokenizer")),
                span: t.span("tokenizer"),
            },
            max_length: t.int("max-length").max(1) as u64,
            // Not reached: `padding-side` has a default.
            padding_side: PaddingSide::parse(&t.text("padding-side")).unwrap_or(PaddingSide::Right),
            add_special_tokens: t.bool("add-special-tokens"),
            span: t.span,
        })
    }
}
