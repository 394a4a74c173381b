//! What fine-tuning decides without libtorch, from names and shapes alone: which tensors
//! of an `init` file a `train` stage loads ([`InitMatch`], with `strict`), and which
//! parameters `freeze` leaves out of the optimizer ([`frozen`]).
//!
//! Both are decided when the stage runs, since the names are the built model's (its
//! state-dict names, `0.weight`, `1.running_mean`, `2.body.0.bias`): backends reads
//! them from the `VarStore` and the file, and this module says what to load or freeze,
//! or the diagnostic, located at the `init` key or the pattern, that stops the stage
//! before its first step.
//!
//! `init` follows PyTorch's `load_state_dict`: strict, the file must hold exactly the
//! model's tensors with their shapes; not strict, the tensors that match by name *and*
//! shape are loaded and the rest keep their fresh initialisation (PyTorch would fail on
//! a shape mismatch; here it is what a new last layer of another size looks like). A
//! file of which nothing matches is an error either way: the wrong file, not a fresh
//! start. Patterns are `glob::Pattern`s on the whole name with the default options, so
//! `*` crosses dots (`0.*` is all of layer 0, and `2.*` all of block 2's body).

use manifests::{Diagnostic, Spanned, StageSpec};
use serde::Serialize;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// How many names a message lists before it says how many more there are.
const SHOWN: usize = 10;

/// State-dict names in the model's order: numeric parts compared as numbers, so that
/// `2.weight` comes before `10.weight`.
pub fn by_position(a: &str, b: &str) -> Ordering {
    let key = |s: &str| -> Vec<(u64, String)> {
        s.split('.')
            .map(|part| match part.parse::<u64>() {
                Ok(n) => (n, String::new()),
                Err(_) => (u64::MAX, part.to_string()),
            })
            .collect()
    };
    key(a).cmp(&key(b))
}

/// `items` joined with commas: at most [`SHOWN`] of them, then `and N more`.
fn listed(items: &[String]) -> String {
    let mut shown: Vec<String> = items.iter().take(SHOWN).cloned().collect();
    if items.len() > SHOWN {
        shown.push(format!("and {} more", items.len() - SHOWN));
    }
    shown.join(", ")
}

/// Each name in backquotes.
fn quoted<S: AsRef<str>>(names: &[S]) -> Vec<String> {
    names.iter().map(|n| format!("`{}`", n.as_ref())).collect()
}

/// The glob pattern written as `pattern` (of `freeze` or an optimizer's `group`), or the
/// error at it (`check` has refused it already; a manifest from elsewhere may not).
pub(crate) fn glob_of(pattern: &Spanned<String>) -> Result<glob::Pattern, Diagnostic> {
    glob::Pattern::new(&pattern.value).map_err(|e| {
        Diagnostic::error(
            "pipeline::train::bad_pattern",
            format!("`{}` is not a glob pattern: {}", pattern.value, e.msg),
        )
        .label_opt(pattern.span, "in this pattern")
    })
}

/// The help of an error for `unmatched` patterns (of `freeze` or an optimizer's `group`)
/// over the model's `trainable` parameter names, in the model's order: the closest name
/// to the one pattern, or the names there are.
pub(crate) fn names_help(unmatched: &[&Spanned<String>], trainable: &[&str]) -> String {
    let suggestion = match unmatched {
        [p] => manifests::suggest::closest(&p.value, trainable.iter().copied()),
        _ => None,
    };
    match (suggestion, trainable.is_empty()) {
        (Some(close), _) => format!("did you mean `{close}`?"),
        (None, true) => "the model has no trainable parameter".to_string(),
        (None, false) => format!(
            "the model's trainable parameters are {}; `N.*` is every parameter of layer N",
            listed(&quoted(trainable))
        ),
    }
}

fn shape(dims: &[i64]) -> String {
    let dims: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(", "))
}

/// A tensor both the model and the file have, with different shapes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrongShape {
    pub name: String,
    pub model: Vec<i64>,
    pub file: Vec<i64>,
}

impl WrongShape {
    fn shown(&self) -> String {
        format!(
            "`{}` (the model's {}, the file's {})",
            self.name,
            shape(&self.model),
            shape(&self.file)
        )
    }
}

/// How the tensors of an `init` file meet the model's variables (parameters and
/// buffers), each list in the model's order. `run --json` reports it as the stage's
/// `init`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InitMatch {
    /// The model's tensors the file has under the same name and shape: loaded.
    pub loaded: Vec<String>,
    /// The model's tensors the file has no tensor for.
    pub missing: Vec<String>,
    /// The file's tensors the model has no tensor for.
    pub unexpected: Vec<String>,
    /// Names both have, with different shapes.
    pub wrong_shape: Vec<WrongShape>,
}

impl InitMatch {
    /// Matches the model's tensors with the file's, both given as (name, shape).
    pub fn new(model: &[(String, Vec<i64>)], file: &[(String, Vec<i64>)]) -> InitMatch {
        let mut m = InitMatch::default();
        for (name, dims) in model {
            match file.iter().find(|(n, _)| n == name) {
                Some((_, d)) if d == dims => m.loaded.push(name.clone()),
                Some((_, d)) => m.wrong_shape.push(WrongShape {
                    name: name.clone(),
                    model: dims.clone(),
                    file: d.clone(),
                }),
                None => m.missing.push(name.clone()),
            }
        }
        for (name, _) in file {
            if !model.iter().any(|(n, _)| n == name) {
                m.unexpected.push(name.clone());
            }
        }
        for list in [&mut m.loaded, &mut m.missing, &mut m.unexpected] {
            list.sort_by(|a, b| by_position(a, b));
        }
        m.wrong_shape.sort_by(|a, b| by_position(&a.name, &b.name));
        m
    }

    /// Whether the file holds exactly the model's tensors, with their shapes.
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.wrong_shape.is_empty()
    }

    /// The model's tensors left at their fresh initialisation.
    pub fn not_loaded(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.missing.iter().map(String::as_str).collect();
        names.extend(self.wrong_shape.iter().map(|w| w.name.as_str()));
        names.sort_by(|a, b| by_position(a, b));
        names
    }

    /// The file's tensors that were not loaded.
    pub fn unused(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.unexpected.iter().map(String::as_str).collect();
        names.extend(self.wrong_shape.iter().map(|w| w.name.as_str()));
        names.sort_by(|a, b| by_position(a, b));
        names
    }

    /// `Ok` when stage `stage` may start from this match of the file `init` (as
    /// written in the manifest): an exact one, or any with a tensor loaded when not
    /// `strict`; else the diagnostic, on the `init` key.
    pub fn accept(
        &self,
        stage: &StageSpec,
        init: &Spanned<PathBuf>,
        strict: bool,
    ) -> Result<(), Diagnostic> {
        let name = stage.name();
        let file = init.value.display();
        if strict && !self.is_exact() {
            let mut parts = Vec::new();
            if !self.missing.is_empty() {
                parts.push(format!("missing {}", listed(&quoted(&self.missing))));
            }
            if !self.wrong_shape.is_empty() {
                let shown: Vec<String> = self.wrong_shape.iter().map(WrongShape::shown).collect();
                parts.push(format!("of another shape {}", listed(&shown)));
            }
            if !self.unexpected.is_empty() {
                parts.push(format!(
                    "not in the model {}",
                    listed(&quoted(&self.unexpected))
                ));
            }
            let help = match self.loaded.len() {
                0 => "no tensor of the file matches the model's by name and shape: is `init` the right file? Its names must be the model's state-dict names (`0.weight`, `0.bias`, …)".to_string(),
                n => format!(
                    "to fine-tune, write `strict=#false`: the {n} tensors that match by name and shape are loaded, and the others keep their fresh initialisation"
                ),
            };
            return Err(Diagnostic::error(
                "pipeline::train::bad_init",
                format!(
                    "stage `{name}`: the weights in {file} do not match the model: {}",
                    parts.join("; ")
                ),
            )
            .label_opt(init.span, "starting weights")
            .help(help));
        }
        if self.loaded.is_empty() && !(self.missing.is_empty() && self.wrong_shape.is_empty()) {
            let file_names = self.unused();
            return Err(Diagnostic::error(
                "pipeline::train::init_matches_nothing",
                format!("stage `{name}`: no tensor of {file} matches one of the model's by name and shape"),
            )
            .label_opt(init.span, "starting weights")
            .help(format!(
                "is `init` the right file? It holds {}; the model's tensors are {}",
                match file_names.is_empty() {
                    true => "no tensor".to_string(),
                    false => listed(&quoted(&file_names)),
                },
                listed(&quoted(&self.not_loaded()))
            )));
        }
        Ok(())
    }

    /// What the user is told after a load that was not exact: what kept its fresh
    /// initialisation and what of the file was left unused.
    pub fn notice(&self, stage: &str, init: &Spanned<PathBuf>) -> Option<String> {
        if self.is_exact() {
            return None;
        }
        let total = self.loaded.len() + self.missing.len() + self.wrong_shape.len();
        let mut text = format!(
            "warning: stage `{stage}` loaded {} of the model's {total} tensors from {} (`strict=#false`)",
            self.loaded.len(),
            init.value.display()
        );
        let fresh: Vec<String> = self
            .not_loaded()
            .iter()
            .map(|n| match self.wrong_shape.iter().find(|w| w.name == *n) {
                Some(w) => w.shown(),
                None => format!("`{n}`"),
            })
            .collect();
        if !fresh.is_empty() {
            text += &format!("\n  freshly initialised: {}", listed(&fresh));
        }
        let unused = self.unused();
        if !unused.is_empty() {
            text += &format!("\n  unused in the file: {}", listed(&quoted(&unused)));
        }
        Some(text)
    }
}

/// The names of `trainable` (the model's trainable parameters) that the `freeze`
/// patterns of stage `stage` match, or the diagnostic: a pattern that matches none of
/// them (named at the pattern, with "did you mean" or the names there are), or patterns
/// that freeze them all. `buffers` are the model's other tensors (batch-norm
/// statistics), never trained, named when a pattern matches only them.
pub fn frozen(
    stage: &StageSpec,
    patterns: &[Spanned<String>],
    trainable: &[String],
    buffers: &[String],
) -> Result<BTreeSet<String>, Diagnostic> {
    let name = stage.name();
    let mut trainable: Vec<&str> = trainable.iter().map(String::as_str).collect();
    trainable.sort_by(|a, b| by_position(a, b));
    let mut frozen = BTreeSet::new();
    let mut unmatched: Vec<(&Spanned<String>, Vec<&str>)> = Vec::new();
    for pattern in patterns {
        let glob = glob_of(pattern)?;
        let matched: Vec<&str> = trainable
            .iter()
            .copied()
            .filter(|n| glob.matches(n))
            .collect();
        if matched.is_empty() {
            let only_buffers: Vec<&str> = buffers
                .iter()
                .map(String::as_str)
                .filter(|n| glob.matches(n))
                .collect();
            unmatched.push((pattern, only_buffers));
        }
        frozen.extend(matched.into_iter().map(str::to_string));
    }
    if !unmatched.is_empty() {
        let shown: Vec<String> = unmatched
            .iter()
            .map(|(p, _)| format!("\"{}\"", p.value))
            .collect();
        let message = match shown.as_slice() {
            [one] => format!("stage `{name}`: `freeze {one}` matches no trainable parameter of the model"),
            many => format!(
                "stage `{name}`: {} `freeze` patterns match no trainable parameter of the model: {}",
                many.len(),
                many.join(", ")
            ),
        };
        let mut d = Diagnostic::error("pipeline::train::freeze_matches_nothing", message);
        for (pattern, only_buffers) in &unmatched {
            let text = match only_buffers.as_slice() {
                [] => "matches nothing".to_string(),
                b => format!(
                    "matches only {}, not trained in any case",
                    listed(&quoted(b))
                ),
            };
            d = d.label_opt(pattern.span, text);
        }
        let patterns: Vec<&Spanned<String>> = unmatched.iter().map(|(p, _)| *p).collect();
        return Err(d.help(names_help(&patterns, &trainable)));
    }
    if !trainable.is_empty() && frozen.len() == trainable.len() {
        let mut d = Diagnostic::error(
            "pipeline::train::all_frozen",
            format!(
                "stage `{name}`: `freeze` covers all {} trainable parameters of the model, so nothing would train",
                trainable.len()
            ),
        );
        for pattern in patterns {
            d = d.label_opt(pattern.span, "frozen");
        }
        let last = trainable
            .last()
            .and_then(|n| n.split('.').next())
            .unwrap_or("0");
        return Err(d.help(format!(
            "leave some parameters out of `freeze`, such as the last layer's (`{last}.*`)"
        )));
    }
    Ok(frozen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[(&str, &[i64])]) -> Vec<(String, Vec<i64>)> {
        names
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_vec()))
            .collect()
    }

    fn stage() -> StageSpec {
        let text = "data { source \"d.csv\"; }\nmodel { linear 3; }\nloss \"mse\"\noptimizer \"sgd\"\ntrain \"ft\"\n";
        let lowered = manifests::lower(text, "t", std::path::Path::new(""), &[]);
        lowered.manifest.unwrap().stages.remove(0)
    }

    fn init() -> Spanned<PathBuf> {
        Spanned {
            value: PathBuf::from("w.safetensors"),
            span: Some((3, 4).into()),
        }
    }

    #[test]
    fn names_sort_in_the_models_order() {
        let mut names = vec![
            "10.weight",
            "2.bias",
            "2.body.0.weight",
            "2.weight",
            "1.weight",
        ];
        names.sort_by(|a, b| by_position(a, b));
        assert_eq!(
            names,
            [
                "1.weight",
                "2.bias",
                "2.body.0.weight",
                "2.weight",
                "10.weight"
            ]
        );
    }

    #[test]
    fn a_new_last_layer_is_loaded_around_and_strict_names_every_difference() {
        let model = named(&[
            ("0.weight", &[32, 64]),
            ("0.bias", &[32]),
            ("2.weight", &[5, 32]),
            ("2.bias", &[5]),
            ("3.weight", &[5]),
        ]);
        let file = named(&[
            ("0.weight", &[32, 64]),
            ("0.bias", &[32]),
            ("2.weight", &[10, 32]),
            ("2.bias", &[10]),
            ("9.extra", &[1]),
        ]);
        let m = InitMatch::new(&model, &file);
        assert_eq!(m.loaded, ["0.bias", "0.weight"]);
        assert_eq!(m.missing, ["3.weight"]);
        assert_eq!(m.unexpected, ["9.extra"]);
        assert_eq!(m.not_loaded(), ["2.bias", "2.weight", "3.weight"]);
        assert_eq!(m.unused(), ["2.bias", "2.weight", "9.extra"]);
        assert!(m.accept(&stage(), &init(), false).is_ok());
        let d = m.accept(&stage(), &init(), true).unwrap_err();
        assert_eq!(d.code, "pipeline::train::bad_init");
        assert_eq!(
            d.message,
            "stage `ft`: the weights in w.safetensors do not match the model: missing `3.weight`; of another shape `2.bias` (the model's [5], the file's [10]), `2.weight` (the model's [5, 32], the file's [10, 32]); not in the model `9.extra`"
        );
        assert_eq!(d.labels[0].span, (3, 4).into());
        assert!(d.help.unwrap().contains("`strict=#false`: the 2 tensors"));
        assert_eq!(
            m.notice("ft", &init()).unwrap(),
            "warning: stage `ft` loaded 2 of the model's 5 tensors from w.safetensors (`strict=#false`)\n  freshly initialised: `2.bias` (the model's [5], the file's [10]), `2.weight` (the model's [5, 32], the file's [10, 32]), `3.weight`\n  unused in the file: `2.bias`, `2.weight`, `9.extra`"
        );
        let exact = InitMatch::new(&model, &model);
        assert!(exact.is_exact() && exact.notice("ft", &init()).is_none());
        assert!(exact.accept(&stage(), &init(), true).is_ok());
    }

    #[test]
    fn a_file_of_which_nothing_matches_is_an_error_strict_or_not() {
        let model = named(&[("0.weight", &[3, 4]), ("0.bias", &[3])]);
        let file = named(&[("x", &[10, 4]), ("y", &[10])]);
        let m = InitMatch::new(&model, &file);
        let d = m.accept(&stage(), &init(), false).unwrap_err();
        assert_eq!(d.code, "pipeline::train::init_matches_nothing");
        assert_eq!(
            d.help.as_deref(),
            Some("is `init` the right file? It holds `x`, `y`; the model's tensors are `0.bias`, `0.weight`")
        );
        let d = m.accept(&stage(), &init(), true).unwrap_err();
        assert_eq!(d.code, "pipeline::train::bad_init");
        assert!(d.help.unwrap().starts_with("no tensor of the file matches"));
    }

    #[test]
    fn long_lists_are_cut_with_a_count() {
        let model: Vec<(String, Vec<i64>)> =
            (0..13).map(|i| (format!("{i}.weight"), vec![1])).collect();
        let m = InitMatch::new(&model, &[]);
        let d = m.accept(&stage(), &init(), true).unwrap_err();
        assert!(
            d.message.ends_with("`9.weight`, and 3 more"),
            "{}",
            d.message
        );
    }

    fn patterns(ps: &[&str]) -> Vec<Spanned<String>> {
        ps.iter()
            .enumerate()
            .map(|(i, p)| Spanned {
                value: p.to_string(),
                span: Some((10 * i, 3).into()),
            })
            .collect()
    }

    fn names(ns: &[&str]) -> Vec<String> {
        ns.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn patterns_freeze_by_name_and_each_must_match_a_trainable_parameter() {
        let trainable = names(&[
            "0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias",
        ]);
        let buffers = names(&["1.running_mean", "1.running_var"]);
        let got = frozen(
            &stage(),
            &patterns(&["0.*", "*.bias"]),
            &trainable,
            &buffers,
        )
        .unwrap();
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            ["0.bias", "0.weight", "1.bias", "3.bias"]
        );

        let d = frozen(&stage(), &patterns(&["0.wieght"]), &trainable, &buffers).unwrap_err();
        assert_eq!(d.code, "pipeline::train::freeze_matches_nothing");
        assert_eq!(
            d.message,
            "stage `ft`: `freeze \"0.wieght\"` matches no trainable parameter of the model"
        );
        assert_eq!(d.labels[0].text, "matches nothing");
        assert_eq!(d.help.as_deref(), Some("did you mean `0.weight`?"));

        let d = frozen(
            &stage(),
            &patterns(&["0.*", "7.*", "*.running_*"]),
            &trainable,
            &buffers,
        )
        .unwrap_err();
        assert_eq!(
            d.message,
            "stage `ft`: 2 `freeze` patterns match no trainable parameter of the model: \"7.*\", \"*.running_*\""
        );
        let labels: Vec<(usize, &str)> = d
            .labels
            .iter()
            .map(|l| (l.span.offset(), l.text.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                (10, "matches nothing"),
                (
                    20,
                    "matches only `1.running_mean`, `1.running_var`, not trained in any case"
                )
            ]
        );
        assert_eq!(
            d.help.as_deref(),
            Some("the model's trainable parameters are `0.bias`, `0.weight`, `1.bias`, `1.weight`, `3.bias`, `3.weight`; `N.*` is every parameter of layer N")
        );

        let d = frozen(
            &stage(),
            &patterns(&["0.*", "[13].*"]),
            &trainable,
            &buffers,
        )
        .unwrap_err();
        assert_eq!(d.code, "pipeline::train::all_frozen");
        assert_eq!(
            d.message,
            "stage `ft`: `freeze` covers all 6 trainable parameters of the model, so nothing would train"
        );
        assert_eq!(d.labels.len(), 2);
        assert_eq!(
            d.help.as_deref(),
            Some("leave some parameters out of `freeze`, such as the last layer's (`3.*`)")
        );
    }
}
