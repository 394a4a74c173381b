//! What a manifest's text may be before the KDL parser sees it: how large, and how deep
//! it nests.
//!
//! The `kdl` crate's parser is linear but slow (a few microseconds a byte, tens for a
//! file of many small nodes), so `check` stays fast by reading at most [`MAX_BYTES`]:
//! dozens of times the largest real manifest, and a second or less to parse.
//!
//! It also parses recursively: one level of its stack per `{ … }` block, and one
//! per `*` or `/` inside a `/* … */` comment. Deep enough input overflows the stack,
//! which aborts the process (no diagnostic, no `--json`). So `lower` first calls
//! [`check`], which:
//!
//! 1. scans the text the way KDL v2 lexes it (strings, multi-line strings, raw strings
//!    with any number of `#`, line comments and nested block comments), and reports a
//!    block or comment nested deeper than [`MAX_DEPTH`] with a label on the opening that
//!    goes too deep: the diagnostic a person with a real manifest sees;
//! 2. bounds, whatever the lexing, what the parser could recurse on: every `{` in the
//!    text and every `*` or `/` after the first `/*`, since the parser's error recovery
//!    may end a string where a lexer would not. Text over [`MAX_BRACES`] or
//!    [`MAX_COMMENT_MARKS`] is refused; under them the parse fits in [`PARSE_STACK`],
//!    the stack `lower` parses on.
//!
//! The honest limitation: (2) refuses some harmless text (over 20,000 `{` in strings).
//! No manifest comes near it.

use crate::diagnostic::Diagnostic;
use miette::SourceSpan;

/// Blocks (and block comments) may nest this deep; a manifest needs three.
pub const MAX_DEPTH: usize = 32;

/// At most this many `{` in the whole text.
pub const MAX_BRACES: usize = 20_000;
const _: () = assert!(MAX_BRACES * 6 * 1024 < PARSE_STACK);

/// At most this many `*` and `/` from the first `/*` on (more than [`MAX_BYTES`]
/// allows: a bound that holds on its own, should the size limit grow).
pub const MAX_COMMENT_MARKS: usize = 200_000;

/// The stack the KDL parser runs on: room for [`MAX_BRACES`] nested blocks (about 6 KB
/// each in the parser) and [`MAX_COMMENT_MARKS`] comment steps (under 400 bytes each).
pub const PARSE_STACK: usize = 256 << 20;

fn is_newline(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{85}' | '\u{b}' | '\u{c}' | '\u{2028}' | '\u{2029}'
    )
}

/// Where the lexer is.
enum State {
    Code,
    LineComment,
    /// Nested block comments: the offsets of their openings.
    BlockComment(Vec<usize>),
    /// A quoted string; `true` for a multi-line one (`"""`).
    Quoted(bool),
    /// A raw string: its number of `#`, and whether it is multi-line.
    Raw(usize, bool),
}

/// The largest manifest read, in bytes.
pub const MAX_BYTES: usize = 128 * 1024;

/// `None` when the text is within bounds; else the diagnostic that says where.
pub fn check(text: &str) -> Option<Diagnostic> {
    if text.len() > MAX_BYTES {
        let mut end = MAX_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        return Some(
            Diagnostic::error(
                "pipeline::manifest::too_large",
                format!(
                    "the manifest is {} bytes; at most {MAX_BYTES} ({} KiB) are read",
                    text.len(),
                    MAX_BYTES / 1024
                ),
            )
            .label((end, 0), "the first 128 KiB end here")
            .help("a manifest is a few kilobytes: split the pipeline into several manifests, or generate fewer stages"),
        );
    }
    if let Some(d) = bounds(text) {
        return Some(d);
    }
    scan(text)
}

fn bounds(text: &str) -> Option<Diagnostic> {
    let braces = text.bytes().filter(|b| *b == b'{').count();
    let marks = text.find("/*").map_or(0, |first| {
        text.as_bytes()[first..]
            .iter()
            .filter(|b| matches!(b, b'*' | b'/'))
            .count()
    });
    if braces > MAX_BRACES {
        return Some(
            Diagnostic::error(
                "pipeline::manifest::too_complex",
                format!("the manifest has {braces} `{{`; at most {MAX_BRACES} are read"),
            )
            .help("a manifest is a few dozen blocks: split this file, or remove what generated the braces"),
        );
    }
    if marks > MAX_COMMENT_MARKS {
        let first = text.find("/*").unwrap_or(0);
        return Some(
            Diagnostic::error(
                "pipeline::manifest::too_complex",
                format!(
                    "the manifest has {marks} `*` and `/` after its first `/*`; at most {MAX_COMMENT_MARKS} are read"
                ),
            )
            .label((first, 2), "the first block comment")
            .help("use `//` line comments for long commented-out text"),
        );
    }
    None
}

/// `what` nested too deep: the opening at `at` (`len` bytes) is one level too many.
fn too_deep(what: &str, at: usize, len: usize, outermost: usize) -> Diagnostic {
    let d = Diagnostic::error(
        "pipeline::manifest::too_deep",
        format!("{what} are nested more than {MAX_DEPTH} deep"),
    )
    .label(
        SourceSpan::from((at, len)),
        format!("level {}", MAX_DEPTH + 1),
    );
    let d = if outermost == at {
        d
    } else {
        d.label((outermost, len), "the outermost one opens here")
    };
    d.help("a manifest nests three levels at most (`data { split { … } }`); close the blocks opened above")
}

fn scan(text: &str) -> Option<Diagnostic> {
    let bytes = text.as_bytes();
    let mut state = State::Code;
    let mut blocks: Vec<usize> = Vec::new();
    let mut chars = text.char_indices().peekable();
    let starts_with = |i: usize, s: &str| bytes.get(i..i + s.len()) == Some(s.as_bytes());
    while let Some((i, c)) = chars.next() {
        match &mut state {
            State::Code => match c {
                '{' => {
                    blocks.push(i);
                    if blocks.len() > MAX_DEPTH {
                        return Some(too_deep("blocks", i, 1, blocks[0]));
                    }
                }
                '}' => {
                    blocks.pop();
                }
                '/' if starts_with(i, "//") => {
                    chars.next();
                    state = State::LineComment;
                }
                '/' if starts_with(i, "/*") => {
                    chars.next();
                    state = State::BlockComment(vec![i]);
                }
                '"' if starts_with(i, "\"\"\"") => {
                    chars.next();
                    chars.next();
                    state = State::Quoted(true);
                }
                '"' => state = State::Quoted(false),
                '#' => {
                    let hashes = bytes[i..].iter().take_while(|b| **b == b'#').count();
                    if starts_with(i + hashes, "\"") {
                        for _ in 1..hashes + 1 {
                            chars.next();
                        }
                        let multi = starts_with(i + hashes, "\"\"\"");
                        if multi {
                            chars.next();
                            chars.next();
                        }
                        state = State::Raw(hashes, multi);
                    }
                }
                _ => {}
            },
            State::LineComment => {
                if is_newline(c) {
                    state = State::Code;
                }
            }
            State::BlockComment(open) => {
                if starts_with(i, "/*") {
                    chars.next();
                    open.push(i);
                    if open.len() > MAX_DEPTH {
                        return Some(too_deep("block comments", i, 2, open[0]));
                    }
                } else if starts_with(i, "*/") {
                    chars.next();
                    open.pop();
                    if open.is_empty() {
                        state = State::Code;
                    }
                }
            }
            State::Quoted(multi) => match c {
                '\\' => {
                    chars.next();
                }
                '"' if *multi && starts_with(i, "\"\"\"") => {
                    chars.next();
                    chars.next();
                    state = State::Code;
                }
                '"' if !*multi => state = State::Code,
                // A line break ends a one-line string for the parser too (an error).
                c if !*multi && is_newline(c) => state = State::Code,
                _ => {}
            },
            State::Raw(hashes, multi) => {
                let quotes = if *multi { "\"\"\"" } else { "\"" };
                if starts_with(i, quotes)
                    && bytes[i + quotes.len()..]
                        .iter()
                        .take(*hashes)
                        .filter(|b| **b == b'#')
                        .count()
                        == *hashes
                {
                    for _ in 1..quotes.len() + *hashes {
                        chars.next();
                    }
                    state = State::Code;
                } else if !*multi && is_newline(c) {
                    state = State::Code;
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!("a {}{}", "{ a ".repeat(n), "}".repeat(n))
    }

    #[test]
    fn nesting_up_to_the_limit_is_fine_and_one_more_is_an_error_on_that_brace() {
        assert!(check(&nested(MAX_DEPTH)).is_none());
        let text = nested(MAX_DEPTH + 1);
        let d = check(&text).expect("too deep");
        assert_eq!(d.code, "pipeline::manifest::too_deep");
        assert_eq!(d.message, "blocks are nested more than 32 deep");
        let at = 2 + 4 * MAX_DEPTH;
        assert_eq!(d.labels[0].span, (at, 1).into());
        assert_eq!(&text[at..at + 1], "{");
        assert_eq!(d.labels[1].span, (2, 1).into());
    }

    #[test]
    fn braces_in_strings_and_comments_do_not_count() {
        let many = "{".repeat(100);
        for text in [
            format!("a \"{many}\""),
            format!("a \"\\\"{many}\""),
            format!("a \"\"\"\n{many}\n\"\"\""),
            format!("a #\"{many}\"#"),
            format!("a ##\"\"#{many}\"##"),
            format!("a #\"\"\"\n\"\"\"{many}\n\"\"\"#"),
            format!("// {many}\na 1"),
            format!("/* /* {many} */ {many} */ a 1"),
        ] {
            assert!(check(&text).is_none(), "{text}");
        }
        // …but a string that ends lets the braces after it count.
        assert!(check(&format!("a \"x\" {}", nested(40))).is_some());
        assert!(check(&format!("a #\"x\"# {}", nested(40))).is_some());
    }

    #[test]
    fn deep_block_comments_are_an_error_and_long_ones_are_bounded() {
        let d = check(&format!("{}x", "/*".repeat(40))).expect("too deep");
        assert_eq!(d.message, "block comments are nested more than 32 deep");
        assert_eq!(d.labels[0].span, (64, 2).into());
        let d = bounds(&format!("/*{}*/", "*".repeat(MAX_COMMENT_MARKS))).expect("bounded");
        assert_eq!(d.code, "pipeline::manifest::too_complex");
        let d = bounds(&"a \"{\"\n".repeat(MAX_BRACES + 1)).expect("bounded");
        assert_eq!(d.code, "pipeline::manifest::too_complex");
    }

    #[test]
    fn a_manifest_over_the_size_limit_is_refused_at_a_char_boundary() {
        let text = format!("a{}", "é".repeat(MAX_BYTES / 2));
        let d = check(&text).expect("too large");
        assert_eq!(d.code, "pipeline::manifest::too_large");
        assert_eq!(d.labels[0].span, (MAX_BYTES - 1, 0).into());
        assert!(check(&"x".repeat(MAX_BYTES)).is_none());
    }
}
