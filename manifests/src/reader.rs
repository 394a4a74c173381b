//! The schema-driven reader: one KDL node → checked [`Fields`].
//!
//! A node's positional arguments, properties and child nodes are matched to the keys of
//! its [`Section`] in the schema, `--set` overrides aimed at it replace what the file
//! says, and every value is checked against its key's type and range. Problems become
//! diagnostics; a bad value is dropped so the schema's default stands in for it.

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::manifest::{Column, DeviceSpec, Spanned};
use crate::overrides::Override;
use crate::schema::{Bound, Children, Key, Section, Ty, Val, MAX_CUDA_INDEX, MAX_FEATURE_INDEX};
use crate::suggest;
use kdl::{KdlNode, KdlValue};
use miette::SourceSpan;
use std::collections::BTreeMap;

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
pub(crate) enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Text(String),
    Columns(Vec<Spanned<Column>>),
    Device(DeviceSpec),
    Texts(Vec<Spanned<String>>),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Section(Fields),
}

/// The checked keys of one node, with the schema to fall back on for defaults.
#[derive(Debug, Clone)]
pub struct Fields {
    pub(crate) section: &'static Section,
    pub(crate) values: BTreeMap<&'static str, (Value, Option<SourceSpan>)>,
    /// The node, or `None` when the section was not written.
    pub(crate) span: Option<SourceSpan>,
    pub(crate) name_span: Option<SourceSpan>,
    /// The keys given with `--set`, with the `PATH=VALUE` given: they have no span in
    /// the file, and diagnostics say where they came from instead.
    pub(crate) set: BTreeMap<&'static str, String>,
    /// The keys written with a value that was refused (the error has been reported).
    pub(crate) refused: Vec<&'static str>,
}

impl Fields {
    pub(crate) fn value(&self, key: &str) -> Option<&Value> {
        self.values.get(key).map(|(v, _)| v)
    }

    pub(crate) fn span(&self, key: &str) -> Option<SourceSpan> {
        self.values.get(key).and_then(|(_, s)| *s)
    }

    pub(crate) fn default(&self, key: &str) -> Option<Val> {
        self.section.key(key).and_then(|k| k.default)
    }

    // The getters fall back on the schema's default, and on a neutral value when a
    // required key was missing (an error has been reported then; the result is not run).
    pub(crate) fn int(&self, key: &str) -> i64 {
        match (self.value(key), self.default(key)) {
            (Some(Value::Int(v)), _) => *v,
            (_, Some(Val::Int(v))) => v,
            _ => 0,
        }
    }

    pub(crate) fn opt_int(&self, key: &str) -> Option<i64> {
        match self.value(key) {
            Some(Value::Int(v)) => Some(*v),
            _ => match self.default(key) {
                Some(Val::Int(v)) => Some(v),
                _ => None,
            },
        }
    }

    pub(crate) fn float(&self, key: &str) -> f64 {
        match (self.value(key), self.default(key)) {
            (Some(Value::Float(v)), _) => *v,
            (_, Some(Val::Float(v))) => v,
            _ => 0.0,
        }
    }

    pub(crate) fn opt_float(&self, key: &str) -> Option<f64> {
        match self.value(key) {
            Some(Value::Float(v)) => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn bool(&self, key: &str) -> bool {
        match (self.value(key), self.default(key)) {
            (Some(Value::Bool(v)), _) => *v,
            (_, Some(Val::Bool(v))) => v,
            _ => false,
        }
    }

    pub(crate) fn text(&self, key: &str) -> String {
        match (self.value(key), self.default(key)) {
            (Some(Value::Text(v)), _) => v.clone(),
            (_, Some(Val::Text(v))) => v.to_string(),
            _ => String::new(),
        }
    }

    pub(crate) fn opt_text(&self, key: &str) -> Option<String> {
        match self.value(key) {
            Some(Value::Text(v)) => Some(v.clone()),
            _ => None,
        }
    }

    pub(crate) fn texts(&self, key: &str) -> Vec<Spanned<String>> {
        match self.value(key) {
            Some(Value::Texts(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    /// The columns written for `key` (none when it was not written).
    pub(crate) fn columns(&self, key: &str) -> Vec<Spanned<Column>> {
        match self.value(key) {
            Some(Value::Columns(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    pub(crate) fn ints(&self, key: &str) -> Vec<i64> {
        match self.value(key) {
            Some(Value::Ints(v)) => v.clone(),
            _ => Vec::new(),
        }
    }

    /// The numbers written for `key`, else its default as one number (else none).
    pub(crate) fn floats(&self, key: &str) -> Vec<f64> {
        match (self.value(key), self.default(key)) {
            (Some(Value::Floats(v)), _) => v.clone(),
            (_, Some(Val::Float(v))) => vec![v],
            _ => Vec::new(),
        }
    }

    pub(crate) fn section_fields(&self, key: &str) -> Option<&Fields> {
        match self.value(key) {
            Some(Value::Section(f)) => Some(f),
            _ => None,
        }
    }
}

/// A `--set` waiting to be applied, with its path resolved to schema names.
pub(crate) struct Pending<'a> {
    pub target: Vec<String>,
    pub ov: &'a Override,
    pub used: bool,
}

pub(crate) struct Reader<'a> {
    pub diags: Diagnostics,
    pub pending: Vec<Pending<'a>>,
    /// `data.split folds=K`, once the data is read: an `eval` then evaluates each fold's
    /// held-out part unless it names a split.
    pub folds: Option<u64>,
}

fn is_list(ty: &Ty) -> bool {
    matches!(
        ty,
        Ty::Texts
            | Ty::Members(_)
            | Ty::Metrics
            | Ty::Ints { .. }
            | Ty::Floats { .. }
            | Ty::Columns
            | Ty::Weights
    )
}

/// A column as written: `first`, `last`, a half-open range `"2..10"`, or a name; `None`
/// for a range that is empty or past the last index.
fn column(text: &str) -> Option<Column> {
    let index = |t: &str| {
        t.parse::<usize>()
            .ok()
            .filter(|&i| i <= MAX_FEATURE_INDEX as usize + 1)
    };
    Some(match text {
        "first" => Column::First,
        "last" => Column::Last,
        _ => match text.split_once("..") {
            Some((a, b))
                if !a.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()) =>
            {
                let (start, end) = (index(a)?, index(b)?);
                if start >= end {
                    return None;
                }
                Column::Range { start, end }
            }
            _ => Column::Name(text.to_string()),
        },
    })
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

impl<'a> Reader<'a> {
    /// Reads `node` (or nothing, for an absent section) as `section`; `path` is the
    /// resolved path used to find `--set` overrides, `display` names it in messages.
    pub(crate) fn read<'n>(
        &mut self,
        node: Option<&'n KdlNode>,
        section: &'static Section,
        path: &[String],
        display: &str,
    ) -> Fields
    where
        'a: 'n,
    {
        let mut raws: BTreeMap<&'static str, (Vec<RawEntry<'n>>, Option<SourceSpan>)> =
            BTreeMap::new();
        let mut nested: BTreeMap<&'static str, (&'n KdlNode, SourceSpan)> = BTreeMap::new();

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
                // Repeated nodes (an `optimizer`'s `group`s, `data`'s `categorical`s) are
                // read on their own (`param_groups.rs`, `categorical.rs`).
                let keys_too = matches!(section.children, Children::Keys | Children::Repeated(_));
                if keys_too {
                    for child in children.nodes() {
                        let name = child.name().value();
                        if matches!(section.children, Children::Repeated(r) if r.iter().any(|r| r.name == name))
                        {
                            continue;
                        }
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

        // `--set` overrides aimed at this node replace what the file says. The value is not
        // in the file, so it has no span: a label would point at the text it replaced.
        let mut set = BTreeMap::new();
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
                    let values = vec![RawEntry {
                        raw: Raw::Set(ov),
                        span: None,
                    }];
                    raws.insert(key.name, (values, None));
                    set.insert(key.name, ov.to_string());
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
            set,
            refused: Vec::new(),
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
                    match self.convert(section, key, entries, *span, display) {
                        Some(v) => {
                            fields.values.insert(key.name, (v, *span));
                        }
                        None => fields.refused.push(key.name),
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
        entries: &[RawEntry<'_>],
        key_span: Option<SourceSpan>,
        display: &str,
    ) -> Option<Value> {
        let what = format!("{display}.{}", key.name);
        if is_list(&key.ty) {
            let mut texts = Vec::new();
            let mut ints = Vec::new();
            let mut floats = Vec::new();
            let mut columns = Vec::new();
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
                    fn spanned<T>(value: T, span: Option<SourceSpan>) -> Spanned<T> {
                        Spanned { value, span }
                    }
                    let in_range = match (&key.ty, &v) {
                        (Ty::Texts | Ty::Members(_) | Ty::Metrics, KdlValue::String(s)) => {
                            texts.push(spanned(s.clone(), entry.span));
                            true
                        }
                        (Ty::Weights, KdlValue::String(s)) if s == "balanced" => {
                            texts.push(spanned(s.clone(), entry.span));
                            true
                        }
                        (Ty::Weights, KdlValue::Integer(_) | KdlValue::Float(_)) => {
                            let f = match v {
                                KdlValue::Integer(i) => i as f64,
                                KdlValue::Float(f) => f,
                                _ => unreachable!(),
                            };
                            let ok = f.is_finite() && f > 0.0;
                            if ok {
                                floats.push(f);
                            }
                            ok
                        }
                        (Ty::Columns, KdlValue::Integer(i)) => usize::try_from(*i)
                            .ok()
                            .filter(|&i| i <= MAX_FEATURE_INDEX as usize)
                            .map(|i| columns.push(spanned(Column::Index(i), entry.span)))
                            .is_some(),
                        (Ty::Columns, KdlValue::String(s)) => column(s)
                            .map(|c| columns.push(spanned(c, entry.span)))
                            .is_some(),
                        (Ty::Ints { max }, KdlValue::Integer(i)) => i64::try_from(*i)
                            .ok()
                            .filter(|i| (1..=*max).contains(i))
                            .map(|i| ints.push(i))
                            .is_some(),
                        (Ty::Floats { min, max }, KdlValue::Integer(_) | KdlValue::Float(_)) => {
                            let f = match v {
                                KdlValue::Integer(i) => i as f64,
                                KdlValue::Float(f) => f,
                                _ => unreachable!(),
                            };
                            let ok = f.is_finite() && in_bounds(f, *min, *max);
                            if ok {
                                floats.push(f);
                            }
                            ok
                        }
                        _ => {
                            self.bad_value(section, &what, key, entry, &show_value(&v));
                            return None;
                        }
                    };
                    if !in_range {
                        self.out_of_range_value(section, &what, key, *entry, &v);
                        return None;
                    }
                }
            }
            if let Ty::Weights = key.ty {
                if !texts.is_empty() && (texts.len() > 1 || !floats.is_empty()) {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::manifest::bad_value",
                            format!("`{what}` is \"balanced\" or numbers, not both"),
                        )
                        .label_opt(key_span, "here")
                        .help(format!(
                            "`{}` is {}",
                            key.name,
                            key.ty.describe()
                        )),
                    );
                    return None;
                }
            }
            return Some(match key.ty {
                Ty::Texts | Ty::Members(_) | Ty::Metrics => Value::Texts(texts),
                Ty::Weights if floats.is_empty() => Value::Texts(texts),
                Ty::Weights => Value::Floats(floats),
                Ty::Columns => Value::Columns(columns),
                Ty::Floats { .. } => Value::Floats(floats),
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
            (Ty::Int { min, max }, KdlValue::Integer(i)) => match i64::try_from(*i) {
                Ok(i) if (*min..=*max).contains(&i) => Some(Value::Int(i)),
                _ => {
                    self.out_of_range(section, &what, key, entry);
                    return None;
                }
            },
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
            (Ty::Choice(_) | Ty::Member(_), KdlValue::String(_) | KdlValue::Integer(_)) => {
                let text = match &value {
                    KdlValue::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let choices = key.ty.names();
                if choices.contains(&text.as_str()) {
                    Some(Value::Text(text))
                } else {
                    let d = Diagnostic::error(
                        "pipeline::manifest::unknown_value",
                        format!("`{text}` is not a valid `{what}`{}", set_suffix(entry.raw)),
                    )
                    .label_opt(entry.span, format!("expected {}", key.ty.describe()))
                    .help(suggest::help_for(&text, "value", &choices));
                    self.diags.push(d);
                    return None;
                }
            }
            (Ty::Device, KdlValue::String(s)) => match DeviceSpec::parse(s, MAX_CUDA_INDEX) {
                Ok(device) => Some(Value::Device(device)),
                Err(other) => {
                    let mut names = crate::accelerator::ACCELERATORS.names();
                    names.push("auto");
                    let d = Diagnostic::error(
                        "pipeline::manifest::unknown_value",
                        format!("`{other}` is not a device{}", set_suffix(entry.raw)),
                    )
                    .label_opt(entry.span, format!("expected {}", key.ty.describe()))
                    .help(suggest::help_for(&other, "device", &names));
                    self.diags.push(d);
                    return None;
                }
            },
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

    /// One value of a list key out of range (the entry may hold several, from `--set`).
    fn out_of_range_value(
        &mut self,
        section: &Section,
        what: &str,
        key: &Key,
        entry: RawEntry<'_>,
        value: &KdlValue,
    ) {
        self.diags.push(
            Diagnostic::error(
                "pipeline::manifest::out_of_range",
                format!(
                    "`{what}` is out of range: {}{}",
                    show_value(value),
                    set_suffix(entry.raw)
                ),
            )
            .label_opt(entry.span, format!("must be {}", key.ty.describe()))
            .help(example_help(section, key)),
        );
    }

    pub(crate) fn too_many_arguments(
        &mut self,
        section: &Section,
        span: SourceSpan,
        display: &str,
    ) {
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
        if name == "mask" && crate::layers::layer(section.name).is_some() {
            let layer = section.name;
            self.diags.push(
                Diagnostic::error(
                    "pipeline::model::no_mask",
                    format!("`{layer}` takes no padding mask"),
                )
                .label(span, format!("`{layer}` reads every step"))
                .help(format!(
                    "the layers that leave padding out are {}; before a recurrent layer, pad on the left (`data.text padding-side=\"left\"`) so that its last step is a real one",
                    crate::layers::masked_layers()
                        .iter()
                        .map(|l| format!("`{l}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
            return;
        }
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
