//! Mutations that matter for a KDL manifest: each turns one input into another, keeping
//! the text valid UTF-8 (a manifest that is not is refused before it is parsed).
//!
//! A mutated input gets one to four of [`MUTATIONS`] in a row; a few of them grow the
//! text a lot (deep nesting, long lines, many repeated keys) and are drawn rarely, so
//! most inputs stay small and fast and the loop reaches many of them.

use crate::rng::Rng;
use crate::Input;
use manifests::schema::{self, Section, Ty};

type Mutation = fn(&mut Rng, &mut Input, &[Input]);

/// Every mutation with its weight.
pub const MUTATIONS: &[(u32, Mutation)] = &[
    (10, flip_char),
    (10, delete_range),
    (14, insert_token),
    (10, delete_token),
    (8, duplicate_token),
    (10, splice_line),
    (10, interesting_number),
    (2, deep_nesting),
    (2, long_text),
    (6, unicode),
    (2, repeat_line),
    (12, add_set),
    (4, change_set),
];

/// Inputs are cut to this many bytes: a little over what `check` reads
/// (`manifests`' 128 KiB), so the size limit itself is fuzzed but inputs do not grow
/// without end as mutations pile up.
pub const LONGEST: usize = 160 * 1024;

/// `base` changed by one to four mutations.
pub fn mutate(rng: &mut Rng, base: &Input, corpus: &[Input]) -> Input {
    let mut input = base.clone();
    let total: u32 = MUTATIONS.iter().map(|m| m.0).sum();
    for _ in 0..1 + rng.below(4) {
        let mut pick = rng.below(total as usize) as u32;
        for (weight, mutation) in MUTATIONS {
            if pick < *weight {
                mutation(rng, &mut input, corpus);
                break;
            }
            pick -= weight;
        }
    }
    if input.text.len() > LONGEST {
        let mut end = LONGEST;
        while !input.text.is_char_boundary(end) {
            end -= 1;
        }
        input.text.truncate(end);
    }
    input.sets.truncate(16);
    input
}

/// A char boundary of `text`, anywhere.
fn boundary(rng: &mut Rng, text: &str) -> usize {
    let mut at = rng.below(text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Spans of tokens as KDL sees them roughly: runs of non-space, non-punctuation
/// characters, and each punctuation character alone.
fn tokens(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let punct = matches!(c, '{' | '}' | '(' | ')' | ';' | '=' | '"');
        if c.is_whitespace() || punct {
            if let Some(s) = start.take() {
                out.push((s, i));
            }
            if punct {
                out.push((i, i + c.len_utf8()));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push((s, text.len()));
    }
    out
}

const KDL_BITS: &[&str] = &[
    "{",
    "}",
    "{ }",
    ";",
    "=",
    "\"",
    "(",
    ")",
    "(i64)",
    "/-",
    "//",
    "/*",
    "*/",
    "\\",
    "#true",
    "#false",
    "#null",
    "#inf",
    "#-inf",
    "#nan",
    "\"\"\"\n",
    "#\"raw\"#",
    "##\"",
    "\"#",
    "\n",
    "\r\n",
    " ",
    "\t",
    "0x7f",
    "0o7",
    "0b101",
    "1_000",
    "1e400",
    "-0.0",
    ".5",
    "1.",
    "+1",
    "\"\\u{10FFFF}\"",
    "\"\\u{D800}\"",
    "\"\\q\"",
    "\"a\\\n  b\"",
];

/// A name the schema knows (section, stage, layer or key), or a value it accepts.
fn schema_word(rng: &mut Rng) -> String {
    let sections: Vec<&Section> = schema::sections()
        .into_iter()
        .chain(schema::STAGES.iter().copied())
        .chain(schema::LAYERS.iter().copied())
        .chain([&schema::SPLIT])
        .collect();
    let section = *rng.pick(&sections);
    if rng.one_in(3) || section.keys.is_empty() {
        return section.name.to_string();
    }
    let key = rng.pick(section.keys);
    // A name the key takes (a choice, or a registered precision or strategy).
    let names = key.ty.names();
    match names.is_empty() || !rng.one_in(2) {
        true => key.name.to_string(),
        false => format!("\"{}\"", rng.pick(&names)),
    }
}

fn interesting_int(rng: &mut Rng) -> String {
    const INTS: &[&str] = &[
        "0",
        "-1",
        "1",
        "2",
        "255",
        "65536",
        "2147483647",
        "2147483648",
        "4294967296",
        "100000000000",
        "2000000000",
        "9007199254740993",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551619",
        "170141183460469231731687303715884105727",
        "340282366920938463463374607431768211457",
        "1e308",
        "1e309",
        "-1e-320",
        "0.0",
        "1e-45",
        "3.5",
    ];
    rng.pick(INTS).to_string()
}

fn flip_char(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    if input.text.is_empty() {
        return;
    }
    let at = boundary(rng, &input.text);
    let Some(c) = input.text[at..].chars().next() else {
        return;
    };
    let replacement = char::from_u32(u32::from(c) ^ (1 << rng.below(7))).unwrap_or('?');
    input
        .text
        .replace_range(at..at + c.len_utf8(), &replacement.to_string());
}

fn delete_range(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let a = boundary(rng, &input.text);
    let mut b = (a + 1 + rng.below(16)).min(input.text.len());
    while !input.text.is_char_boundary(b) {
        b -= 1;
    }
    input.text.replace_range(a..b.max(a), "");
}

fn insert_token(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let word = match rng.below(4) {
        0 => rng.pick(KDL_BITS).to_string(),
        1 => interesting_int(rng),
        _ => schema_word(rng),
    };
    let at = boundary(rng, &input.text);
    let spaced = if rng.one_in(2) {
        format!(" {word} ")
    } else {
        word
    };
    input.text.insert_str(at, &spaced);
}

fn delete_token(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let t = tokens(&input.text);
    if t.is_empty() {
        return;
    }
    let (a, b) = *rng.pick(&t);
    input.text.replace_range(a..b, "");
}

fn duplicate_token(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let t = tokens(&input.text);
    if t.is_empty() {
        return;
    }
    let (a, b) = *rng.pick(&t);
    let token = input.text[a..b].to_string();
    let at = t[rng.below(t.len())].0;
    input.text.insert_str(at, &format!("{token} "));
}

/// A line of another corpus file (often a whole node) put in at a line start.
fn splice_line(rng: &mut Rng, input: &mut Input, corpus: &[Input]) {
    let other = &rng.pick(corpus).text;
    let lines: Vec<&str> = other.lines().collect();
    if lines.is_empty() {
        return;
    }
    let start = rng.below(lines.len());
    let count = 1 + rng.below(3);
    let piece = lines[start..(start + count).min(lines.len())].join("\n") + "\n";
    let starts: Vec<usize> = std::iter::once(0)
        .chain(input.text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let at = *rng.pick(&starts);
    input.text.insert_str(at, &piece);
}

fn interesting_number(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let numbers: Vec<(usize, usize)> = tokens(&input.text)
        .into_iter()
        .filter(|&(a, b)| {
            let t = &input.text[a..b];
            let t = t.rsplit('=').next().unwrap_or(t);
            t.starts_with(|c: char| c.is_ascii_digit() || c == '-')
        })
        .collect();
    let value = interesting_int(rng);
    match numbers.is_empty() {
        true => {
            let at = boundary(rng, &input.text);
            input.text.insert_str(at, &format!(" {value} "));
        }
        false => {
            let (a, b) = *rng.pick(&numbers);
            let prefix_end = input.text[a..b].rfind('=').map_or(a, |i| a + i + 1);
            input.text.replace_range(prefix_end..b, &value);
        }
    }
}

fn deep_nesting(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let depth = *rng.pick(&[8usize, 40, 63, 64, 65, 200, 1500, 5000]);
    let open = *rng.pick(&["x { ", "x{", "/-x { ", "{", "/* ", "model { "]);
    let close = match open {
        "/* " => "*/",
        _ => "}",
    };
    let balanced = !rng.one_in(4);
    let text = format!(
        "{}{}",
        open.repeat(depth),
        if balanced {
            close.repeat(depth)
        } else {
            String::new()
        }
    );
    let at = boundary(rng, &input.text);
    input.text.insert_str(at, &format!("\n{text}\n"));
}

fn long_text(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let n = *rng.pick(&[300usize, 1_001, 70_000, 300_000]);
    let piece = match rng.below(5) {
        0 => format!("\"{}\"", "s".repeat(n)),
        1 => "n".repeat(n),
        2 => " ".repeat(n),
        3 => format!("// {}\n", "c".repeat(n)),
        _ => format!("bogus{} 1", "é".repeat(n / 2)),
    };
    let at = boundary(rng, &input.text);
    input.text.insert_str(at, &piece);
}

fn unicode(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    const ODD: &[&str] = &[
        "\u{feff}",
        "\u{200b}",
        "\u{202e}",
        "\u{0301}",
        "é",
        "\u{1f600}",
        "\u{85}",
        "\u{2028}",
        "\u{2029}",
        "\r",
        "\u{b}",
        "\u{c}",
        "\u{0}",
        "\u{7f}",
        "\u{a0}",
        "\u{3000}",
        "\u{fffd}",
        "ﬀ",
        "İ",
        "\u{10ffff}",
        "日本",
    ];
    let at = boundary(rng, &input.text);
    let odd = *rng.pick(ODD);
    input.text.insert_str(at, odd);
}

/// A line repeated hundreds or thousands of times (duplicate keys, many nodes).
fn repeat_line(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let lines: Vec<(usize, &str)> = std::iter::once(0)
        .chain(input.text.match_indices('\n').map(|(i, _)| i + 1))
        .filter_map(|s| input.text.get(s..).map(|rest| (s, rest)))
        .map(|(s, rest)| (s, rest.split('\n').next().unwrap_or("")))
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return;
    }
    let (at, line) = *rng.pick(&lines);
    let times = *rng.pick(&[100usize, 1000, 5000]);
    let piece = format!("{line}\n").repeat(times);
    input.text.insert_str(at, &piece);
}

/// A `--set` path from the schema (or the text's stage names), with a value.
fn set_path(rng: &mut Rng, input: &Input) -> String {
    let mut paths: Vec<String> = Vec::new();
    for s in schema::sections() {
        paths.push(s.name.to_string());
        for k in s.keys {
            paths.push(format!("{}.{}", s.name, k.name));
            if let Ty::Section(sub) = k.ty {
                for kk in sub.keys {
                    paths.push(format!("{}.{}.{}", s.name, k.name, kk.name));
                }
            }
        }
    }
    for s in schema::STAGES {
        for k in s.keys {
            paths.push(format!("{}.{}", s.name, k.name));
        }
    }
    for l in schema::LAYERS.iter().take(2) {
        paths.push(format!("model.{}", l.name));
    }
    for word in [
        "finetune",
        "test",
        "export",
        "nope",
        "",
        ".",
        "a..b",
        "data.split",
    ] {
        paths.push(word.to_string());
    }
    // A stage name from the text: the word after a stage kind.
    for line in input.text.lines() {
        let mut words = line.split_whitespace();
        if let (Some("train" | "eval" | "checkpoint"), Some(name)) = (words.next(), words.next()) {
            paths.push(format!("{}.epochs", name.trim_matches('"')));
        }
    }
    rng.pick(&paths).clone()
}

fn set_value(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 | 1 => interesting_int(rng),
        2 => rng
            .pick(&[
                "true",
                "#false",
                "\"",
                "\"\"",
                "cpu",
                "cuda:99999999999999999999",
                "16-mixed",
                "bf16-mixed",
                "ddp",
                "zero1",
                "nccl",
                "auto",
                "a,b",
                "1,2,3",
                "1,,2",
                "=",
                "",
                "é",
                "\u{0}",
                "first",
                "last",
                "-",
            ])
            .to_string(),
        3 => schema_word(rng).trim_matches('"').to_string(),
        4 => "9".repeat(1 + rng.below(400)),
        _ => format!("{}e{}", rng.below(10), rng.below(700)),
    }
}

fn add_set(rng: &mut Rng, input: &mut Input, _: &[Input]) {
    let path = set_path(rng, input);
    let value = set_value(rng);
    let set = match rng.below(12) {
        0 => path,
        1 => format!("{path}=={value}"),
        _ => format!("{path}={value}"),
    };
    input.sets.push(set);
}

fn change_set(rng: &mut Rng, input: &mut Input, corpus: &[Input]) {
    if input.sets.is_empty() {
        return add_set(rng, input, corpus);
    }
    let i = rng.below(input.sets.len());
    match rng.below(3) {
        0 => {
            input.sets.remove(i);
        }
        1 => {
            let dup = input.sets[i].clone();
            input.sets.push(dup);
        }
        _ => {
            let path = input.sets[i]
                .split_once('=')
                .map_or(input.sets[i].clone(), |(p, _)| p.to_string());
            input.sets[i] = format!("{path}={}", set_value(rng));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_keep_utf8_and_are_reproducible() {
        let base = Input {
            text: "pipeline \"é\"\nmodel { linear 10; }\n".into(),
            sets: vec![],
        };
        let corpus = vec![base.clone()];
        let run = |seed| {
            let mut rng = Rng::new(seed);
            (0..200)
                .map(|_| mutate(&mut rng, &base, &corpus))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn tokens_split_punctuation() {
        let t = tokens("a b=1 {c}");
        let words: Vec<&str> = t.iter().map(|&(a, b)| &"a b=1 {c}"[a..b]).collect();
        assert_eq!(words, ["a", "b", "=", "1", "{", "c", "}"]);
    }
}
