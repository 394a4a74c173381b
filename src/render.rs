//! Showing diagnostics: miette's graphical report on stderr, or JSON objects.

use manifests::Diagnostic;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};
use serde_json::{json, Value};
use std::fmt;
use std::io::IsTerminal;

/// A manifest's text with the name it is shown under.
pub struct Source {
    pub name: String,
    pub text: String,
}

/// A diagnostic with the source its labels point into.
struct WithSource<'a> {
    diag: &'a Diagnostic,
    source: Option<NamedSource<String>>,
}

impl fmt::Debug for WithSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}

impl fmt::Display for WithSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.diag, f)
    }
}

impl std::error::Error for WithSource<'_> {}

impl miette::Diagnostic for WithSource<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        miette::Diagnostic::code(self.diag)
    }
    fn severity(&self) -> Option<miette::Severity> {
        miette::Diagnostic::severity(self.diag)
    }
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        miette::Diagnostic::help(self.diag)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        self.source.as_ref()?;
        miette::Diagnostic::labels(self.diag)
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_ref().map(|s| s as &dyn SourceCode)
    }
}

fn handler() -> GraphicalReportHandler {
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .with_links(false)
}

/// The diagnostic rendered for a person, pointing into `source` when given.
pub fn human(diag: &Diagnostic, source: Option<&Source>) -> String {
    let with = WithSource {
        diag,
        source: source.map(|s| NamedSource::new(&s.name, s.text.clone())),
    };
    let mut out = String::new();
    handler()
        .render_report(&mut out, &with)
        .expect("rendering into a String cannot fail");
    out
}

/// The JSON form: `{code, severity, message, file, line, column, help}`.
pub fn json(diag: &Diagnostic, source: Option<&Source>) -> Value {
    let location = source.and_then(|s| diag.location(&s.text));
    json!({
        "code": diag.code,
        "severity": diag.severity,
        "message": diag.message,
        "file": source.map(|s| s.name.as_str()),
        "line": location.map(|l| l.0),
        "column": location.map(|l| l.1),
        "help": diag.help,
    })
}
