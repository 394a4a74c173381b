//! Lowering: KDL text → typed [`Manifest`], every problem collected, none fatal but a
//! syntax error.
//!
//! The walk is driven by the schema (`schema.rs`): each node is read into [`Fields`]
//! (positional arguments, properties and child nodes, then `--set` overrides), each value
//! is checked against its key's type and range, and the typed specs are built from the
//! fields with the schema's defaults filled in. When a value is wrong, a diagnostic is
//! recorded and the default is used, so later checks (stage references, cycles) still run
//! and `pipeline check` reports everything at once.

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::manifest::*;
use crate::overrides::Override;
use crate::schema::{self, Bound, Children, Key, Section, Ty, Val};
use crate::suggest;
use kdl::{KdlDocument, KdlNode, KdlValue};
use miette::SourceSpan;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The result of lowering: the manifest (absent only on a syntax error) and every
/// diagnostic found on the way.
#[derive(Debug)]
pub struct Lowered {
    pub manifest: Option<Manifest>,
    pub diagnostics: Diagnostics,
}

/// Parses and lowers manifest `text`. `default_name` names the pipeline when the file has
/// no `pipeline` node; `base_dir` is where relative paths point from.
pub fn lower(text: &str, default_name: &str, base_dir: &Path, overrides: &[Override]) -> Lowered {
    let doc = match KdlDocument::parse(text) {
        Ok(doc) => doc,
        Err(err) => {
            let diagnostics = err
                .diagnostics
                .iter()
                .map(|d| {
                    let message = d.message.clone().unwrap_or_else(|| "invalid KDL".into());
                    Diagnostic::error(
                        "pipeline::manifest::syntax",
                        format!("syntax error: {message}"),
                    )
                    .label(d.span, d.label.clone().unwrap_or_default())
                    .help(d.help.clone().unwrap_or_else(|| {
                        "manifests are KDL v2 documents: `node arg key=value { child … }`".into()
                    }))
                })
                .collect();
            return Lowered {
                manifest: None,
                diagnostics,
            };
        }
    };
    let mut lowerer = Lowerer {
        diags: Vec::new(),
        pending: Vec::new(),
    };
    let manifest = lowerer.manifest(&doc, default_name, base_dir, overrides);
    Lowered {
        manifest: Some(manifest),
        diagnostics: lowerer.diags,
    }
}

// ---- reading nodes into fields ------------------------------------------------------

/// A value as written: a KDL value, or the text of a `--set`.
#[derive(Debug, Clone, Copy)]
enum Raw<'a> {
    Kdl(&'a KdlValue),
    Set(&'a Override),
}

#[derive(Debug, Clone, Copy)]
struct RawEntry<'a> {
    raw: Raw<'a>,
    span: Option<SourceSpan>,
}

/// A checked value of a key.
#[derive(Debug, Clone)]
enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
    Column(Column),
    Device(DeviceSpec),
    Texts(Vec<Spanned<String>>),
    Ints(Vec<i64>),
    Section(Fields),
}

/// The checked keys of one node, with the schema to fall back on for defaults.
#[derive(Debug, Clone)]
struct Fields {
    section: &'static Section,
    values: BTreeMap<&'static str, (Value, Option<SourceSpan>)>,
    /// The node, or `None` when the section was not written.
    span: Option<SourceSpan>,
    name_span: Option<SourceSpan>,
}

impl Fields {
    fn value(&self, key: &str) -> Option<&Value> {
        self.values.get(key).map(|(v, _)| v)
    }

    fn span(&self, key: &str) -> Option<SourceSpan> {
        self.values.get(key).and_then(|(_, s)| *s)
    }

    fn default(&self, key: &str) -> Option<Val> {
        self.section.key(key).and_then(|k| k.default)
    }

    // The getters fall back on the schema's default, and on a neutral value when a
    // required key was missing (an error has been reported then; the result is not run).
    fn int(&self, key: &str) -> i64 {
        match (self.value(key), self.default(key)) {
            (Some(Value::Int(v)), _) => *v,
            (_, Some(Val::Int(v))) => v,
            _ => 0,
        }
    }

    fn opt_int(&self, key: &str) -> Option<i64> {
        match self.value(key) {
            Some(Value::Int(v)) => Some(*v),
            _ => match self.default(key) {
                Some(Val::Int(v)) => Some(v),
                _ => None,
            },
        }
    }

    fn float(&self, key: &str) -> f64 {
        match (self.value(key), self.default(key)) {
            (Some(Value::Float(v)), _) => *v,
            (_, Some(Val::Float(v))) => v,
            _ => 0.0,
        }
    }

    fn bool(&self, key: &str) -> bool {
        match (self.value(key), self.default(key)) {
            (Some(Value::Bool(v)), _) => *v,
            (_, Some(Val::Bool(v))) => v,
            _ => false,
        }
    }

    fn text(&self, key: &str) -> String {
        match (self.value(key), self.default(key)) {
            (Some(Value::Text(v)), _) => v.clone(),
            (_, Some(Val::Text(v))) => v.to_string(),
            _ => String::new(),
        }
    }

    fn opt_text(&self, key: &str) -> Option<String> {
        match self.value(key) {
            Some(Value::Text(v)) => Some(v.clone()),
            _ => None,
        }
    }

    fn texts(&self, key: &str) -> Vec<Spanned<String>> {
        match self.value(key) {
            Some(Value::Texts(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    fn ints(&self, key: &str) -> Vec<i64> {
        match self.value(key) {
            Some(Value::Ints(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    fn section_fields(&self, key: &str) -> Option<&Fields> {
        match self.value(key) {
            Some(Value::Section(f)) => Some(f),
            _ => None,
        }
    }
}

/// A `--set` waiting to be applied, with its path resolved to schema names.
struct Pending<'a> {
    target: Vec<String>,
    ov: &'a Override,
    used: bool,
}

struct Lowerer<'a> {
    diags: Diagnostics,
    pending: Vec<Pending<'a>>,
}

fn is_list(ty: &Ty) -> bool {
    matches!(ty, Ty::Texts | Ty::Ints)
}

fn show_val(v: Val) -> String {
    match v {
        Val::Int(i) => i.to_string(),
        Val::Float(f) => f.to_string(),
        Val::Bool(b) => format!("#{b}"),
        Val::Text(t) => format!("\"{t}\""),
    }
}

/// A KDL value as a user would write it (strings quoted).
fn show_value(v: &KdlValue) -> String {
    match v {
        KdlValue::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn show_raw(raw: Raw<'_>) -> String {
    match raw {
        Raw::Kdl(v) => show_value(v),
        Raw::Set(ov) => ov.value.clone(),
    }
}

/// The KDL value that the text of a `--set` stands for.
fn parse_set_value(text: &str) -> KdlValue {
    if let Ok(i) = text.parse::<i128>() {
        return KdlValue::Integer(i);
    }
    if let Ok(f) = text.parse::<f64>() {
        if f.is_finite() {
            return KdlValue::Float(f);
        }
    }
    match text {
        "true" | "#true" => KdlValue::Bool(true),
        "false" | "#false" => KdlValue::Bool(false),
        _ => {
            let unquoted = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(text);
            KdlValue::String(unquoted.to_string())
        }
    }
}

fn in_bounds(v: f64, min: Bound, max: Bound) -> bool {
    let lo = match min {
        Bound::None => true,
        Bound::Inclusive(b) => v >= b,
        Bound::Exclusive(b) => v > b,
    };
    let hi = match max {
        Bound::None => true,
        Bound::Inclusive(b) => v <= b,
        Bound::Exclusive(b) => v < b,
    };
    lo && hi
}

impl<'a> Lowerer<'a> {
    /// Reads `node` (or nothing, for an absent section) as `section`; `path` is the
    /// resolved path used to find `--set` overrides, `display` names it in messages.
    fn read(
        &mut self,
        node: Option<&'a KdlNode>,
        section: &'static Section,
        path: &[String],
        display: &str,
    ) -> Fields {
        let mut raws: BTreeMap<&'static str, (Vec<RawEntry<'a>>, Option<SourceSpan>)> =
            BTreeMap::new();
        let mut nested: BTreeMap<&'static str, (&'a KdlNode, SourceSpan)> = BTreeMap::new();

        if let Some(node) = node {
            let mut positional = 0;
            for entry in node.entries() {
                let raw = RawEntry {
                    raw: Raw::Kdl(entry.value()),
                    span: Some(entry.span()),
                };
                match entry.name() {
                    None => {
                        let key = match section.args.get(positional) {
                            Some(k) => Some(*k),
                            None => section
                                .args
                                .last()
                                .filter(|k| section.key(k).is_some_and(|k| is_list(&k.ty)))
                                .copied(),
                        };
                        positional += 1;
                        match key {
                            Some(k) => {
                                let key = section.key(k).expect("schema args are keys");
                                let slot = raws
                                    .entry(key.name)
                                    .or_insert((Vec::new(), Some(entry.span())));
                                slot.0.push(raw);
                            }
                            None => self.too_many_arguments(section, entry.span(), display),
                        }
                    }
                    Some(name) => match section.key(name.value()) {
                        Some(key) => {
                            if let Some((_, first)) = raws.get(key.name) {
                                self.duplicate_key(display, key.name, *first, Some(entry.span()));
                            } else {
                                raws.insert(key.name, (vec![raw], Some(entry.span())));
                            }
                        }
                        None => self.unknown_key(section, display, name.value(), name.span()),
                    },
                }
            }

            if let Some(children) = node.children() {
                if section.children == Children::Keys {
                    for child in children.nodes() {
                        let name = child.name().value();
                        let Some(key) = section.key(name) else {
                            self.unknown_key(section, display, name, child.name().span());
                            continue;
                        };
                        if raws.contains_key(key.name) || nested.contains_key(key.name) {
                            let first = raws
                                .get(key.name)
                                .and_then(|r| r.1)
                                .or(nested.get(key.name).map(|n| n.1));
                            self.duplicate_key(display, key.name, first, Some(child.span()));
                            continue;
                        }
                        if let Ty::Section(_) = key.ty {
                            nested.insert(key.name, (child, child.span()));
                            continue;
                        }
                        let mut values = Vec::new();
                        for entry in child.entries() {
                            if let Some(prop) = entry.name() {
                                self.diags.push(
                                    Diagnostic::error(
                                        "pipeline::manifest::unexpected_property",
                                        format!("`{display}.{name}` takes a value, not properties"),
                                    )
                                    .label(entry.span(), "not allowed here")
                                    .help(format!(
                                        "write `{name} <value>`; `{}` is not a setting of `{name}`",
                                        prop.value()
                                    )),
                                );
                            } else {
                                values.push(RawEntry {
                                    raw: Raw::Kdl(entry.value()),
                                    span: Some(entry.span()),
                                });
                            }
                        }
                        if child.children().is_some() {
                            self.diags.push(
                                Diagnostic::error(
                                    "pipeline::manifest::unexpected_block",
                                    format!("`{display}.{name}` is a value, not a block"),
                                )
                                .label(child.span(), "remove the `{ … }` block")
                                .help(format!("write `{name} <value>`")),
                            );
                        }
                        // The key's span runs from its name to its last value (the node's own span
                        // takes in the whitespace after it).
                        let start = child.name().span().offset();
                        let end = child
                            .entries()
                            .last()
                            .map_or(start + child.name().span().len(), |e| {
                                e.span().offset() + e.span().len()
                            });
                        raws.insert(key.name, (values, Some((start, end - start).into())));
                    }
                }
            }
        }

        // `--set` overrides aimed at this node replace what the file says.
        let depth = path.len();
        for i in 0..self.pending.len() {
            let p = &self.pending[i];
            if p.used || p.target.len() != depth + 1 || p.target[..depth] != *path {
                continue;
            }
            let ov = p.ov;
            let name = p.target[depth].clone();
            self.pending[i].used = true;
            match section.key(&name) {
                Some(key) if !matches!(key.ty, Ty::Section(_)) => {
                    let span = raws.get(key.name).and_then(|r| r.1);
                    let values = vec![RawEntry {
                        raw: Raw::Set(ov),
                        span,
                    }];
                    raws.insert(key.name, (values, span));
                }
                Some(key) => self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unknown_override",
                        format!(
                            "--set {ov}: `{display}.{}` is a block; set one of its keys",
                            key.name
                        ),
                    )
                    .help(match key.ty {
                        Ty::Section(s) => suggest::help_for("", "key", &s.key_names()),
                        _ => String::new(),
                    }),
                ),
                None => self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unknown_override",
                        format!("--set {ov}: `{display}` has no key `{name}`"),
                    )
                    .help(suggest::help_for(
                        &name,
                        "key",
                        &section.key_names(),
                    )),
                ),
            }
        }

        let mut fields = Fields {
            section,
            values: BTreeMap::new(),
            span: node.map(KdlNode::span),
            name_span: node.map(|n| n.name().span()),
        };

        for key in section.keys {
            if let Ty::Section(sub) = key.ty {
                let child_path: Vec<String> =
                    path.iter().cloned().chain([key.name.to_string()]).collect();
                let targeted = self
                    .pending
                    .iter()
                    .any(|p| !p.used && p.target.starts_with(&child_path));
                let child = nested.get(key.name).map(|n| n.0);
                if child.is_some() || targeted {
                    let sub_fields =
                        self.read(child, sub, &child_path, &format!("{display}.{}", key.name));
                    let span = sub_fields.span;
                    fields
                        .values
                        .insert(key.name, (Value::Section(sub_fields), span));
                }
                continue;
            }
            match raws.get(key.name) {
                Some((entries, span)) => {
                    if let Some(v) = self.convert(section, key, entries, *span, display) {
                        fields.values.insert(key.name, (v, *span));
                    }
                }
                None if key.required && node.is_some() => {
                    let mut d = Diagnostic::error(
                        "pipeline::manifest::missing_key",
                        format!("`{display}` needs `{}`", key.name),
                    )
                    .help(format!("add `{} …`: {}", key.name, key.doc));
                    if let Some(node) = node {
                        d = d.label(
                            node.name().span(),
                            format!("`{}` is missing here", key.name),
                        );
                    }
                    self.diags.push(d);
                }
                None => {}
            }
        }

        // Keys that only mean something for some kinds (e.g. `nesterov` for sgd).
        if let Some(Value::Text(kind)) = fields.value("kind") {
            for key in section.keys.iter().filter(|k| !k.only_for.is_empty()) {
                if fields.values.contains_key(key.name) && !key.only_for.contains(&kind.as_str()) {
                    let d = Diagnostic::warning(
                        "pipeline::manifest::ignored_key",
                        format!("`{display}.{}` has no effect with `{kind}`", key.name),
                    )
                    .label_opt(fields.span(key.name), "ignored")
                    .help(format!(
                        "`{}` applies to: {}; remove it",
                        key.name,
                        key.only_for.join(", ")
                    ));
                    self.diags.push(d);
                }
            }
        }
        fields
    }

    /// Checks the raw entries of one key against its type.
    fn convert(
        &mut self,
        section: &'static Section,
        key: &'static Key,
        entries: &[RawEntry<'a>],
        key_span: Option<SourceSpan>,
        display: &str,
    ) -> Option<Value> {
        let what = format!("{display}.{}", key.name);
        if is_list(&key.ty) {
            let mut texts = Vec::new();
            let mut ints = Vec::new();
            if entries.is_empty() {
                self.missing_value(&what, key, key_span);
                return None;
            }
            for entry in entries {
                let values: Vec<KdlValue> = match entry.raw {
                    Raw::Kdl(v) => vec![v.clone()],
                    Raw::Set(ov) => ov
                        .value
                        .split(',')
                        .map(|s| parse_set_value(s.trim()))
                        .collect(),
                };
                for v in values {
                    match (&key.ty, &v) {
                        (Ty::Texts, KdlValue::String(s)) => texts.push(Spanned {
                            value: s.clone(),
                            span: entry.span,
                        }),
                        (Ty::Ints, KdlValue::Integer(i)) if *i >= 1 && *i <= i64::MAX as i128 => {
                            ints.push(*i as i64)
                        }
                        _ => {
                            self.bad_value(section, &what, key, entry, &show_value(&v));
                            return None;
                        }
                    }
                }
            }
            return Some(match key.ty {
                Ty::Texts => Value::Texts(texts),
                _ => Value::Ints(ints),
            });
        }

        let entry = match entries {
            [one] => *one,
            [] => {
                self.missing_value(&what, key, key_span);
                return None;
            }
            [_, extra, ..] => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::too_many_values",
                        format!("`{what}` takes one value"),
                    )
                    .label_opt(extra.span, "unexpected value")
                    .help(format!("`{}` is {}", key.name, key.ty.describe())),
                );
                return None;
            }
        };
        let value = match entry.raw {
            Raw::Kdl(v) => v.clone(),
            Raw::Set(ov) => parse_set_value(&ov.value),
        };
        let converted = match (&key.ty, &value) {
            (Ty::Int { min, max }, KdlValue::Integer(i)) => {
                let ok = *i >= *min as i128 && max.is_none_or(|m| *i <= m as i128);
                if !ok {
                    self.out_of_range(section, &what, key, entry);
                    return None;
                }
                Some(Value::Int(*i as i64))
            }
            (Ty::Float { min, max }, KdlValue::Integer(_) | KdlValue::Float(_)) => {
                let f = match value {
                    KdlValue::Integer(i) => i as f64,
                    KdlValue::Float(f) => f,
                    _ => unreachable!(),
                };
                if !f.is_finite() || !in_bounds(f, *min, *max) {
                    self.out_of_range(section, &what, key, entry);
                    return None;
                }
                Some(Value::Float(f))
            }
            (Ty::Bool, KdlValue::Bool(b)) => Some(Value::Bool(*b)),
            (Ty::Text | Ty::Path, KdlValue::String(s)) => Some(Value::Text(s.clone())),
            (Ty::Choice(choices), KdlValue::String(_) | KdlValue::Integer(_)) => {
                let text = match &value {
                    KdlValue::String(s) => s.clone(),
                    other => other.to_string(),
                };
                if choices.contains(&text.as_str()) {
                    Some(Value::Text(text))
                } else {
                    let d = Diagnostic::error(
                        "pipeline::manifest::unknown_value",
                        format!("`{text}` is not a valid `{what}`{}", set_suffix(entry.raw)),
                    )
                    .label_opt(entry.span, format!("expected {}", key.ty.describe()))
                    .help(suggest::help_for(&text, "value", choices));
                    self.diags.push(d);
                    return None;
                }
            }
            (Ty::Device, KdlValue::String(s)) => match s.as_str() {
                "auto" => Some(Value::Device(DeviceSpec::Auto)),
                "cpu" => Some(Value::Device(DeviceSpec::Cpu)),
                "cuda" => Some(Value::Device(DeviceSpec::Cuda(0))),
                other => match other
                    .strip_prefix("cuda:")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    Some(n) => Some(Value::Device(DeviceSpec::Cuda(n))),
                    None => {
                        let d = Diagnostic::error(
                            "pipeline::manifest::unknown_value",
                            format!("`{other}` is not a device{}", set_suffix(entry.raw)),
                        )
                        .label_opt(entry.span, format!("expected {}", key.ty.describe()))
                        .help(suggest::help_for(
                            other,
                            "device",
                            &["cpu", "cuda", "auto"],
                        ));
                        self.diags.push(d);
                        return None;
                    }
                },
            },
            (Ty::Column, KdlValue::Integer(i)) if *i >= 0 => {
                Some(Value::Column(Column::Index(*i as usize)))
            }
            (Ty::Column, KdlValue::String(s)) => Some(Value::Column(match s.as_str() {
                "first" => Column::First,
                "last" => Column::Last,
                name => Column::Name(name.to_string()),
            })),
            _ => None,
        };
        if converted.is_none() {
            self.bad_value(section, &what, key, &entry, &show_raw(entry.raw));
        }
        converted
    }

    fn missing_value(&mut self, what: &str, key: &Key, span: Option<SourceSpan>) {
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::missing_value",
                format!("`{what}` has no value"),
            )
            .label_opt(span, "a value is missing")
            .help(format!("`{}` takes {}", key.name, key.ty.describe())),
        );
    }

    fn bad_value(
        &mut self,
        section: &Section,
        what: &str,
        key: &Key,
        entry: &RawEntry<'_>,
        found: &str,
    ) {
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::wrong_type",
                format!(
                    "`{what}` must be {}, found {found}{}",
                    key.ty.describe(),
                    set_suffix(entry.raw)
                ),
            )
            .label_opt(entry.span, format!("expected {}", key.ty.describe()))
            .help(example_help(section, key)),
        );
    }

    fn out_of_range(&mut self, section: &Section, what: &str, key: &Key, entry: RawEntry<'_>) {
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::out_of_range",
                format!(
                    "`{what}` is out of range: {}{}",
                    show_raw(entry.raw),
                    set_suffix(entry.raw)
                ),
            )
            .label_opt(entry.span, format!("must be {}", key.ty.describe()))
            .help(example_help(section, key)),
        );
    }

    fn too_many_arguments(&mut self, section: &Section, span: SourceSpan, display: &str) {
        let help = if section.args.is_empty() {
            format!("`{}` takes no arguments", section.name)
        } else {
            format!(
                "`{}` takes {} argument(s): {}",
                section.name,
                section.args.len(),
                section.args.join(", ")
            )
        };
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::too_many_arguments",
                format!("too many arguments for `{display}`"),
            )
            .label(span, "unexpected argument")
            .help(help),
        );
    }

    fn unknown_key(&mut self, section: &Section, display: &str, name: &str, span: SourceSpan) {
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::unknown_key",
                format!("unknown key `{name}` in `{display}`"),
            )
            .label(span, format!("not a key of `{}`", section.name))
            .help(suggest::help_for(name, "key", &section.key_names())),
        );
    }

    fn duplicate_key(
        &mut self,
        display: &str,
        key: &str,
        first: Option<SourceSpan>,
        second: Option<SourceSpan>,
    ) {
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::duplicate_key",
                format!("`{display}.{key}` is given twice"),
            )
            .label_opt(second, "given again here")
            .label_opt(first, "first given here")
            .help("keep one of them"),
        );
    }
}

fn set_suffix(raw: Raw<'_>) -> String {
    match raw {
        Raw::Set(ov) => format!(" (from --set {ov})"),
        Raw::Kdl(_) => String::new(),
    }
}

fn example_help(section: &Section, key: &Key) -> String {
    let written = if section.args.first() == Some(&key.name) {
        section.name
    } else {
        key.name
    };
    match key.default {
        Some(v) => format!(
            "`{}` takes {}, for example `{written} {}`",
            key.name,
            key.ty.describe(),
            show_val(v)
        ),
        None => format!("`{}` takes {}", key.name, key.ty.describe()),
    }
}

// ---- the whole manifest -------------------------------------------------------------

fn stage_name_of(node: &KdlNode) -> String {
    let kind = node.name().value();
    node.entries()
        .iter()
        .find(|e| e.name().is_none())
        .or_else(|| node.entry("name"))
        .and_then(|e| e.value().as_string())
        .or_else(|| {
            node.children()
                .and_then(|c| c.get_arg("name"))
                .and_then(KdlValue::as_string)
        })
        .unwrap_or(kind)
        .to_string()
}

fn valid_stage_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl<'a> Lowerer<'a> {
    fn manifest(
        &mut self,
        doc: &'a KdlDocument,
        default_name: &str,
        base_dir: &Path,
        overrides: &'a [Override],
    ) -> Manifest {
        let mut sections: BTreeMap<&'static str, &'a KdlNode> = BTreeMap::new();
        let mut stage_nodes: Vec<(&'static Section, &'a KdlNode)> = Vec::new();
        for node in doc.nodes() {
            let name = node.name().value();
            if let Some(section) = schema::SECTIONS.iter().find(|s| s.name == name) {
                if let Some(first) = sections.get(section.name) {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::duplicate_section",
                            format!("`{name}` is given twice"),
                        )
                        .label(node.name().span(), "given again here")
                        .label(first.name().span(), "first given here")
                        .help(format!("a manifest has one `{name}`; merge the two")),
                    );
                } else {
                    sections.insert(section.name, node);
                }
            } else if let Some(stage) = schema::STAGES.iter().find(|s| s.name == name) {
                stage_nodes.push((stage, node));
            } else {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unknown_node",
                        format!("unknown node `{name}`"),
                    )
                    .label(node.name().span(), "not a section or stage kind")
                    .help(suggest::help_for(
                        name,
                        "node",
                        &schema::top_level_names(),
                    )),
                );
            }
        }

        // Resolve every `--set` path to the schema names it aims at.
        let stage_names: Vec<String> = stage_nodes.iter().map(|(_, n)| stage_name_of(n)).collect();
        for ov in overrides {
            let first = ov.path[0].as_str();
            let mut target: Vec<String> = if let Some(section) =
                schema::SECTIONS.iter().find(|s| s.name == first)
            {
                if section.children == Children::Layers {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::unknown_override",
                            format!("--set {ov}: model layers cannot be set from the command line"),
                        )
                        .help("edit the `model` block in the manifest"),
                    );
                    continue;
                }
                let mut t = ov.path.clone();
                if t.len() == 1 {
                    match section.args.first() {
                        Some(arg) => t.push(arg.to_string()),
                        None => {
                            self.diags.push(
                                Diagnostic::error(
                                    "pipeline::manifest::unknown_override",
                                    format!(
                                        "--set {ov}: `{first}` is a block; set one of its keys"
                                    ),
                                )
                                .help(suggest::help_for(
                                    "",
                                    "key",
                                    &section.key_names(),
                                )),
                            );
                            continue;
                        }
                    }
                }
                t
            } else {
                let by_name = stage_names.iter().position(|n| n == first);
                let by_kind: Vec<usize> = stage_nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, (s, _))| s.name == first)
                    .map(|(i, _)| i)
                    .collect();
                let index = match (by_name, by_kind.as_slice()) {
                    (Some(i), _) => i,
                    (None, [i]) => *i,
                    (None, []) => {
                        let mut candidates: Vec<&str> =
                            schema::SECTIONS.iter().map(|s| s.name).collect();
                        candidates.extend(stage_names.iter().map(String::as_str));
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::manifest::unknown_override",
                                format!("--set {ov}: there is no section or stage `{first}`"),
                            )
                            .help(suggest::help_for(
                                first,
                                "section or stage",
                                &candidates,
                            )),
                        );
                        continue;
                    }
                    (None, _) => {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::manifest::unknown_override",
                                format!("--set {ov}: more than one `{first}` stage"),
                            )
                            .help(format!(
                                "name the stage instead: {}",
                                by_kind
                                    .iter()
                                    .map(|i| format!("`{}`", stage_names[*i]))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                        );
                        continue;
                    }
                };
                if ov.path.len() == 1 {
                    self.diags.push(Diagnostic::error(
                        "pipeline::manifest::unknown_override",
                        format!("--set {ov}: name a key of the stage, e.g. `{first}.batch-size`"),
                    ));
                    continue;
                }
                let mut t = vec![format!("#stage{index}")];
                t.extend(ov.path[1..].iter().cloned());
                t
            };
            target.shrink_to_fit();
            self.pending.push(Pending {
                target,
                ov,
                used: false,
            });
        }

        let read_section = |this: &mut Self, section: &'static Section| {
            this.read(
                sections.get(section.name).copied(),
                section,
                &[section.name.to_string()],
                section.name,
            )
        };
        let pipeline = read_section(self, &schema::PIPELINE);
        let seed_f = read_section(self, &schema::SEED);
        let data_f = read_section(self, &schema::DATA);
        let loss_f = read_section(self, &schema::LOSS);
        let opt_f = read_section(self, &schema::OPTIMIZER);
        let sched_f = read_section(self, &schema::SCHEDULE);
        let acc_f = read_section(self, &schema::ACCELERATOR);

        for (section, required) in [
            ("data", "data { source \"…\" }"),
            ("model", "model { linear 10 }"),
            ("loss", "loss \"cross-entropy\""),
            ("optimizer", "optimizer \"adam\" lr=1e-3"),
        ] {
            if !sections.contains_key(section) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::missing_section",
                        format!("the manifest has no `{section}`"),
                    )
                    .help(format!("add `{required}`")),
                );
            }
        }

        let name = if pipeline.span.is_some() {
            pipeline.text("name")
        } else {
            default_name.to_string()
        };
        let seed = seed_f.int("value") as u64;
        let data = self.data(&data_f, seed);
        let model = self.model(sections.get("model").copied());
        let loss = LossSpec {
            kind: match loss_f.text("kind").as_str() {
                "mse" => LossKind::Mse,
                "bce-with-logits" => LossKind::BceWithLogits,
                "nll" => LossKind::Nll,
                _ => LossKind::CrossEntropy,
            },
            label_smoothing: loss_f.float("label-smoothing"),
            span: loss_f.span,
        };
        let optimizer = self.optimizer(&opt_f);
        let schedule = ScheduleSpec {
            kind: match sched_f.text("kind").as_str() {
                "step" => ScheduleKind::Step {
                    step_size: sched_f.int("step-size") as u64,
                    gamma: sched_f.float("gamma"),
                },
                "cosine" => ScheduleKind::Cosine {
                    min_lr: sched_f.float("min-lr"),
                },
                _ => ScheduleKind::Constant,
            },
            warmup_epochs: sched_f.int("warmup-epochs") as u64,
        };
        let accelerator = AcceleratorSpec {
            device: match acc_f.value("device") {
                Some(Value::Device(d)) => *d,
                _ => DeviceSpec::Auto,
            },
            precision: Precision::Fp32,
            threads: acc_f.opt_int("threads").map(|t| t as u64),
            device_span: acc_f.span("device"),
        };

        let mut stages = Vec::new();
        for (i, (section, node)) in stage_nodes.iter().enumerate() {
            let f = self.read(
                Some(node),
                section,
                &[format!("#stage{i}")],
                &stage_names[i],
            );
            stages.push(self.stage(&f, section));
        }

        for p in &self.pending {
            if !p.used {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unknown_override",
                        format!("--set {}: no such key", p.ov),
                    )
                    .help("paths look like `optimizer.lr`, `data.split.train` or `<stage>.epochs`"),
                );
            }
        }

        Manifest {
            name,
            seed,
            data,
            model,
            loss,
            optimizer,
            schedule,
            accelerator,
            stages,
            base_dir: base_dir.to_path_buf(),
        }
    }

    fn data(&mut self, f: &Fields, seed: u64) -> DataSpec {
        let source = PathBuf::from(f.text("source"));
        let source_span = f.span("source");
        let format = match f.text("format").as_str() {
            "csv" => Some(DataFormat::Csv),
            "npy" => Some(DataFormat::Npy),
            "npz" => Some(DataFormat::Npz),
            "safetensors" => Some(DataFormat::Safetensors),
            _ => {
                let name = source.to_string_lossy().to_ascii_lowercase();
                if name.ends_with(".csv") || name.ends_with(".csv.gz") {
                    Some(DataFormat::Csv)
                } else if name.ends_with(".npy") {
                    Some(DataFormat::Npy)
                } else if name.ends_with(".npz") {
                    Some(DataFormat::Npz)
                } else if name.ends_with(".safetensors") {
                    Some(DataFormat::Safetensors)
                } else {
                    None
                }
            }
        };
        let format = match format {
            Some(format) => format,
            None => {
                if f.value("source").is_some() {
                    self.diags.push(
                        Diagnostic::error("pipeline::data::unknown_format", format!("cannot tell the format of `{}` from its name", source.display()))
                            .label_opt(source_span, "unknown extension")
                            .help("name the file .csv, .csv.gz, .npy, .npz or .safetensors, or add `format \"csv\"`"),
                    );
                }
                DataFormat::Csv
            }
        };
        let split_f = f.section_fields("split");
        let get = |key: &str, fallback: f64| split_f.map_or(fallback, |s| s.float(key));
        let split = SplitSpec {
            train: get("train", 0.8),
            val: get("val", 0.0),
            test: get("test", 0.2),
            seed: split_f
                .and_then(|s| s.opt_int("seed"))
                .map_or(seed, |s| s as u64),
        };
        let sum = split.train + split.val + split.test;
        if (sum - 1.0).abs() > 1e-6 || split.train <= 0.0 {
            let message = if split.train <= 0.0 {
                "the training split is empty".to_string()
            } else {
                format!(
                    "the split fractions add up to {}, not 1",
                    (sum * 1e6).round() / 1e6
                )
            };
            self.diags.push(
                Diagnostic::error("pipeline::data::bad_split", message)
                    .label_opt(split_f.and_then(|s| s.span), "train + val + test must be 1")
                    .help("for example `split train=0.8 val=0.1 test=0.1`"),
            );
        }
        DataSpec {
            source: Spanned {
                value: source,
                span: source_span,
            },
            format,
            header: f.bool("header"),
            label: match f.value("label") {
                Some(Value::Column(c)) => c.clone(),
                _ => Column::Last,
            },
            features: f.text("features"),
            labels: f.text("labels"),
            scale: match f.text("scale").as_str() {
                "standard" => Scale::Standard,
                "minmax" => Scale::MinMax,
                _ => Scale::None,
            },
            split,
            span: f.span,
        }
    }

    fn model(&mut self, node: Option<&'a KdlNode>) -> ModelSpec {
        let mut layers = Vec::new();
        let Some(node) = node else {
            return ModelSpec { layers, span: None };
        };
        for entry in node.entries() {
            self.too_many_arguments(&schema::MODEL, entry.span(), "model");
        }
        for (i, child) in node
            .children()
            .map(|c| c.nodes())
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let name = child.name().value();
            let Some(section) = schema::layer(name) else {
                let names: Vec<&str> = schema::LAYERS.iter().map(|l| l.name).collect();
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::model::unknown_layer",
                        format!("unknown layer `{name}`"),
                    )
                    .label(child.name().span(), "not a layer")
                    .help(suggest::help_for(name, "layer", &names)),
                );
                continue;
            };
            if child.children().is_some() {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::manifest::unexpected_block",
                        format!("layer `{name}` takes no block"),
                    )
                    .label(child.span(), "write its settings as `key=value`")
                    .help(format!(
                        "for example `{name} {}`",
                        section
                            .keys
                            .first()
                            .map_or(String::new(), |k| format!("{}=…", k.name))
                    )),
                );
            }
            let f = self.read(
                Some(child),
                section,
                &["model".into(), i.to_string()],
                &format!("model.{name}"),
            );
            let stride = |f: &Fields| f.opt_int("stride").unwrap_or_else(|| f.int("kernel"));
            let layer = match name {
                "linear" => Layer::Linear {
                    out: f.int("out"),
                    bias: f.bool("bias"),
                },
                "conv2d" => Layer::Conv2d {
                    out: f.int("out"),
                    kernel: f.int("kernel"),
                    stride: f.int("stride"),
                    padding: f.int("padding"),
                    bias: f.bool("bias"),
                },
                "max-pool" => Layer::MaxPool {
                    kernel: f.int("kernel"),
                    stride: stride(&f),
                    padding: f.int("padding"),
                },
                "avg-pool" => Layer::AvgPool {
                    kernel: f.int("kernel"),
                    stride: stride(&f),
                    padding: f.int("padding"),
                },
                "flatten" => Layer::Flatten,
                "reshape" => Layer::Reshape {
                    shape: f.ints("shape"),
                },
                "relu" => Layer::Relu,
                "gelu" => Layer::Gelu,
                "tanh" => Layer::Tanh,
                "sigmoid" => Layer::Sigmoid,
                "log-softmax" => Layer::LogSoftmax,
                "dropout" => Layer::Dropout { p: f.float("p") },
                "batch-norm" => Layer::BatchNorm {
                    eps: f.float("eps"),
                    momentum: f.float("momentum"),
                },
                "layer-norm" => Layer::LayerNorm {
                    eps: f.float("eps"),
                },
                "embedding" => Layer::Embedding {
                    count: f.int("count"),
                    dim: f.int("dim"),
                },
                other => unreachable!("layer `{other}` is in the schema but not lowered"),
            };
            layers.push(LayerSpec {
                layer,
                span: Some(child.span()),
            });
        }
        if layers.is_empty() && node.children().is_none_or(|c| c.nodes().is_empty()) {
            self.diags.push(
                Diagnostic::error("pipeline::model::empty", "the model has no layers")
                    .label(node.name().span(), "empty model")
                    .help("add layers, for example `model { linear 64; relu; linear 10 }`"),
            );
        }
        ModelSpec {
            layers,
            span: Some(node.span()),
        }
    }

    fn optimizer(&mut self, f: &Fields) -> OptimizerSpec {
        let spec = OptimizerSpec {
            kind: match f.text("kind").as_str() {
                "sgd" => OptimizerKind::Sgd,
                "adamw" => OptimizerKind::AdamW,
                "rmsprop" => OptimizerKind::RmsProp,
                _ => OptimizerKind::Adam,
            },
            lr: f.float("lr"),
            weight_decay: f.float("weight-decay"),
            momentum: f.float("momentum"),
            nesterov: f.bool("nesterov"),
            beta1: f.float("beta1"),
            beta2: f.float("beta2"),
            eps: f.float("eps"),
            alpha: f.float("alpha"),
            centered: f.bool("centered"),
        };
        if spec.kind == OptimizerKind::Sgd && spec.nesterov && spec.momentum <= 0.0 {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::optimizer::nesterov_without_momentum",
                    "Nesterov momentum needs a momentum above 0",
                )
                .label_opt(f.span("nesterov"), "nesterov is on")
                .label_opt(f.span("momentum"), "momentum is 0")
                .help("add `momentum=0.9`, or remove `nesterov=#true`"),
            );
        }
        spec
    }

    fn stage(&mut self, f: &Fields, section: &'static Section) -> StageSpec {
        let name = f.text("name");
        let name_span = f.span("name").or(f.name_span);
        if !valid_stage_name(&name) {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::stage::bad_name",
                    format!("`{name}` is not a valid stage name"),
                )
                .label_opt(name_span, "invalid name")
                .help("use letters, digits, `-` and `_`, e.g. `fine-tune`"),
            );
        }
        let config = match section.name {
            "train" => StageConfig::Train(TrainSpec {
                epochs: f.int("epochs") as u64,
                batch_size: f.int("batch-size") as u64,
                shuffle: f.bool("shuffle"),
                drop_last: f.bool("drop-last"),
            }),
            "eval" => StageConfig::Eval(EvalSpec {
                split: Spanned {
                    value: match f.text("split").as_str() {
                        "train" => SplitName::Train,
                        "val" => SplitName::Val,
                        _ => SplitName::Test,
                    },
                    span: f.span("split"),
                },
                batch_size: f.int("batch-size") as u64,
            }),
            _ => StageConfig::Checkpoint(CheckpointSpec {
                path: f.opt_text("path").map(PathBuf::from),
            }),
        };
        StageSpec {
            name: Spanned {
                value: name,
                span: name_span,
            },
            needs: f.texts("needs"),
            config,
            span: f.span,
        }
    }
}
