//! k-fold cross-validation in the stage graph. With `data.split folds=K` each `train`
//! stage is K stages, `NAME.fold-1` … `NAME.fold-K`: each trains on the other folds and
//! validates on its own, and is keyed apart, so that an interrupted run computes only the
//! folds it lacks. A stage that needs the training needs its folds: a `train` stage the
//! same fold's (a fine-tuning continues each fold), an `eval` stage all of them (it
//! evaluates each fold's model and reports their mean and standard deviation). A
//! `checkpoint` or `predict` stage would need one model, and there are K: refused.

use crate::{Diagnostic, Fold, Spanned, StageConfig, StageKind, StageSpec};
use std::collections::BTreeSet;

/// The name of fold `k`'s stage of the training `name`.
pub fn fold_name(name: &str, k: u64) -> String {
    format!("{name}.fold-{k}")
}

/// `stages` with each `train` stage cut into `folds` stages, and the needs of the others
/// rewritten to match.
pub(crate) fn cut(
    stages: Vec<StageSpec>,
    folds: u64,
    diags: &mut Vec<Diagnostic>,
) -> Vec<StageSpec> {
    let trainings: BTreeSet<String> = stages
        .iter()
        .filter(|s| s.kind() == StageKind::Train)
        .map(|s| s.name.value.clone())
        .collect();
    let mut out = Vec::with_capacity(stages.len() * folds as usize);
    for stage in stages {
        match &stage.config {
            StageConfig::Train(spec) => {
                for k in 1..=folds {
                    let mut spec = spec.clone();
                    spec.fold = Some(Fold {
                        index: k,
                        of: folds,
                        training: stage.name.value.clone(),
                    });
                    let needs = stage
                        .needs
                        .iter()
                        .map(|n| match trainings.contains(&n.value) {
                            true => renamed(n, k),
                            false => n.clone(),
                        })
                        .collect();
                    out.push(StageSpec {
                        name: renamed(&stage.name, k),
                        needs,
                        config: StageConfig::Train(spec),
                        span: stage.span,
                    });
                }
            }
            StageConfig::Eval(_) => {
                let needs = stage
                    .needs
                    .iter()
                    .flat_map(|n| match trainings.contains(&n.value) {
                        true => (1..=folds).map(|k| renamed(n, k)).collect(),
                        false => vec![n.clone()],
                    })
                    .collect();
                out.push(StageSpec { needs, ..stage });
            }
            StageConfig::Checkpoint(_) | StageConfig::Predict(_) => {
                let mut needs = Vec::with_capacity(stage.needs.len());
                for n in &stage.needs {
                    if !trainings.contains(&n.value) {
                        needs.push(n.clone());
                        continue;
                    }
                    diags.push(
                        Diagnostic::error(
                            "pipeline::stage::model_of_folds",
                            format!(
                                "{} stage `{}` takes one model, but `{}` trains {folds}, one per fold (`data.split folds={folds}`)",
                                stage.kind().as_str(),
                                stage.name(),
                                n.value
                            ),
                        )
                        .label_opt(n.span, format!("{folds} models"))
                        .help("cross-validation measures how well the settings train; train the model to keep in a manifest without `folds`, on all the data"),
                    );
                    // Its first fold, so that nothing else is said of it.
                    needs.push(renamed(n, 1));
                }
                out.push(StageSpec { needs, ..stage });
            }
        }
    }
    out
}

fn renamed(name: &Spanned<String>, k: u64) -> Spanned<String> {
    Spanned {
        value: fold_name(&name.value, k),
        span: name.span,
    }
}
