//! The `data.text` block → [`TextSpec`]: which column holds the texts and how they become
//! token ids; the keys that cannot go with it are errors here.

use crate::diagnostic::Diagnostic;
use crate::manifest::{Column, DataFormat, Missing, PaddingSide, Scale, Spanned, TextSpec};
use crate::reader::{Fields, Reader};
use miette::SourceSpan;
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
        if f.value("padding-id").is_some() {
            refuse(
                self,
                "padding-id",
                "the texts are padded with the tokenizer's padding token: `padding-id` does not apply".into(),
                "remove `padding-id`; it is for token ids stored as numbers",
            );
        }
        self.not_for_tokens(f, t.span, "text data", "texts", "text");
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

    /// `data.padding-id`: the features are token ids, this one padding (a `mask` input
    /// marks the rest). Image data is reported by `keys_for_format`, text by `text`.
    pub(crate) fn padding_id(&mut self, f: &Fields, format: DataFormat) -> Option<i64> {
        let id = f.opt_int("padding-id")?;
        if format.is_images() || f.section_fields("text").is_some() {
            return None;
        }
        self.not_for_tokens(
            f,
            f.span("padding-id"),
            "token ids",
            "token ids",
            "token id",
        );
        Some(id)
    }

    /// `scale` and filling do not apply to token ids: the texts or arrays (`what`, one of
    /// them a `one`) at `tokens`, labelled `label`.
    fn not_for_tokens(
        &mut self,
        f: &Fields,
        tokens: Option<SourceSpan>,
        label: &str,
        what: &str,
        one: &str,
    ) {
        let mut refuse = |key: &str, message: String, help: &str| {
            self.diags.push(
                Diagnostic::error("pipeline::data::text_and_key", message)
                    .label_opt(f.span(key), "here")
                    .label_opt(tokens, label.to_string())
                    .help(help.to_string()),
            );
        };
        if Scale::parse(&f.text("scale")).is_some_and(|s| s != Scale::None) {
            refuse("scale", "token ids are not scaled".into(), "remove `scale`");
        }
        if Missing::parse(&f.text("missing"))
            .is_some_and(|m| matches!(m, Missing::Mean | Missing::Median))
        {
            refuse(
                "missing",
                format!(
                    "a missing {one} cannot be filled with a {}",
                    f.text("missing")
                ),
                &format!("leave such rows out (`missing \"drop-row\"`), or fix the {what}"),
            );
        }
    }
}
