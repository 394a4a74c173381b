//! `pipeline explain [KEY]`: the documentation of every manifest key, from the schema
//! (type, default, allowed values) and the compatibility rules (what it interacts with).

use manifests::schema::{Key, Section, Ty, Val, LAYERS, SECTIONS, STAGES};
use manifests::suggest;
use pipeline_core::compat::RULES;

fn default_text(key: &Key) -> String {
    match key.default {
        Some(Val::Int(v)) => v.to_string(),
        Some(Val::Float(v)) => v.to_string(),
        Some(Val::Bool(v)) => format!("#{v}"),
        Some(Val::Text(v)) => format!("\"{v}\""),
        None if key.required => "required".into(),
        None => "none".into(),
    }
}

/// `text` in lines of at most 88 columns, each indented by four spaces.
fn wrapped(text: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > 84 {
            out += &format!("\n    {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line += word;
    }
    if !line.is_empty() {
        out += &format!("\n    {line}");
    }
    out
}

fn key_text(section: &Section, key: &Key) -> String {
    let path = format!("{}.{}", section.name, key.name);
    let mut out = path.clone() + &wrapped(key.doc);
    let wants = match &key.ty {
        Ty::Section(s) => format!("a `{}` block", s.name),
        ty => ty.describe(),
    };
    out += &wrapped(&format!("value: {wants}; default: {}", default_text(key)));
    if !key.only_for.is_empty() {
        out += &wrapped(&format!("only for kind: {}", key.only_for.join(", ")));
    }
    for rule in RULES.iter().filter(|r| r.keys.contains(&path.as_str())) {
        out += &wrapped(&format!("rule {}: {}", rule.code, rule.summary));
    }
    out + "\n"
}

fn section_text(section: &Section) -> String {
    let mut out = format!("{}: {}\n", section.name, section.doc);
    for key in section.keys {
        out += "\n";
        out += &key_text(section, key);
    }
    out
}

fn all_sections() -> impl Iterator<Item = &'static Section> {
    SECTIONS
        .iter()
        .copied()
        .chain(STAGES.iter().copied())
        .chain(LAYERS.iter())
}

/// Prints the documentation of `what` (a section, `section.key`, or everything).
pub fn run(what: Option<&str>) -> bool {
    let Some(what) = what else {
        let texts: Vec<String> = all_sections().map(section_text).collect();
        print!("{}", texts.join("\n"));
        return true;
    };
    let (name, key) = match what.split_once('.') {
        Some((s, k)) => (s, Some(k)),
        None => (what, None),
    };
    let Some(section) = all_sections().find(|s| s.name == name) else {
        let names: Vec<&str> = all_sections().map(|s| s.name).collect();
        eprintln!("error: `{name}` is not a section, stage kind or layer");
        eprintln!("  help: {}", suggest::help_for(name, "section", &names));
        return false;
    };
    match key {
        None => print!("{}", section_text(section)),
        Some(k) => match section.key(k) {
            Some(key) => print!("{}", key_text(section, key)),
            None => {
                eprintln!("error: `{}` has no key `{k}`", section.name);
                eprintln!(
                    "  help: {}",
                    suggest::help_for(k, "key", &section.key_names())
                );
                return false;
            }
        },
    }
    true
}
