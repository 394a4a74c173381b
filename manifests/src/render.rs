//! Showing diagnostics: miette's graphical report for a person, or JSON for tools.
//!
//! Here, next to [`Diagnostic`], so that every binary and the fuzzer (which must not link
//! libtorch) render with the same code. The invariants, whatever the manifest:
//!
//! - rendering never panics: a label on a line too long to show (miette's layout is not
//!   made for lines of tens of thousands of columns, and panics past column 65,535) is
//!   shown as `at FILE:LINE:COLUMN` without the snippet;
//! - rendering a batch is linear in the manifest's size: lines are found through a line
//!   index built once per batch (miette's own lookup scans from the start of the text for
//!   every label), JSON positions in one pass over the text, and a person is shown the
//!   first [`SHOWN`] diagnostics and a count of the rest;
//! - a label over many lines is cut to its first line, so a snippet stays a few lines.
//!
//! The honest limitation: a diagnostic rendered alone ([`human`], [`json`]) scans the
//! text up to its labels; render batches with [`human_report`] and [`json_all`].

use crate::diagnostic::{Diagnostic, Severity};
use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents,
    SourceCode, SourceSpan, SpanContents,
};
use serde_json::{json, Value};
use std::fmt;
use std::io::IsTerminal;

/// A manifest's text with the name it is shown under.
pub struct Source {
    pub name: String,
    pub text: String,
}

/// At most this many diagnostics of one file are rendered for a person; a last line
/// counts the others (`--json` lists them all).
pub const SHOWN: usize = 50;

/// A line longer than this (in bytes) is not shown in a snippet.
pub const LONGEST_SHOWN_LINE: usize = 1000;

/// A label over more lines than this is cut to its first line.
const TALLEST_LABEL: usize = 8;

/// The byte offsets where the lines of a text start.
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        let mut starts = vec![0];
        starts.extend(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Lines { text, starts }
    }

    /// The 0-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset) - 1
    }

    /// Bytes `start..end` of line `line`, without its line break.
    fn bounds(&self, line: usize) -> (usize, usize) {
        let start = self.starts[line];
        let end = self
            .starts
            .get(line + 1)
            .map_or(self.text.len(), |next| next - 1);
        let end = if end > start && self.text.as_bytes()[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        (start, end.max(start))
    }

    /// 1-based line and column (in characters) of byte `offset`.
    fn location(&self, offset: usize) -> (usize, usize) {
        let offset = floor_char_boundary(self.text, offset.min(self.text.len()));
        let line = self.line_of(offset);
        let column = self.text[self.starts[line]..offset].chars().count() + 1;
        (line + 1, column)
    }
}

/// The largest char boundary at or below `offset`.
fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while offset > 0 && !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// 1-based line and column of every offset, in one pass over `text`.
fn locate_all(text: &str, offsets: &[usize]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..offsets.len()).collect();
    order.sort_by_key(|&i| offsets[i]);
    let mut out = vec![(0, 0); offsets.len()];
    let (mut pos, mut line, mut column) = (0usize, 1usize, 1usize);
    for i in order {
        let target = floor_char_boundary(text, offsets[i].min(text.len()));
        for c in text[pos..target].chars() {
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        pos = target;
        out[i] = (line, column);
    }
    out
}

/// The manifest as miette reads it: spans answered through the line index.
struct Indexed<'a> {
    name: &'a str,
    lines: &'a Lines<'a>,
}

impl SourceCode for Indexed<'_> {
    // What miette's own `SourceCode for str` answers, found through the index: the lines
    // around the span with their line break; `line_count` the number of line breaks from
    // the start of the text through the last line (miette merges snippets by it); with no
    // context before, the data starts at the span and `column` is its byte column.
    fn read_span<'b>(
        &'b self,
        span: &SourceSpan,
        before: usize,
        after: usize,
    ) -> Result<Box<dyn SpanContents<'b> + 'b>, MietteError> {
        let text = self.lines.text;
        let end = span.offset() + span.len();
        if end > text.len() {
            return Err(MietteError::OutOfBounds);
        }
        let first = self.lines.line_of(span.offset());
        let last = self.lines.line_of(end.saturating_sub(1).max(span.offset()));
        let from = first.saturating_sub(before);
        let to = (last + after).min(self.lines.starts.len() - 1);
        let (start, column) = if before == 0 {
            (span.offset(), span.offset() - self.lines.starts[first])
        } else {
            (self.lines.starts[from], 0)
        };
        let (stop, line_count) = match self.lines.starts.get(to + 1) {
            Some(next) => (*next, to + 1),
            None => (text.len(), to),
        };
        Ok(Box::new(MietteSpanContents::new_named(
            self.name.to_string(),
            &text.as_bytes()[start..stop],
            (start, stop - start).into(),
            from,
            column,
            line_count,
        )))
    }
}

/// A diagnostic as miette shows it: with the source when its lines can be shown.
struct Shown<'a> {
    diag: &'a Diagnostic,
    source: Option<Indexed<'a>>,
    labels: Vec<LabeledSpan>,
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.diag, f)
    }
}

impl std::error::Error for Shown<'_> {}

impl miette::Diagnostic for Shown<'_> {
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
        if self.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.labels.iter().cloned()))
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.source.as_ref().map(|s| s as &dyn SourceCode)
    }
}

fn handler() -> GraphicalReportHandler {
    let color = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let theme = if color {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .with_links(false)
}

/// Renders one diagnostic with an index of its source's lines.
fn render(
    handler: &GraphicalReportHandler,
    diag: &Diagnostic,
    source: Option<(&str, &Lines<'_>)>,
) -> String {
    // A message may quote user data (a CSV field, a name): its control characters are
    // shown escaped, never sent to the terminal.
    let escaped = diag.escaped();
    let diag: &Diagnostic = &escaped;
    let mut out = String::new();
    let mut unshown = Vec::new();
    let mut labels = Vec::new();
    if let Some((_, lines)) = source {
        let len = lines.text.len();
        for (i, label) in diag.labels.iter().enumerate() {
            // A span outside the text (it cannot come from this text) is dropped.
            let offset = label.span.offset();
            if offset > len || label.span.len() > len - offset {
                continue;
            }
            let first = lines.line_of(offset);
            let last = lines.line_of((offset + label.span.len()).saturating_sub(1).max(offset));
            let shown_lines = first.saturating_sub(1)..=(last + 1).min(lines.starts.len() - 1);
            if shown_lines.clone().any(|l| {
                let (s, e) = lines.bounds(l);
                e - s > LONGEST_SHOWN_LINE
            }) {
                unshown.push(label);
                continue;
            }
            let span: SourceSpan = if last - first > TALLEST_LABEL {
                (offset, lines.bounds(first).1 - offset).into()
            } else {
                label.span
            };
            let text = Some(label.text.clone()).filter(|t| !t.is_empty());
            labels.push(if i == 0 {
                LabeledSpan::new_primary_with_span(text, span)
            } else {
                LabeledSpan::new_with_span(text, span)
            });
        }
    }
    let shown = Shown {
        diag,
        source: source
            .filter(|_| !labels.is_empty())
            .map(|(name, lines)| Indexed { name, lines }),
        labels,
    };
    if handler.render_report(&mut out, &shown).is_err() {
        // Writing into a String does not fail; say so rather than lose the diagnostic.
        out = format!("{}: {}\n", diag.code, diag.message);
    }
    if let Some((name, lines)) = source {
        for label in unshown {
            let (line, column) = lines.location(label.span.offset());
            let text = if label.text.is_empty() {
                String::new()
            } else {
                format!(": {}", label.text)
            };
            out += &format!("  at {name}:{line}:{column}{text} (the line is too long to show)\n");
        }
    }
    out
}

/// `text` with each control character (but line breaks, tabs and the `\r` of a `\r\n`)
/// made `?`s of its length in bytes, so that a snippet of the manifest sends none to the
/// terminal while every span still points where it did.
fn visible(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |(i, c): (usize, char)| {
        c.is_control() && c != '\n' && c != '\t' && !(c == '\r' && text[i + 1..].starts_with('\n'))
    };
    if !text.char_indices().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if hidden((i, c)) {
            out.extend(std::iter::repeat_n('?', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The diagnostic rendered for a person, pointing into `source` when given.
pub fn human(diag: &Diagnostic, source: Option<&Source>) -> String {
    let texts = source.map(|s| visible(&s.text));
    let lines = texts.as_deref().map(Lines::new);
    let name = source.map(|s| crate::escape_controls(&s.name));
    let source = name.as_deref().zip(lines.as_ref());
    render(&handler(), diag, source)
}

/// Every diagnostic of one file rendered for a person, one after the other, the first
/// [`SHOWN`] of them and then a line counting the rest.
pub fn human_report(diags: &[Diagnostic], source: Option<&Source>) -> String {
    let texts = source.map(|s| visible(&s.text));
    let lines = texts.as_deref().map(Lines::new);
    let name = source.map(|s| crate::escape_controls(&s.name));
    let indexed = name.as_deref().zip(lines.as_ref());
    let handler = handler();
    let mut out = String::new();
    for d in diags.iter().take(SHOWN) {
        out += &render(&handler, d, indexed);
        out += "\n";
    }
    if diags.len() > SHOWN {
        let rest = &diags[SHOWN..];
        let errors = rest
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count();
        let warnings = rest.len() - errors;
        let file = name.as_ref().map_or(String::new(), |n| format!(" in {n}"));
        out += &format!(
            "… and {} more{file} ({errors} error{}, {warnings} warning{}): fix those above first, or see them all with --json\n\n",
            rest.len(),
            if errors == 1 { "" } else { "s" },
            if warnings == 1 { "" } else { "s" },
        );
    }
    out
}

fn json_with(
    diag: &Diagnostic,
    source: Option<&Source>,
    location: Option<(usize, usize)>,
) -> Value {
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

/// The JSON form: `{code, severity, message, file, line, column, help}`.
pub fn json(diag: &Diagnostic, source: Option<&Source>) -> Value {
    let location = source.and_then(|s| {
        let offset = diag.labels.first()?.span.offset();
        Some(locate_all(&s.text, &[offset])[0])
    });
    json_with(diag, source, location)
}

/// The JSON form of every diagnostic of one file, positions found in one pass.
pub fn json_all(diags: &[Diagnostic], source: Option<&Source>) -> Vec<Value> {
    let Some(source) = source else {
        return diags.iter().map(|d| json_with(d, None, None)).collect();
    };
    let with_label: Vec<usize> = diags
        .iter()
        .filter_map(|d| d.labels.first().map(|l| l.span.offset()))
        .collect();
    let mut located = locate_all(&source.text, &with_label).into_iter();
    diags
        .iter()
        .map(|d| {
            let location = match d.labels.first() {
                Some(_) => located.next(),
                None => None,
            };
            json_with(d, Some(source), location)
        })
        .collect()
}

/// The one JSON document a `--json` command prints when it fails before it has its own
/// answer (an unreadable manifest, a manifest with errors, a bad argument):
/// `{"ok": false, "diagnostics": [...]}`.
pub fn json_failure(diags: &[Diagnostic], source: Option<&Source>) -> Value {
    json!({ "ok": false, "diagnostics": json_all(diags, source) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(text: &str) -> Source {
        Source {
            name: "m.kdl".into(),
            text: text.into(),
        }
    }

    #[test]
    fn locations_in_one_pass_match_one_at_a_time() {
        let text = "a 1\nbé 2\n\nlast";
        let offsets = [0, 5, 7, 4, 11, 12, 100];
        let all = locate_all(text, &offsets);
        let lines = Lines::new(text);
        for (o, l) in offsets.iter().zip(&all) {
            assert_eq!(lines.location(*o), *l, "offset {o}");
        }
        assert_eq!(all[1], (2, 2));
        assert_eq!(all[6], (4, 5));
    }

    #[test]
    fn a_label_on_a_very_long_line_is_located_not_drawn() {
        let text = format!("seed 1;{}bogus 1\n", " ".repeat(70_000));
        let d = Diagnostic::error("pipeline::manifest::unknown_node", "unknown node `bogus`")
            .label((70_007, 5), "not a section or stage kind")
            .help("remove it");
        let out = human(&d, Some(&source(&text)));
        assert!(out.contains("unknown node `bogus`"), "{out}");
        assert!(
            out.contains(
                "at m.kdl:1:70008: not a section or stage kind (the line is too long to show)"
            ),
            "{out}"
        );
        assert!(out.len() < 1000, "{out}");
    }

    #[test]
    fn a_tall_label_is_cut_to_its_first_line() {
        let text = format!("data {{\n{}}}\n", "  x 1\n".repeat(100));
        let d = Diagnostic::error("c", "m").label((0, text.len() - 1), "this block");
        let out = human(&d, Some(&source(&text)));
        assert!(out.lines().count() < 15, "{out}");
    }

    #[test]
    fn a_report_shows_the_first_diagnostics_and_counts_the_rest() {
        let text = "x\n".repeat(60);
        let diags: Vec<Diagnostic> = (0..60)
            .map(|i| Diagnostic::error("c", format!("problem {i}")).label((2 * i, 1), "here"))
            .collect();
        let out = human_report(&diags, Some(&source(&text)));
        assert!(out.contains("problem 49"));
        assert!(!out.contains("problem 50"));
        assert!(out.ends_with(
            "… and 10 more in m.kdl (10 errors, 0 warnings): fix those above first, or see them all with --json\n\n"
        ));
        let all = json_failure(&diags, Some(&source(&text)));
        assert_eq!(all["diagnostics"].as_array().unwrap().len(), 60);
        assert_eq!(all["diagnostics"][59]["line"], 60);
    }

    #[test]
    fn spans_outside_the_text_are_dropped_not_panicked_on() {
        let d = Diagnostic::error("c", "m").label((50, 3), "far away");
        let out = human(&d, Some(&source("short")));
        assert!(out.contains("m"));
        assert_eq!(json(&d, Some(&source("short")))["line"], 1);
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let text = "pipeline \"a\"\ndata { source \"x\u{1b}]0;title\u{7}.csv\" }\r\n";
        let d = Diagnostic::error("c", "row 3: `\u{1b}[2J\u{7}` is not a number\r")
            .label((24, 1), "a \u{9b}label")
            .help("quoted: \u{1b}[31m");
        let out = human_report(std::slice::from_ref(&d), Some(&source(text)));
        assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
        assert!(
            out.contains("row 3: `\\u{1b}[2J\\u{7}` is not a number\\u{d}"),
            "{out}"
        );
        assert!(out.contains("a \\u{9b}label"), "{out}");
        assert!(out.contains("quoted: \\u{1b}[31m"), "{out}");
        assert!(out.contains("x?]0;title?.csv"), "the snippet: {out}");
        let alone = human(&d, Some(&source(text)));
        assert!(
            !alone.chars().any(|c| c.is_control() && c != '\n'),
            "{alone:?}"
        );
        // JSON keeps the data as it is (escaped by JSON itself).
        assert_eq!(json(&d, None)["message"], d.message.as_str());
    }
}
