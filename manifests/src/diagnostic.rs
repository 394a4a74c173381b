//! [`Diagnostic`]: one problem found in a manifest, pointing into its text.
//!
//! Every layer (parsing, lowering, checking, and the run-time checks that need the data)
//! reports problems as this one type, so `pipeline check` can print them all at once,
//! rendered by miette or as JSON. The first label is the primary one: its position is
//! the `line`/`column` of the JSON form.

use miette::{LabeledSpan, SourceSpan};
use serde::Serialize;
use std::fmt;

/// How bad a [`Diagnostic`] is: errors stop `check` and `run`, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// A span in the manifest with the text shown next to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub span: SourceSpan,
    pub text: String,
}

/// One problem, with a stable code such as `pipeline::manifest::unknown_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
    /// The first label is the primary one.
    pub labels: Vec<Label>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            labels: Vec::new(),
            help: None,
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    /// Adds a label; the first one added is the primary label.
    pub fn label(mut self, span: impl Into<SourceSpan>, text: impl Into<String>) -> Self {
        self.labels.push(Label {
            span: span.into(),
            text: text.into(),
        });
        self
    }

    /// Adds a label when there is a span to put it on (values from `--set` have none).
    pub fn label_opt(self, span: Option<SourceSpan>, text: impl Into<String>) -> Self {
        match span {
            Some(span) => self.label(span, text),
            None => self,
        }
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The diagnostic with the control characters of its message, labels and help
    /// escaped ([`escape_controls`]): what is shown on a terminal, since a message may
    /// quote user data (a CSV field, a name).
    pub fn escaped(&self) -> std::borrow::Cow<'_, Diagnostic> {
        let texts = std::iter::once(&self.message)
            .chain(self.help.iter())
            .chain(self.labels.iter().map(|l| &l.text));
        if !texts.into_iter().any(|t| t.chars().any(escaped_char)) {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(Diagnostic {
            code: self.code,
            severity: self.severity,
            message: escape_controls(&self.message).into_owned(),
            labels: self
                .labels
                .iter()
                .map(|l| Label {
                    span: l.span,
                    text: escape_controls(&l.text).into_owned(),
                })
                .collect(),
            help: self
                .help
                .as_deref()
                .map(|h| escape_controls(h).into_owned()),
        })
    }

    /// 1-based line and column of the primary label in `source`, if there is one.
    pub fn location(&self, source: &str) -> Option<(usize, usize)> {
        let offset = self.labels.first()?.span.offset().min(source.len());
        let before = &source[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = source[line_start..offset].chars().count() + 1;
        Some((line, column))
    }
}

/// Whether `c` is written escaped on a terminal: a control character other than a line
/// break or a tab (escape, bell, carriage return, the C1 controls such as CSI).
fn escaped_char(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `text` with its control characters, but line breaks and tabs, written as Rust writes
/// them (`\u{1b}`), so that text quoted from user data (a CSV field, a name) cannot move
/// the cursor, clear the screen or set the terminal's title. Every message shown on a
/// terminal that quotes user data goes through this.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(escaped_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped_char(c) {
            out += &format!("\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.labels.iter().enumerate().map(|(i, l)| {
            let text = Some(l.text.clone()).filter(|t| !t.is_empty());
            if i == 0 {
                LabeledSpan::new_primary_with_span(text, l.span)
            } else {
                LabeledSpan::new_with_span(text, l.span)
            }
        })))
    }
}

/// Diagnostics collected by one pass, in the order they were found.
pub type Diagnostics = Vec<Diagnostic>;

/// True when any diagnostic is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_is_one_based_line_and_column() {
        let src = "a 1\nbb 2\n";
        let d = Diagnostic::error("x", "m").label((7, 1), "");
        assert_eq!(d.location(src), Some((2, 4)));
        let d = Diagnostic::error("x", "m");
        assert_eq!(d.location(src), None);
    }
}
