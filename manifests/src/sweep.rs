//! The `sweep` block → [`SweepSpec`]: what `pipeline sweep FILE` runs without flags. Its
//! `grid` and `random` blocks hold one node per swept key, named by the key as `--set`
//! writes it (`optimizer.lr 1e-3 3e-3`). Whether each key exists and each value fits it
//! is decided by `pipeline_core`, which checks the manifest with every value set.

use crate::diagnostic::Diagnostic;
use crate::manifest::{HalvingSpec, Mode, Spanned, SweepSpec, SweptKey};
use crate::reader::{Fields, Reader};
use crate::schema::{GRID, RANDOM};
use kdl::{KdlNode, KdlValue};
use miette::SourceSpan;
use std::collections::HashMap;

impl Reader<'_> {
    /// The `sweep` block, once read into `f` (its keys); `None` when there is none.
    pub(crate) fn sweep(&mut self, f: &Fields, node: Option<&KdlNode>) -> Option<SweepSpec> {
        let Some(node) = node else {
            // Only `--set` can give values to a block that is not written.
            if !f.values.is_empty() {
                self.diags.push(
                    Diagnostic::error(
                        "pipeline::sweep::no_block",
                        "--set sweep.…: the manifest has no `sweep` block to set",
                    )
                    .help("give `pipeline sweep` its flags (`--jobs 2`, `--monitor test.loss`), or write a `sweep { grid { … } }` block"),
                );
            }
            return None;
        };
        let grid = self.swept(node, GRID.name, false);
        let random = self.swept(node, RANDOM.name, true);
        let random_f = f.section_fields(RANDOM.name);
        // A key swept in both blocks, or twice in one.
        // (By a map: a block of many keys is read in time linear in them.)
        let mut seen: HashMap<&str, &SweptKey> = HashMap::new();
        for swept in grid.iter().chain(&random) {
            match seen.get(swept.key.value.as_str()) {
                Some(first) => self.diags.push(
                    Diagnostic::error(
                        "pipeline::sweep::swept_twice",
                        format!("sweep: `{}` is swept twice", swept.key.value),
                    )
                    .label_opt(swept.key.span, "again here")
                    .label_opt(first.key.span, "first here")
                    .help("sweep each key once: in `grid` or in `random`"),
                ),
                None => {
                    seen.insert(&swept.key.value, swept);
                }
            }
        }
        if grid.is_empty() && random.is_empty() {
            self.diags.push(
                Diagnostic::error("pipeline::sweep::empty", "the `sweep` block sweeps nothing")
                    .label(node.name().span(), "no `grid` or `random` keys")
                    .help(
                        "add a key and its values: `sweep { grid { optimizer.lr 1e-3 3e-3; }; }`",
                    ),
            );
        }
        let halving = f.section_fields("halving").map(|h| HalvingSpec {
            min_epochs: h.int("min-epochs") as u64,
            eta: h.int("eta") as u64,
            stage: h.opt_text("stage").map(|value| Spanned {
                value,
                span: h.span("stage"),
            }),
            span: h.span,
        });
        Some(SweepSpec {
            grid,
            random,
            trials: random_f.map_or(0, |r| r.int("trials") as u64),
            trials_span: random_f.and_then(|r| r.span("trials").or(r.span)),
            seed: random_f.map_or(0, |r| r.int("seed") as u64),
            monitor: f.opt_text("monitor").map(|value| Spanned {
                value,
                span: f.span("monitor"),
            }),
            mode: f.opt_text("mode").and_then(|m| Mode::parse(&m)),
            jobs: f.int("jobs") as u64,
            halving,
            span: f.span,
        })
    }

    /// The swept keys of `sweep`'s block `block`: each with its values (`one`: exactly one,
    /// how it is drawn).
    fn swept(&mut self, sweep: &KdlNode, block: &str, one: bool) -> Vec<SweptKey> {
        let nodes = sweep
            .children()
            .and_then(|c| c.nodes().iter().find(|n| n.name().value() == block))
            .and_then(KdlNode::children)
            .map_or(&[][..], |c| c.nodes());
        let mut swept = Vec::new();
        for node in nodes {
            let key = node.name().value();
            let display = format!("sweep.{block}.{key}");
            let mut bad = |d: Diagnostic| self.diags.push(d);
            if key.split('.').any(str::is_empty) {
                bad(Diagnostic::error(
                    "pipeline::sweep::bad_key",
                    format!("`{display}`: the key has an empty segment"),
                )
                .label(node.name().span(), "not a manifest key")
                .help("name the key as `--set` writes it: `optimizer.lr`, `train.epochs`"));
                continue;
            }
            if node.children().is_some() {
                bad(Diagnostic::error(
                    "pipeline::sweep::unexpected_block",
                    format!("`{display}` takes values, not a block"),
                )
                .label(node.span(), "remove the `{ … }` block")
                .help(format!("write `{key} <value> <value>…`")));
                continue;
            }
            let mut values: Vec<Spanned<String>> = Vec::new();
            // Each value's first place, by value: linear in the values, however many.
            let mut firsts: HashMap<String, Option<SourceSpan>> = HashMap::new();
            for entry in node.entries() {
                let text = match (entry.name(), entry.value()) {
                    (Some(prop), _) => {
                        bad(Diagnostic::error(
                            "pipeline::sweep::unexpected_property",
                            format!("`{display}` takes values, not properties"),
                        )
                        .label(entry.span(), "not allowed here")
                        .help(format!(
                            "write `{key} <value> <value>…`; `{}=` is not a setting of it",
                            prop.value()
                        )));
                        continue;
                    }
                    (None, KdlValue::String(s)) => s.clone(),
                    (None, KdlValue::Bool(b)) => b.to_string(),
                    (None, KdlValue::Integer(i)) => i.to_string(),
                    (None, KdlValue::Float(x)) => entry
                        .format()
                        .map(|f| f.value_repr.trim().to_string())
                        .filter(|r| r.parse::<f64>().is_ok())
                        .unwrap_or_else(|| x.to_string()),
                    (None, KdlValue::Null) => {
                        bad(Diagnostic::error(
                            "pipeline::sweep::bad_value",
                            format!("`{display}`: #null is not a value to sweep"),
                        )
                        .label(entry.span(), "a value is needed")
                        .help("write a number, a string or #true/#false"));
                        continue;
                    }
                };
                if let Some(first) = firsts.get(&text) {
                    bad(Diagnostic::error(
                        "pipeline::sweep::duplicate_value",
                        format!("`{display}`: `{text}` is there twice"),
                    )
                    .label(entry.span(), "again here")
                    .label_opt(*first, "first here")
                    .help("give each value once"));
                    continue;
                }
                firsts.insert(text.clone(), Some(entry.span()));
                values.push(Spanned {
                    value: text,
                    span: Some(entry.span()),
                });
            }
            let wanted = match (one, values.len()) {
                (_, 0) => Some("has no values"),
                (true, n) if n > 1 => Some("takes one value: how it is drawn"),
                _ => None,
            };
            if let Some(why) = wanted {
                let help = match one {
                    true => format!("write `{key} \"log(1e-4,1e-2)\"` (or `uniform(a,b)`, `int(a,b)`, `choice(v1,v2,…)`)"),
                    false => format!("write `{key} <value> <value>…`"),
                };
                bad(
                    Diagnostic::error("pipeline::sweep::bad_values", format!("`{display}` {why}"))
                        .label(node.span(), why)
                        .help(help),
                );
                continue;
            }
            swept.push(SweptKey {
                key: Spanned {
                    value: key.to_string(),
                    span: Some(node.name().span()),
                },
                values,
            });
        }
        swept
    }
}
