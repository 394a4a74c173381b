//! Which optimizer group each parameter is in: the first `group` (of `optimizer`) one of
//! whose glob patterns matches its name, or none (the optimizer's own settings). A
//! pattern that matches no trainable parameter is an error at the pattern, with the
//! model's names, as for `train.freeze`.

use crate::finetune::{by_position, glob_of, names_help};
use manifests::{Diagnostic, ParamGroup, Spanned};

/// The group of each of `names` (the trainable parameters, in the optimizer's order):
/// the index of the first of `groups` that matches it.
pub fn assign(groups: &[ParamGroup], names: &[String]) -> Result<Vec<Option<usize>>, Diagnostic> {
    let mut of = vec![None; names.len()];
    let mut unmatched: Vec<&Spanned<String>> = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for pattern in &group.params {
            let glob = glob_of(pattern)?;
            let mut any = false;
            for (i, name) in names.iter().enumerate() {
                if glob.matches(name) {
                    any = true;
                    of[i].get_or_insert(g);
                }
            }
            if !any {
                unmatched.push(pattern);
            }
        }
    }
    if unmatched.is_empty() {
        return Ok(of);
    }
    let shown: Vec<String> = unmatched
        .iter()
        .map(|p| format!("\"{}\"", p.value))
        .collect();
    let message = match shown.as_slice() {
        [one] => {
            format!("the optimizer's `group {one}` matches no trainable parameter of the model")
        }
        many => format!(
            "{} patterns of the optimizer's groups match no trainable parameter of the model: {}",
            many.len(),
            many.join(", ")
        ),
    };
    let mut d = Diagnostic::error("pipeline::optimizer::group_matches_nothing", message);
    for pattern in &unmatched {
        d = d.label_opt(pattern.span, "matches nothing");
    }
    let mut sorted: Vec<&str> = names.iter().map(String::as_str).collect();
    sorted.sort_by(|a, b| by_position(a, b));
    Err(d.help(names_help(&unmatched, &sorted)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(patterns: &[&str]) -> ParamGroup {
        ParamGroup {
            params: patterns
                .iter()
                .map(|p| Spanned {
                    value: p.to_string(),
                    span: None,
                })
                .collect(),
            lr: None,
            weight_decay: Some(0.0),
            momentum: None,
            beta1: None,
            beta2: None,
            eps: None,
            span: None,
        }
    }

    fn names() -> Vec<String> {
        ["0.weight", "0.bias", "1.weight", "1.bias", "2.norm.weight"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn the_first_matching_group_wins_and_the_rest_keep_the_optimizers_settings() {
        let groups = [group(&["*.bias", "*norm*"]), group(&["0.*"])];
        assert_eq!(
            assign(&groups, &names()).unwrap(),
            [Some(1), Some(0), None, Some(0), Some(0)]
        );
        assert_eq!(assign(&[], &names()).unwrap(), [None; 5]);
    }

    #[test]
    fn a_pattern_that_matches_nothing_is_named_with_the_closest_name() {
        let groups = [group(&["*.bias"]), group(&["0.wieght"])];
        let d = assign(&groups, &names()).unwrap_err();
        assert_eq!(d.code, "pipeline::optimizer::group_matches_nothing");
        assert_eq!(
            d.message,
            "the optimizer's `group \"0.wieght\"` matches no trainable parameter of the model"
        );
        assert_eq!(d.help.as_deref(), Some("did you mean `0.weight`?"));
        let d = assign(&[group(&["x.*", "y.*"])], &names()).unwrap_err();
        assert!(d
            .help
            .unwrap()
            .starts_with("the model's trainable parameters are `0.bias`, `0.weight`, `1.bias`"));
    }
}
