//! Fine-tuning in a `train` stage: starting weights from an `init` file (all of them,
//! or with `strict=#false` those that match by name and shape) and parameters frozen by
//! `freeze`.
//!
//! What to load and what to freeze is decided from names and shapes by
//! `pipeline_core::finetune`; this file reads those from the model and the file, and
//! acts: it copies the loaded tensors into the model (converted to its dtype and device)
//! and turns `requires_grad` off on the frozen parameters. A frozen parameter then gets
//! no gradient, so the optimizer leaves it out (`optimizer::trainable`), no process
//! averages a gradient for it, and it is saved in snapshots and checkpoints like any
//! other.

use crate::error::torch_error;
use crate::model::Model;
use crate::observer::Observer;
use manifests::{Diagnostic, Manifest, Spanned, StageSpec, TrainSpec};
use pipeline_core::finetune::{frozen, InitMatch};
use std::collections::HashMap;
use std::path::PathBuf;
use tch::Tensor;

/// Loads the starting weights `init` of stage `stage` into `model`, as `spec.strict`
/// says, and tells `obs` what was left out; returns how the file met the model.
pub fn load_init(
    model: &Model,
    manifest: &Manifest,
    stage: &StageSpec,
    spec: &TrainSpec,
    init: &Spanned<PathBuf>,
    obs: &mut dyn Observer,
) -> Result<InitMatch, Diagnostic> {
    let name = stage.name();
    let path = manifest.resolve(&init.value);
    pipeline_core::freshness::regular_input(manifest, "init", &path, init.span)?;
    let file: HashMap<String, Tensor> = Tensor::read_safetensors(&path)
        .map_err(|e| {
            torch_error(
                "pipeline::train::bad_init",
                &format!("stage `{name}`: cannot read {}", init.value.display()),
                &e,
            )
            .label_opt(init.span, "starting weights")
            .help("`init` is a safetensors file, such as a `checkpoint` stage writes")
        })?
        .into_iter()
        .collect();
    let shapes = |named: &mut dyn Iterator<Item = (&String, &Tensor)>| {
        named
            .map(|(n, t)| (n.clone(), t.size()))
            .collect::<Vec<_>>()
    };
    let variables = model.vs.variables();
    let matched = InitMatch::new(&shapes(&mut variables.iter()), &shapes(&mut file.iter()));
    matched.accept(stage, init, spec.strict)?;
    tch::no_grad(|| -> Result<(), tch::TchError> {
        for n in &matched.loaded {
            variables[n].shallow_clone().f_copy_(&file[n])?;
        }
        Ok(())
    })
    .map_err(|e| {
        torch_error(
            "pipeline::train::bad_init",
            &format!("stage `{name}`: cannot load {}", init.value.display()),
            &e,
        )
        .label_opt(init.span, "starting weights")
    })?;
    if let Some(text) = matched.notice(name, init) {
        obs.notice(&text);
    }
    Ok(matched)
}

/// Freezes the parameters of `model` that the `freeze` patterns of `spec` match (none
/// when there are none), and tells `obs` which.
pub fn freeze(
    model: &Model,
    stage: &StageSpec,
    spec: &TrainSpec,
    obs: &mut dyn Observer,
) -> Result<(), Diagnostic> {
    if spec.freeze.is_empty() {
        return Ok(());
    }
    let variables = model.vs.variables();
    let (trainable, buffers): (Vec<String>, Vec<String>) = {
        let (t, b): (Vec<_>, Vec<_>) = variables.iter().partition(|(_, t)| t.requires_grad());
        let names = |v: Vec<(&String, &Tensor)>| v.into_iter().map(|(n, _)| n.clone()).collect();
        (names(t), names(b))
    };
    let chosen = frozen(stage, &spec.freeze, &trainable, &buffers)?;
    let values = |names: &mut dyn Iterator<Item = &String>| -> usize {
        names.map(|n| variables[n].numel()).sum()
    };
    for n in &chosen {
        // In place: the handle it returns is the same tensor.
        let _ = variables[n].f_set_requires_grad(false).map_err(|e| {
            torch_error(
                "pipeline::train::failed",
                &format!("stage `{}`: cannot freeze `{n}`", stage.name()),
                &e,
            )
        })?;
    }
    let mut names: Vec<&str> = chosen.iter().map(String::as_str).collect();
    names.sort_by(|a, b| pipeline_core::finetune::by_position(a, b));
    obs.message(&format!(
        "`{}`: {} of {} trainable parameters frozen ({} of {} values): {}",
        stage.name(),
        chosen.len(),
        trainable.len(),
        values(&mut chosen.iter()),
        values(&mut trainable.iter()),
        names.join(", ")
    ));
    Ok(())
}
