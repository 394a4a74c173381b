//! Lowering the `model` block and the `block` definitions into a [`ModelSpec`]: a tree
//! of [`Node`]s (layers, `residual`, `repeat`, `parallel`, block uses).
//!
//! A block use is expanded where it is written: the block's body is copied with every
//! `$name` replaced by the use's value, then lowered like any other layers, so its
//! diagnostics point into the block's definition. Blocks may use blocks; a chain that
//! comes back to a block it started from is a cycle, reported with the whole chain.
//! Shapes are not known here (they come from the data): `pipeline_core::network`
//! checks them through the whole tree.

use crate::diagnostic::Diagnostic;
use crate::manifest::{Join, LayerSpec, ModelSpec, Node, Projection, Spanned, TorchScriptSpec};
use crate::reader::{Fields, Reader};
use crate::schema::{self, Children, Section, MAX_MODEL_LAYERS};
use crate::suggest;
use crate::Layer;
use kdl::{KdlNode, KdlValue};
use miette::SourceSpan;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A `block` definition: its parameters in order, each with its default (`None`: a use
/// must give it).
pub(crate) struct BlockDef<'a> {
    node: &'a KdlNode,
    params: Vec<(String, Option<KdlValue>)>,
}

/// The blocks by name, which of them some use reached (for the unused warning), and how
/// many layers their uses have made so far (expansion stops at `MAX_MODEL_LAYERS`).
pub(crate) struct Blocks<'a> {
    defs: BTreeMap<String, BlockDef<'a>>,
    used: std::cell::RefCell<std::collections::BTreeSet<String>>,
    expanded: std::cell::Cell<u64>,
}

/// The deepest chain of block uses (a block using a block …), as deep as `{ }` may nest.
const MAX_BLOCK_DEPTH: usize = crate::limits::MAX_DEPTH;

/// What is being expanded: the chain of block uses (for cycles) and the parameters in
/// scope.
struct Scope<'s> {
    /// Where a `$name` had no value: the type error the reader would add there says
    /// nothing more, and is dropped.
    unresolved: Vec<SourceSpan>,
    chain: Vec<(String, Option<SourceSpan>)>,
    /// The block whose body this is, and its parameters' values.
    block: Option<&'s str>,
    values: BTreeMap<String, KdlValue>,
}

/// A block or parameter name: a stage name's characters, not starting with a digit.
fn valid_name(name: &str) -> bool {
    crate::lower::valid_stage_name(name) && !name.starts_with(|c: char| c.is_ascii_digit())
}

/// The nodes of `node`'s body (none without braces), as copies to substitute into.
fn body_of(node: &KdlNode) -> Vec<KdlNode> {
    node.children()
        .map(|c| c.nodes().to_vec())
        .unwrap_or_default()
}

impl<'a> Reader<'a> {
    /// Reads every top-level `block` node.
    pub(crate) fn blocks(&mut self, nodes: &[&'a KdlNode]) -> Blocks<'a> {
        let mut defs: BTreeMap<String, BlockDef<'a>> = BTreeMap::new();
        for &node in nodes {
            let mut args = node.entries().iter().filter(|e| e.name().is_none());
            let Some(name_entry) = args.next() else {
                self.diags.push(
                    Diagnostic::error("pipeline::block::no_name", "a `block` needs a name")
                        .label(node.name().span(), "unnamed block")
                        .help("write `block \"name\" { … }`, then use it as `name` in `model`"),
                );
                continue;
            };
            let Some(name) = name_entry.value().as_string().map(str::to_string) else {
                self.diags.push(
                    Diagnostic::error("pipeline::block::no_name", "a block's name is a string")
                        .label(name_entry.span(), "not a string")
                        .help("write `block \"name\" { … }`"),
                );
                continue;
            };
            if !valid_name(&name) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::block::bad_name",
                        format!("`{name}` is not a valid block name"),
                    )
                    .label(name_entry.span(), "invalid name")
                    .help("use letters, digits, `-` and `_`, starting with a letter"),
                );
                continue;
            }
            if schema::model_node(&name).is_some() || name == schema::BRANCH.name {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::block::shadows_layer",
                        format!("the block `{name}` has the name of a layer"),
                    )
                    .label(name_entry.span(), format!("`{name}` is a layer"))
                    .help("give the block a name of its own"),
                );
                continue;
            }
            if let Some(first) = defs.get(&name) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::block::duplicate",
                        format!("the block `{name}` is defined twice"),
                    )
                    .label(name_entry.span(), "defined again here")
                    .label(first.node.name().span(), "first defined here")
                    .help("rename one of them"),
                );
                continue;
            }
            let mut params: Vec<(String, Option<KdlValue>)> = Vec::new();
            for entry in node.entries() {
                if std::ptr::eq(entry, name_entry) {
                    continue;
                }
                let (param, default) = match entry.name() {
                    Some(key) => (key.value().to_string(), Some(entry.value().clone())),
                    None => match entry.value().as_string() {
                        Some(p) => (p.to_string(), None),
                        None => {
                            self.diags.push(
                                Diagnostic::error(
                                    "pipeline::block::bad_parameter",
                                    format!("block `{name}`: a parameter is a name (a string), or `name=default`"),
                                )
                                .label(entry.span(), "not a parameter name")
                                .help(format!("for example `block \"{name}\" \"channels\" stride=1 {{ … }}`")),
                            );
                            continue;
                        }
                    },
                };
                if !valid_name(&param) || params.iter().any(|(p, _)| *p == param) {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::block::bad_parameter",
                            format!("block `{name}`: `{param}` is not a valid parameter name, or is given twice"),
                        )
                        .label(entry.span(), "this parameter")
                        .help("use letters, digits, `-` and `_`, each name once"),
                    );
                    continue;
                }
                params.push((param, default));
            }
            if node.children().is_none_or(|c| c.nodes().is_empty()) {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::block::empty",
                        format!("the block `{name}` has no layers"),
                    )
                    .label(node.span(), "empty block")
                    .help(format!(
                        "add layers: `block \"{name}\" {{ linear 64; relu }}`"
                    )),
                );
            }
            defs.insert(name, BlockDef { node, params });
        }
        Blocks {
            defs,
            used: Default::default(),
            expanded: Default::default(),
        }
    }

    /// Warns of every block that no model uses.
    pub(crate) fn unused_blocks(&mut self, blocks: &Blocks<'a>) {
        let used = blocks.used.borrow();
        for (name, def) in &blocks.defs {
            if !used.contains(name) {
                self.diags.push(
                    Diagnostic::warning(
                        "pipeline::block::unused",
                        format!("the block `{name}` is never used"),
                    )
                    .label(def.node.name().span(), "defined here")
                    .help(format!("use it in `model` as `{name}`, or remove it")),
                );
            }
        }
    }

    pub(crate) fn model(
        &mut self,
        node: Option<&'a KdlNode>,
        blocks: &Blocks<'a>,
        base_dir: &Path,
    ) -> ModelSpec {
        let Some(node) = node else {
            return ModelSpec {
                nodes: Vec::new(),
                torchscript: None,
                span: None,
            };
        };
        for entry in node.entries() {
            self.too_many_arguments(&schema::MODEL, entry.span(), "model");
        }
        let children = body_of(node);
        if let Some(script) = children
            .iter()
            .find(|c| c.name().value() == schema::TORCHSCRIPT.name)
        {
            return self.torchscript_model(node, &children, script, base_dir);
        }
        let mut scope = Scope {
            unresolved: Vec::new(),
            chain: Vec::new(),
            block: None,
            values: BTreeMap::new(),
        };
        let before = self.diags.len();
        let nodes = self.nodes(children, blocks, &mut scope);
        // A block used several times reports a problem of its body once.
        let mut seen = Vec::new();
        for d in self.diags.split_off(before) {
            // An unresolved `$name` is reported once: what the reader says of the same
            // text (a wrong type, an unknown choice) adds nothing.
            let restates_unresolved = d.code != "pipeline::block::unknown_parameter"
                && d.labels
                    .first()
                    .is_some_and(|l| scope.unresolved.contains(&l.span));
            if !seen.contains(&d) && !restates_unresolved {
                seen.push(d);
            }
        }
        self.diags.extend(seen);
        if children_empty(node) {
            self.diags.push(
                Diagnostic::error("pipeline::model::empty", "the model has no layers")
                    .label(node.name().span(), "empty model")
                    .help("add layers, for example `model { linear 64; relu; linear 10 }`"),
            );
        }
        let spec = ModelSpec {
            nodes,
            torchscript: None,
            span: Some(node.span()),
        };
        let count = expanded_len(&spec.nodes);
        if count > MAX_MODEL_LAYERS || blocks.expanded.get() > MAX_MODEL_LAYERS {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::model::too_many_layers",
                    format!("the model holds more than {MAX_MODEL_LAYERS} layers once repeats and blocks are expanded (at most {MAX_MODEL_LAYERS} are allowed)"),
                )
                .label(node.name().span(), "this model")
                .help("lower the `repeat` counts, or use blocks inside blocks fewer times"),
            );
        }
        spec
    }

    /// A model that is one TorchScript module: nothing else may be written beside it.
    fn torchscript_model(
        &mut self,
        model: &KdlNode,
        children: &[KdlNode],
        script: &KdlNode,
        base_dir: &Path,
    ) -> ModelSpec {
        let f = self.read(
            Some(script),
            &schema::TORCHSCRIPT,
            &["model".into()],
            "model.torchscript",
        );
        for other in children.iter().filter(|c| !std::ptr::eq(*c, script)) {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::model::torchscript_alone",
                    "a `torchscript` module is the whole model: nothing can be written beside it",
                )
                .label(other.name().span(), "not part of the TorchScript module")
                .label(script.name().span(), "the whole model")
                .help("put these layers into the module in Python and script it again, or write the model without `torchscript`"),
            );
        }
        let path = PathBuf::from(f.text("path"));
        ModelSpec {
            nodes: Vec::new(),
            torchscript: Some(TorchScriptSpec {
                file: base_dir.join(&path),
                path: Spanned {
                    value: path,
                    span: f.span("path"),
                },
            }),
            span: Some(model.span()),
        }
    }

    /// Lowers the nodes of one body, after putting the scope's parameter values in.
    fn nodes(
        &mut self,
        mut children: Vec<KdlNode>,
        blocks: &Blocks<'a>,
        scope: &mut Scope<'_>,
    ) -> Vec<Node> {
        for child in &mut children {
            self.substitute(child, scope);
        }
        children
            .iter()
            .filter_map(|child| self.node(child, blocks, scope))
            .collect()
    }

    /// Replaces every `$name` value of `node` by the parameter's value (the nodes of its
    /// body are done when that body is lowered, with the same scope).
    fn substitute(&mut self, node: &mut KdlNode, scope: &mut Scope<'_>) {
        for entry in node.entries_mut() {
            let Some(text) = entry.value().as_string() else {
                continue;
            };
            let Some(param) = text.strip_prefix('$') else {
                continue;
            };
            match scope.values.get(param) {
                Some(value) => entry.set_value(value.clone()),
                None => {
                    scope.unresolved.push(entry.span());
                    let known: Vec<&str> = scope.values.keys().map(String::as_str).collect();
                    let (message, help) = match scope.block {
                        Some(block) => (
                            format!("the block `{block}` has no parameter `{param}`"),
                            suggest::help_for(param, "parameter", &known),
                        ),
                        None => (
                            format!("`${param}` is a block parameter, but this is not inside a block"),
                            "write a value here, or move these layers into a `block` with that parameter".to_string(),
                        ),
                    };
                    self.diags.push(
                        Diagnostic::error("pipeline::block::unknown_parameter", message)
                            .label(entry.span(), "no such parameter")
                            .help(help),
                    );
                }
            }
        }
    }

    /// One node of a body: a layer, a structure, or a block use (`None`: reported).
    fn node(
        &mut self,
        child: &KdlNode,
        blocks: &Blocks<'a>,
        scope: &mut Scope<'_>,
    ) -> Option<Node> {
        let name = child.name().value();
        // A structure is pointed at by its name (its body has spans of its own).
        let span = Some(child.name().span());
        match name {
            _ if name == schema::RESIDUAL.name => {
                let f = self.read_node(child, &schema::RESIDUAL);
                let nodes = self.nodes(body_of(child), blocks, scope);
                self.not_empty(child, &nodes)?;
                Some(Node::Residual {
                    body: nodes,
                    projection: Projection::parse(&f.text("projection"))
                        .unwrap_or(Projection::Auto), // not reached: a default
                    span,
                })
            }
            _ if name == schema::REPEAT.name => {
                let f = self.read_node(child, &schema::REPEAT);
                let nodes = self.nodes(body_of(child), blocks, scope);
                self.not_empty(child, &nodes)?;
                Some(Node::Repeat {
                    times: f.int("times").max(1) as u64,
                    body: nodes,
                    span,
                })
            }
            _ if name == schema::PARALLEL.name => {
                let f = self.read_node(child, &schema::PARALLEL);
                let mut branches = Vec::new();
                let mut inputs = Vec::new();
                for branch in body_of(child) {
                    if branch.name().value() != schema::BRANCH.name {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::model::not_a_branch",
                                format!(
                                    "the children of `parallel` are `branch` blocks, not `{}`",
                                    branch.name().value()
                                ),
                            )
                            .label(branch.name().span(), "not a branch")
                            .help(format!("write `branch {{ {} … }}`", branch.name().value())),
                        );
                        continue;
                    }
                    let f = self.read_node(&branch, &schema::BRANCH);
                    let nodes = self.nodes(body_of(&branch), blocks, scope);
                    self.not_empty(&branch, &nodes)?;
                    branches.push(nodes);
                    inputs.push(f.opt_text("input").map(|value| Spanned {
                        value,
                        span: f.span("input"),
                    }));
                }
                if branches.len() < 2 {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::model::one_branch",
                            "a `parallel` block needs two branches or more",
                        )
                        .label(
                            child.name().span(),
                            format!("{} branch(es)", branches.len()),
                        )
                        .help(
                            "add a `branch { … }`; `branch { identity }` passes the input through",
                        ),
                    );
                    return None;
                }
                let join = Join::parse(&f.text("join")).unwrap_or(Join::Concat); // not reached: a default
                if join == Join::Add && f.value("dim").is_some() {
                    // `add` sums whole outputs: a dimension would be ignored.
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::model::dim_without_concat",
                            "`dim` is where `concat` joins the branches; `add` sums them whole",
                        )
                        .label_opt(f.span("dim"), "not read by `add`")
                        .help("remove `dim`, or join with `parallel \"concat\" dim=…`"),
                    );
                }
                if inputs.iter().all(Option::is_none) {
                    inputs.clear();
                }
                Some(Node::Parallel {
                    branches,
                    inputs,
                    join,
                    dim: f.int("dim"),
                    span,
                })
            }
            _ if name == schema::BRANCH.name => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::model::branch_outside_parallel",
                        "a `branch` belongs in a `parallel` block",
                    )
                    .label(child.name().span(), "not inside `parallel`")
                    .help("write `parallel \"concat\" { branch { … }; branch { … } }`"),
                );
                None
            }
            _ if name == schema::TORCHSCRIPT.name => {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::model::torchscript_nested",
                        "a `torchscript` module is a whole model, not a part of one",
                    )
                    .label(child.name().span(), "inside a structure or block")
                    .help("write `model { torchscript \"net.pt\" }` alone, with every layer inside the scripted module"),
                );
                None
            }
            _ => {
                if let Some(section) = schema::layer(name) {
                    return self.layer(child, section);
                }
                match blocks.defs.get(name) {
                    Some(def) => self.block_use(child, name, def, blocks, scope),
                    None => {
                        let mut names: Vec<&str> = schema::LAYERS
                            .iter()
                            .chain(schema::STRUCTURES)
                            .map(|l| l.name)
                            .collect();
                        names.extend(blocks.defs.keys().map(String::as_str));
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::model::unknown_layer",
                                format!("unknown layer `{name}`"),
                            )
                            .label(child.name().span(), "not a layer or block")
                            .help(suggest::help_for(name, "layer", &names)),
                        );
                        None
                    }
                }
            }
        }
    }

    /// The keys of a structure node (its children are lowered apart).
    fn read_node(&mut self, child: &KdlNode, section: &'static Section) -> Fields {
        debug_assert_ne!(section.children, Children::Keys);
        self.read(
            Some(child),
            section,
            &["model".into()],
            &format!("model.{}", section.name),
        )
    }

    fn not_empty(&mut self, child: &KdlNode, nodes: &[Node]) -> Option<()> {
        if !nodes.is_empty() {
            return Some(());
        }
        if children_empty(child) {
            let name = child.name().value();
            self.diags.push(
                Diagnostic::error(
                    "pipeline::model::empty_block",
                    format!("`{name}` has no layers"),
                )
                .label(child.span(), "empty")
                .help(format!("add layers: `{name} {{ linear 64; relu }}`")),
            );
        }
        None
    }

    fn layer(&mut self, child: &KdlNode, section: &'static Section) -> Option<Node> {
        let name = section.name;
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
            &["model".into()],
            &format!("model.{name}"),
        );
        let Some(layer) = Layer::lower(name, &f) else {
            unreachable!("`{name}` has a schema, so it is registered")
        };
        Some(Node::Layer(LayerSpec {
            layer,
            span: Some(child.span()),
        }))
    }

    /// `name …` where `name` is a block: its body with the use's parameter values.
    fn block_use(
        &mut self,
        child: &KdlNode,
        name: &str,
        def: &BlockDef<'a>,
        blocks: &Blocks<'a>,
        scope: &mut Scope<'_>,
    ) -> Option<Node> {
        blocks.used.borrow_mut().insert(name.to_string());
        let span = Some(child.name().span());
        if blocks.expanded.get() > MAX_MODEL_LAYERS {
            return None; // reported once, by `model`
        }
        if scope.chain.len() >= MAX_BLOCK_DEPTH {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::block::too_deep",
                    format!("blocks are used inside blocks more than {MAX_BLOCK_DEPTH} deep"),
                )
                .label(
                    child.name().span(),
                    format!("`{name}`, {} blocks deep", scope.chain.len()),
                )
                .help("flatten the chain of blocks; `repeat` applies one block several times"),
            );
            return None;
        }
        if let Some(start) = scope.chain.iter().position(|(n, _)| n == name) {
            let mut cycle: Vec<&str> = scope.chain[start..]
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            cycle.push(name);
            let inside = scope.chain.last().map_or("", |(n, _)| n.as_str());
            let mut d = Diagnostic::error(
                "pipeline::block::cycle",
                format!("blocks use each other in a cycle: {}", cycle.join(" → ")),
            )
            .label(
                child.name().span(),
                format!("`{inside}` uses `{name}` again"),
            );
            for (n, at) in &scope.chain[start..] {
                d = d.label_opt(*at, format!("`{n}` is used here"));
            }
            self.diags.push(
                d.help("a block cannot contain itself; use `repeat` to apply one several times"),
            );
            return None;
        }
        // The use's values: positional in the definition's order, then by name.
        let mut values: BTreeMap<String, KdlValue> = BTreeMap::new();
        let mut ok = true;
        let mut position = 0;
        for entry in child.entries() {
            let param = match entry.name() {
                Some(key) => {
                    let key = key.value();
                    if def.params.iter().all(|(p, _)| p != key) {
                        let known: Vec<&str> = def.params.iter().map(|(p, _)| p.as_str()).collect();
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::block::unknown_parameter",
                                format!("the block `{name}` has no parameter `{key}`"),
                            )
                            .label(entry.span(), "no such parameter")
                            .help(suggest::help_for(
                                key,
                                "parameter",
                                &known,
                            )),
                        );
                        ok = false;
                        continue;
                    }
                    key.to_string()
                }
                None => {
                    let Some((p, _)) = def.params.get(position) else {
                        self.diags.push(
                            Diagnostic::error(
                                "pipeline::block::too_many_arguments",
                                format!("too many arguments for the block `{name}`"),
                            )
                            .label(entry.span(), "unexpected argument")
                            .help(format!(
                                "`{name}` takes {} parameter(s): {}",
                                def.params.len(),
                                def.params
                                    .iter()
                                    .map(|(p, _)| p.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                        );
                        ok = false;
                        continue;
                    };
                    position += 1;
                    p.clone()
                }
            };
            if values
                .insert(param.clone(), entry.value().clone())
                .is_some()
            {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::block::duplicate_parameter",
                        format!("`{param}` is given twice to the block `{name}`"),
                    )
                    .label(entry.span(), "given again here")
                    .help("keep one of them"),
                );
                ok = false;
            }
        }
        for (param, default) in &def.params {
            if values.contains_key(param) {
                continue;
            }
            match default {
                Some(v) => {
                    values.insert(param.clone(), v.clone());
                }
                None => {
                    self.diags.push(
                        Diagnostic::error(
                            "pipeline::block::missing_parameter",
                            format!("the block `{name}` needs `{param}`"),
                        )
                        .label(child.name().span(), format!("`{param}` is missing here"))
                        .label(def.node.name().span(), format!("`{name}` is defined here"))
                        .help(format!("write `{name} {param}=…`")),
                    );
                    ok = false;
                }
            }
        }
        if child.children().is_some() {
            self.diags.push(
                Diagnostic::error(
                    "pipeline::manifest::unexpected_block",
                    format!("the block `{name}` takes no `{{ … }}` where it is used"),
                )
                .label(child.span(), "remove the braces")
                .help(format!(
                    "its layers are in its definition; give its parameters as `{name} key=value`"
                )),
            );
        }
        if !ok {
            return None;
        }
        let body = body_of(def.node);
        let mut inner = Scope {
            unresolved: Vec::new(),
            chain: scope
                .chain
                .iter()
                .cloned()
                .chain([(name.to_string(), Some(child.name().span()))])
                .collect(),
            block: Some(name),
            values,
        };
        let nodes = self.nodes(body, blocks, &mut inner);
        scope.unresolved.extend(inner.unresolved);
        blocks
            .expanded
            .set(blocks.expanded.get().saturating_add(expanded_len(&nodes)));
        if nodes.is_empty() {
            return None;
        }
        Some(Node::Block {
            name: name.to_string(),
            body: nodes,
            span,
        })
    }
}

fn children_empty(node: &KdlNode) -> bool {
    node.children().is_none_or(|c| c.nodes().is_empty())
}

/// The number of layers once every repeat is unrolled (saturating).
pub(crate) fn expanded_len(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|n| match n {
            Node::Layer(_) => 1,
            Node::Residual { body, .. } | Node::Block { body, .. } => expanded_len(body),
            Node::Repeat { times, body, .. } => times.saturating_mul(expanded_len(body)),
            Node::Parallel { branches, .. } => branches
                .iter()
                .map(|b| expanded_len(b))
                .fold(0u64, u64::saturating_add),
        })
        .fold(0u64, u64::saturating_add)
}
