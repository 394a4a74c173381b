//! The training objective: each loss a member of one registry, one file each (what
//! `manifests::losses` describes, run here with libtorch), with its weights resolved
//! against the data (`class-weights "balanced"` is counted on the training split). A
//! program built on pipeline adds its own with [`register_loss`] (`examples/extension/`).

mod bce_with_logits;
mod cross_entropy;
mod huber;
mod l1;
mod mse;
mod nll;

use crate::data::{index_tensor, Dataset};
use crate::script::{Compare, ScriptModule};
use manifests::accelerator::Registry;
use manifests::losses::LossDescription;
use manifests::{ClassWeights, Diagnostic, LossKind, LossSpec, SplitName, Target};
use tch::{Device, Kind, TchError, Tensor};

/// The code of a loss.
pub trait LossFunction: Sync {
    fn describe(&self) -> &'static LossDescription;

    /// The mean loss of a batch: the model's `output` against `target` (class indices
    /// for [`Target::Classes`], else floats of the output's shape).
    fn forward(
        &self,
        output: &Tensor,
        target: &Tensor,
        with: &Settings,
    ) -> Result<Tensor, TchError>;

    /// What the outputs stand for, per sample (`output` is samples × outputs, float64):
    /// the classes' probabilities, each label's, or the values themselves.
    fn scores(&self, output: &Tensor) -> Result<Tensor, TchError> {
        scores_of(self.describe().target, output)
    }
}

/// What the outputs of a loss of `target` stand for, by default.
fn scores_of(target: Target, output: &Tensor) -> Result<Tensor, TchError> {
    match target {
        Target::Classes => output.f_softmax(1, Kind::Double),
        Target::Labels => output.f_sigmoid(),
        Target::Values => Ok(output.shallow_clone()),
    }
}

/// What a loss's forward reads beside the batch: the manifest's settings, and its
/// weights as tensors on the device.
pub struct Settings<'a> {
    pub spec: &'a LossSpec,
    /// One weight per class (`class-weights`).
    pub class_weights: Option<&'a Tensor>,
    /// The weight of positive targets, one or one per output (`pos-weight`).
    pub pos_weight: Option<&'a Tensor>,
}

static RUN_LOSSES: Registry<dyn LossFunction> = Registry::new(
    || {
        vec![
            &cross_entropy::CrossEntropy as &dyn LossFunction,
            &mse::Mse,
            &bce_with_logits::BceWithLogits,
            &nll::Nll,
            &l1::L1,
            &huber::Huber,
        ]
    },
    |l| l.describe().name,
);

/// Adds a loss: its description (what `check` knows: its name, keys and target) and its
/// code. Refused when the name is taken, or a key is not one a loss may have.
pub fn register_loss(member: &'static dyn LossFunction) -> Result<(), String> {
    manifests::losses::register(member.describe())?;
    RUN_LOSSES.register(member)
}

/// The code of the loss the manifest names.
fn code(spec: &LossSpec, loss: manifests::Loss) -> Result<&'static dyn LossFunction, Diagnostic> {
    let name = loss.as_str();
    RUN_LOSSES.get(name).ok_or_else(|| {
        Diagnostic::error(
            "pipeline::loss::no_implementation",
            format!("the loss `{name}` is described, but this program has no code for it"),
        )
        .label_opt(spec.span, "named here")
        .help("register it with `backends::loss::register_loss`, which registers its description and its code together")
    })
}

/// What computes a run's loss.
enum Code {
    Member(&'static dyn LossFunction),
    /// `loss { torchscript "…" }`: its `forward(output, target)`.
    Script(ScriptModule),
}

/// The loss of a run: the manifest's, with its code and its weight tensors on the device.
pub struct Loss {
    pub spec: LossSpec,
    code: Code,
    class_weights: Option<Tensor>,
    pos_weight: Option<Tensor>,
}

impl std::fmt::Debug for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loss").field("spec", &self.spec).finish()
    }
}

impl Loss {
    /// The loss for a model of `outputs` outputs on `data`: the weights checked against
    /// them (their count, and for `balanced`, that every class has a training sample).
    pub fn new(
        spec: &LossSpec,
        data: &Dataset,
        outputs: i64,
        device: Device,
    ) -> Result<Loss, Diagnostic> {
        let code = match &spec.kind {
            LossKind::Member(loss) => Code::Member(code(spec, *loss)?),
            LossKind::Script { script, .. } => {
                Code::Script(crate::script::load_compare(script, Compare::Loss, device)?)
            }
        };
        let tensor = |w: &[f64]| Tensor::from_slice(w).to_kind(Kind::Float).to_device(device);
        let class_weights = match &spec.class_weights {
            None => None,
            Some(written) => {
                let weights = match &written.value {
                    ClassWeights::Given(w) => w.clone(),
                    ClassWeights::Balanced => balanced(data, outputs as usize)
                        .map_err(|why| bad_weights(spec, why, "class-weights"))?,
                };
                if weights.len() as i64 != outputs {
                    return Err(bad_weights(
                        spec,
                        format!(
                            "`class-weights` gives {} weights, but the model has {outputs} classes",
                            weights.len()
                        ),
                        "class-weights",
                    ));
                }
                Some(tensor(&weights))
            }
        };
        let pos_weight = match &spec.pos_weight {
            Some(w) if w.value.len() != 1 && w.value.len() as i64 != outputs => {
                return Err(bad_weights(
                    spec,
                    format!(
                        "`pos-weight` gives {} weights, but the model has {outputs} outputs",
                        w.value.len()
                    ),
                    "pos-weight",
                ))
            }
            Some(w) => Some(tensor(&w.value)),
            None => None,
        };
        Ok(Loss {
            spec: spec.clone(),
            code,
            class_weights,
            pos_weight,
        })
    }

    /// What the loss compares the outputs with.
    pub fn target(&self) -> Target {
        self.spec.kind.target()
    }

    /// The mean loss of a batch (for class weights, PyTorch's weighted mean).
    pub fn compute(&self, output: &Tensor, target: &Tensor) -> Result<Tensor, TchError> {
        let with = Settings {
            spec: &self.spec,
            class_weights: self.class_weights.as_ref(),
            pos_weight: self.pos_weight.as_ref(),
        };
        match &self.code {
            Code::Member(member) => member.forward(output, target, &with),
            Code::Script(module) => {
                let loss =
                    module.forward(&[output.shallow_clone(), target.shallow_clone()], false)?;
                match loss.dim() {
                    0 => Ok(loss),
                    _ => Err(TchError::Torch(format!(
                        "the TorchScript loss returned a tensor of shape {:?}, not one number: reduce it over the batch (`.mean()`)",
                        loss.size()
                    ))),
                }
            }
        }
    }

    /// What a batch's outputs stand for (see [`LossFunction::scores`]), samples × values
    /// in float64.
    pub fn scores(&self, output: &Tensor) -> Result<Tensor, TchError> {
        let output = output.f_to_kind(Kind::Double)?.f_flatten(1, -1)?;
        match &self.code {
            Code::Member(member) => member.scores(&output),
            Code::Script(_) => scores_of(self.target(), &output),
        }
    }
}

impl Loss {
    /// A batch's loss summed over its samples, and their total weight (the batch size,
    /// or with class weights the sum of their classes' weights), in float64: summed over
    /// batches, their ratio is the mean over all of them, as one batch would give it.
    pub fn summed(&self, output: &Tensor, target: &Tensor) -> Result<(Tensor, Tensor), TchError> {
        let mean = self.compute(output, target)?.f_to_kind(Kind::Double)?;
        match &self.class_weights {
            Some(w) => {
                let weight = w.f_index_select(0, target)?.f_sum(Kind::Double)?;
                Ok((mean.f_mul(&weight)?, weight))
            }
            // Made on the device: no copy from the host per batch.
            None => {
                let samples = target.size()[0] as f64;
                Ok((
                    mean.f_mul_scalar(samples)?,
                    mean.f_ones_like()?.f_mul_scalar(samples)?,
                ))
            }
        }
    }
}

/// scikit-learn's `compute_class_weight("balanced")` over the training split: samples /
/// (classes × the class's samples).
fn balanced(data: &Dataset, classes: usize) -> Result<Vec<f64>, String> {
    let train = data.splits.get(SplitName::Train);
    let labels = data
        .labels
        .index_select(0, &index_tensor(train).to_device(data.labels.device()))
        .to_device(Device::Cpu);
    let labels = Vec::<i64>::try_from(&labels).map_err(|e| e.to_string())?;
    let mut counts = vec![0u64; classes];
    for l in labels {
        if let Some(c) = usize::try_from(l).ok().and_then(|l| counts.get_mut(l)) {
            *c += 1;
        }
    }
    if let Some(empty) = counts.iter().position(|&c| c == 0) {
        let name = match &data.classes {
            Some(names) => format!("`{}`", names.get(empty).map_or("?", String::as_str)),
            None => empty.to_string(),
        };
        return Err(format!(
            "`class-weights \"balanced\"`: class {name} has no sample in the training split, so it has no weight"
        ));
    }
    let n = train.len() as f64;
    Ok(counts
        .iter()
        .map(|&c| n / (classes as f64 * c as f64))
        .collect())
}

fn bad_weights(spec: &LossSpec, message: String, key: &str) -> Diagnostic {
    let span = match key {
        "class-weights" => spec.class_weights.as_ref().and_then(|w| w.span),
        _ => spec.pos_weight.as_ref().and_then(|w| w.span),
    };
    Diagnostic::error("pipeline::loss::bad_weights", message)
        .label_opt(span.or(spec.span), "these weights")
        .help("give one weight per class (per output for `pos-weight`), in index order")
}

/// The number of correct predictions in a batch (a 0-d tensor, not read back to the
/// host), and how many predictions were made; `None` for regression losses.
pub fn correct(
    kind: Target,
    output: &Tensor,
    target: &Tensor,
) -> Result<Option<(Tensor, i64)>, TchError> {
    Ok(match kind {
        Target::Classes => {
            let hits = output
                .f_argmax(-1, false)?
                .f_eq_tensor(target)?
                .f_sum(Kind::Int64)?;
            Some((hits, target.size()[0]))
        }
        Target::Labels => {
            let hits = output
                .f_gt(0.0)?
                .f_eq_tensor(&target.f_gt(0.5)?)?
                .f_sum(Kind::Int64)?;
            Some((hits, target.numel() as i64))
        }
        Target::Values => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loss a program described but gave no code is a diagnostic, not a panic.
    #[test]
    fn a_described_loss_without_code_is_refused() {
        static DESCRIBED: manifests::LossDescription = manifests::LossDescription {
            name: "described-only",
            doc: "a description without code",
            target: manifests::Target::Classes,
            keys: &[],
        };
        manifests::losses::register(&DESCRIBED).unwrap();
        let loss = manifests::Loss::named("described-only").unwrap();
        let spec = LossSpec {
            kind: manifests::LossKind::Member(loss),
            label_smoothing: 0.0,
            class_weights: None,
            pos_weight: None,
            delta: None,
            settings: Default::default(),
            span: None,
        };
        let refused = code(&spec, loss).err().unwrap();
        assert_eq!(refused.code, "pipeline::loss::no_implementation");
        assert!(refused
            .message
            .contains("`described-only` is described, but this program has no code for it"));
    }
}
