//! `pipeline explain [KEY]`: the documentation of every manifest key, from the schema
//! (type, default, allowed values) and the compatibility rules (what it interacts with).
//! Paths follow the manifest: `accelerator.precision`, `data.split.seed`, `model` (every
//! layer), `model.linear`, `model.conv2d.kernel`.

use manifests::schema::{
    self, Children, Key, Section, Ty, Val, BLOCK, BRANCH, INPUT, LAYERS, METRIC, MODEL, SPLIT,
    STAGES, STRUCTURES,
};
use manifests::suggest;
use manifests::transforms::{transform, TRANSFORMS};
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

/// The documentation of `key` of a section at `path` (`accelerator`, `data.split`,
/// `model.linear`).
fn key_text(path: &str, key: &Key) -> String {
    let path = format!("{path}.{}", key.name);
    let mut out = path.clone() + &wrapped(key.doc);
    let wants = match &key.ty {
        Ty::Section(s) => format!("a `{}` block (`pipeline explain {path}`)", s.name),
        ty => ty.describe(),
    };
    out += &wrapped(&format!("value: {wants}; default: {}", default_text(key)));
    match key.ty {
        Ty::Member(family) | Ty::Members(family) => {
            let members = family.members();
            if members.is_empty() {
                out += &wrapped("this program registers none");
            }
            for (name, doc) in members {
                out += &wrapped(&format!("`{name}`: {doc}"));
            }
        }
        // The built-in metrics and those the program registered (pipeline_core's).
        Ty::Metrics => {
            for (names, doc) in pipeline_core::metrics::members() {
                out += &wrapped(&format!("{names}: {doc}"));
            }
        }
        _ => {}
    }
    if !key.only_for.is_empty() {
        out += &wrapped(&format!("only for kind: {}", key.only_for.join(", ")));
    }
    for rule in RULES.iter().filter(|r| r.keys.contains(&path.as_str())) {
        out += &wrapped(&format!("rule {}: {}", rule.code, rule.summary));
    }
    out + "\n"
}

/// Every node a `model` may hold: the layers, then the structures.
fn model_nodes() -> impl Iterator<Item = &'static Section> {
    LAYERS.iter().chain(STRUCTURES).copied()
}

/// The documentation of a section at `path`, and of each of its keys; `model` also
/// documents every layer and structure, `parallel` its `branch`.
fn section_text(section: &Section, path: &str) -> String {
    let mut out = format!("{path}: {}\n", section.doc);
    for key in section.keys {
        out += "\n";
        out += &key_text(path, key);
    }
    if std::ptr::eq(section, &MODEL) {
        let layers: Vec<&str> = LAYERS.iter().map(|l| l.name).collect();
        let structures: Vec<&str> = STRUCTURES.iter().map(|l| l.name).collect();
        out += &wrapped(&format!(
            "Its children are applied in order. Layers: {}. Structures: {}; and the uses of a `block` (`pipeline explain block`). Each is documented below.",
            layers.join(", "),
            structures.join(", ")
        ));
        out += "\n";
        for node in model_nodes() {
            out += "\n";
            out += &section_text(node, &format!("{path}.{}", node.name));
        }
        return out;
    }
    match section.children {
        Children::Keys => {}
        Children::Layers => {
            out += &wrapped(
                "Its children are layers and structures, as in `model` (`pipeline explain model`).",
            );
            out += "\n";
        }
        Children::Branches => {
            out += "\n";
            out += &section_text(&BRANCH, &format!("{path}.{}", BRANCH.name));
        }
        Children::Inputs => {
            out += &wrapped("Its children are inputs, each named after the input it gives:");
            out += "\n\n";
            out += &section_text(&INPUT, &format!("{path}.NAME"));
        }
        Children::Repeated(nodes) => {
            for node in nodes {
                out += "\n";
                out += &section_text(node, &format!("{path}.{}", node.name));
            }
        }
        Children::Swept => {
            out += &wrapped(
                "Its children are swept keys, each named by the key as `--set` writes it (`optimizer.lr`), its values after it.",
            );
            out += "\n";
        }
        Children::Transforms => {
            let names: Vec<&str> = TRANSFORMS.iter().map(|t| t.name).collect();
            out += &wrapped(&format!(
                "Its children are transforms, applied in order: {}. Each is documented below.",
                names.join(", ")
            ));
            out += "\n";
            for t in TRANSFORMS {
                out += "\n";
                out += &section_text(t, &format!("{path}.{}", t.name));
            }
        }
    }
    out
}

/// Sections, stage kinds, `block` and `metric`: the nodes at the top of a manifest.
fn top_level() -> impl Iterator<Item = &'static Section> {
    schema::sections()
        .into_iter()
        .chain(STAGES.iter().copied())
        .chain([&BLOCK, &METRIC])
}

/// What `explain` can show: a section (at its path) or one key.
enum Topic {
    Section(&'static Section, String),
    Key(String, &'static Key),
}

/// `what` resolved through the schema: `accelerator`, `accelerator.precision`,
/// `data.split`, `data.split.seed`, `model`, `model.linear`, `model.linear.out`; a layer
/// alone (`linear`) is `model.linear`. The error says what is wrong and what is near.
fn resolve(what: &str) -> Result<Topic, (String, String)> {
    let mut parts = what.split('.');
    let first = parts.next().unwrap_or_default();
    let (mut section, mut path): (&'static Section, String) =
        match top_level().find(|s| s.name == first) {
            Some(s) => (s, first.to_string()),
            None => match schema::model_node(first) {
                Some(l) => (l, format!("model.{first}")),
                None => {
                    let mut names: Vec<&str> = top_level().map(|s| s.name).collect();
                    names.extend(model_nodes().map(|l| l.name));
                    return Err((
                        format!("`{first}` is not a section, stage kind or layer"),
                        suggest::help_for(first, "section", &names),
                    ));
                }
            },
        };
    while let Some(part) = parts.next() {
        let child = match section.children {
            Children::Layers if std::ptr::eq(section, &MODEL) => schema::model_node(part),
            Children::Branches => (part == BRANCH.name).then_some(&BRANCH),
            Children::Transforms => transform(part),
            // Any name is an input's: each is documented as `input`.
            Children::Inputs => Some(&INPUT),
            Children::Repeated(nodes) => nodes.iter().copied().find(|n| n.name == part),
            Children::Layers | Children::Keys | Children::Swept => None,
        };
        if let Some(child) = child {
            path = format!("{path}.{part}");
            section = child;
            continue;
        }
        if std::ptr::eq(section, &MODEL) {
            let names: Vec<&str> = model_nodes().map(|l| l.name).collect();
            return Err((
                format!("`{path}` has no layer `{part}`"),
                suggest::help_for(part, "layer", &names),
            ));
        }
        if section.children == Children::Transforms && section.key(part).is_none() {
            let names: Vec<&str> = TRANSFORMS.iter().map(|t| t.name).collect();
            return Err((
                format!("`{path}` has no key or transform `{part}`"),
                suggest::help_for(part, "transform", &names),
            ));
        }
        let Some(key) = section.key(part) else {
            return Err((
                format!("`{path}` has no key `{part}`"),
                suggest::help_for(part, "key", &section.key_names()),
            ));
        };
        match (&key.ty, parts.clone().next()) {
            (Ty::Section(sub), _) => {
                path = format!("{path}.{part}");
                section = sub;
            }
            (_, None) => return Ok(Topic::Key(path, key)),
            (_, Some(next)) => {
                return Err((
                    format!("`{path}.{part}` is a value, it has no key `{next}`"),
                    format!("see `pipeline explain {path}.{part}`"),
                ))
            }
        }
    }
    Ok(Topic::Section(section, path))
}

/// Prints the documentation of `what` (a section, a layer, a key, or everything).
pub fn run(what: Option<&str>) -> bool {
    let Some(what) = what else {
        let texts: Vec<String> = top_level()
            .map(|s| section_text(s, s.name))
            .chain([section_text(&SPLIT, "data.split")])
            .collect();
        print!("{}", texts.join("\n"));
        return true;
    };
    match resolve(what) {
        Ok(Topic::Section(section, path)) => print!("{}", section_text(section, &path)),
        Ok(Topic::Key(path, key)) => print!("{}", key_text(&path, key)),
        Err((error, help)) => {
            // `what` is the user's, quoted back: no control character reaches the terminal.
            eprintln!("error: {}", manifests::escape_controls(&error));
            eprintln!("  help: {}", manifests::escape_controls(&help));
            return false;
        }
    }
    true
}
