//! How the weights are updated: each optimizer a member of one registry, one file each
//! (what `manifests::optimizers` describes, run here with libtorch), with its state in
//! tensors owned here, so that a snapshot can save and restore it. A program built on
//! pipeline adds its own with [`register_optimizer`] (`examples/extension/`'s Lion).
//!
//! Parameter groups (`optimizer { group "*.bias" weight-decay=0 }`) are updated one
//! group at a time, each with its own settings and the schedule's factor on its rate.

mod adam;
mod adamw;
mod rmsprop;
mod sgd;

use crate::error::torch_error;
use crate::shim::{check, raw};
use manifests::optimizers::OptimizerDescription;
use manifests::registry::Registry;
use manifests::{Diagnostic, OptimizerSpec};
use pipeline_core::finetune::by_position;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use tch::nn;
use tch::{Kind, TchError, Tensor};

extern "C" {
    fn pipeline_clear_grads(params: *mut *mut c_void, n: usize) -> *const c_char;
}

/// The code of an optimizer.
pub trait OptimizerAlgorithm: Sync {
    fn describe(&self) -> &'static OptimizerDescription;

    /// The names of the state tensors it keeps per parameter with `settings` (each the
    /// parameter's shape, zeros before the first step): `exp_avg`, `momentum_buffer`, …
    fn slots(&self, settings: &OptimizerSpec) -> Vec<&'static str>;

    /// One update of the parameters of `u` (one group's, those with a gradient).
    fn update(&self, u: &mut Update) -> Result<(), TchError>;
}

/// What one update of one group reads and changes.
pub struct Update<'a> {
    /// The parameters (handles sharing their storage: changing them changes the model).
    pub params: Vec<Tensor>,
    /// Each parameter's gradient.
    pub grads: Vec<Tensor>,
    /// Each state tensor of [`OptimizerAlgorithm::slots`] (of any group's settings), by
    /// name, one per parameter.
    pub state: Vec<(&'static str, Vec<Tensor>)>,
    /// Steps taken, this one included: a float scalar tensor on the parameters' device.
    pub step: &'a mut Tensor,
    /// The group's learning rate at this step (the schedule's factor applied).
    pub lr: f64,
    /// The group's settings.
    pub settings: &'a OptimizerSpec,
}

impl Update<'_> {
    /// The state tensors named `name`, one per parameter, if the optimizer keeps them.
    pub fn state_mut(&mut self, name: &str) -> Option<&mut [Tensor]> {
        self.state
            .iter_mut()
            .find(|(n, _)| *n == name)
            .map(|(_, ts)| ts.as_mut_slice())
    }

    /// Steps taken, this one included.
    pub fn steps(&self) -> Result<f64, TchError> {
        self.step.f_double_value(&[])
    }

    /// The parameters and gradients as the shim takes them.
    pub(crate) fn raw_params(&mut self) -> (Vec<*mut c_void>, Vec<*mut c_void>) {
        (raw(&mut self.params), raw(&mut self.grads))
    }

    /// The state tensors named `name` as the shim takes them (none when not kept).
    pub(crate) fn raw_state(&mut self, name: &str) -> Vec<*mut c_void> {
        self.state_mut(name).map(raw).unwrap_or_default()
    }
}

/// The pointer to pass for a slot: null when the optimizer does not keep it.
fn or_null(pointers: &mut [*mut c_void]) -> *mut *mut c_void {
    match pointers.is_empty() {
        true => std::ptr::null_mut(),
        false => pointers.as_mut_ptr(),
    }
}

static RUN_OPTIMIZERS: Registry<dyn OptimizerAlgorithm> = Registry::new(
    || {
        vec![
            &sgd::Sgd as &dyn OptimizerAlgorithm,
            &adam::Adam,
            &adamw::AdamW,
            &rmsprop::RmsProp,
        ]
    },
    |o| o.describe().name,
);

/// Adds an optimizer: its description (what `check` knows: its name and keys) and its
/// code. Refused when the name is taken, or a key is not one an optimizer may have.
pub fn register_optimizer(member: &'static dyn OptimizerAlgorithm) -> Result<(), String> {
    manifests::optimizers::register(member.describe())?;
    RUN_OPTIMIZERS.register(member)
}

/// The parameters an optimizer updates: the trainable variables of `vs` but those
/// frozen (`train.freeze` turns their `requires_grad` off), in the order they were
/// created, which is the same in every process.
pub fn trainable(vs: &nn::VarStore) -> Vec<Tensor> {
    vs.trainable_variables()
        .into_iter()
        .filter(Tensor::requires_grad)
        .collect()
}

/// The names of `params` (parameters of `vs`), as the checkpoint names them. A tensor
/// under several names (tied weights) takes the first in the model's order, the same in
/// every process (`variables()` is a hash map, in no fixed order).
fn names(vs: &nn::VarStore, params: &[Tensor]) -> Vec<String> {
    let mut by_storage: HashMap<usize, String> = HashMap::new();
    for (name, t) in vs.variables() {
        let slot = by_storage.entry(t.data_ptr() as usize).or_default();
        if slot.is_empty() || by_position(&name, slot).is_lt() {
            *slot = name;
        }
    }
    params
        .iter()
        .map(|p| {
            by_storage
                .get(&(p.data_ptr() as usize))
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// The optimizer of a training stage.
pub struct Optimizer {
    spec: OptimizerSpec,
    code: &'static dyn OptimizerAlgorithm,
    /// The settings of each group: the optimizer's own first, then each `group`'s.
    settings: Vec<OptimizerSpec>,
    lr: f64,
    /// Every parameter not frozen (their gradients are cleared and averaged).
    all: Vec<Tensor>,
    /// The parameters this optimizer updates and keeps state for: all of them, or this
    /// process's shard under `zero1`.
    params: Vec<Tensor>,
    /// The group of each of `params` (an index of `settings`).
    group_of: Vec<usize>,
    /// Per-parameter state by name (`exp_avg`, `momentum_buffer`, …): one tensor per
    /// parameter, zeros before the first step.
    slots: Vec<(&'static str, Vec<Tensor>)>,
    /// Steps taken, as a float scalar tensor (the form the fused Adam kernels take).
    step: Tensor,
}

impl Optimizer {
    pub fn new(spec: &OptimizerSpec, vs: &nn::VarStore) -> Result<Optimizer, Diagnostic> {
        Optimizer::sharded(spec, vs, |_| true)
    }

    /// An optimizer that updates, and keeps state for, only the parameters whose index
    /// (in the order of [`trainable`]) `owns` accepts.
    pub fn sharded(
        spec: &OptimizerSpec,
        vs: &nn::VarStore,
        owns: impl Fn(usize) -> bool,
    ) -> Result<Optimizer, Diagnostic> {
        let name = spec.kind.as_str();
        let code = RUN_OPTIMIZERS.get(name).ok_or_else(|| {
            Diagnostic::error(
                "pipeline::optimizer::no_implementation",
                format!("the optimizer `{name}` is described, but this program has no code for it"),
            )
            .help("register it with `backends::optimizer::register_optimizer`, which registers its description and its code together")
        })?;
        let all = trainable(vs);
        let groups = match spec.groups.is_empty() {
            true => vec![None; all.len()],
            false => pipeline_core::param_groups::assign(&spec.groups, &names(vs, &all))?,
        };
        let (params, group_of): (Vec<Tensor>, Vec<usize>) = all
            .iter()
            .zip(groups)
            .enumerate()
            .filter(|(i, _)| owns(*i))
            .map(|(_, (t, g))| (t.shallow_clone(), g.map_or(0, |g| g + 1)))
            .unzip();
        let settings: Vec<OptimizerSpec> = std::iter::once(spec.clone())
            .chain(spec.groups.iter().map(|g| spec.in_group(g)))
            .collect();
        let zeros = |p: &Tensor| {
            tch::no_grad(|| p.f_zeros_like()).map_err(|e| {
                torch_error(
                    "pipeline::train::optimizer",
                    "cannot build the optimizer",
                    &e,
                )
            })
        };
        let mut slots = Vec::new();
        for name in settings.iter().flat_map(|s| code.slots(s)) {
            if slots.iter().all(|(n, _)| *n != name) {
                slots.push((name, params.iter().map(zeros).collect::<Result<_, _>>()?));
            }
        }
        Ok(Optimizer {
            spec: spec.clone(),
            code,
            settings,
            lr: spec.lr,
            step: Tensor::zeros([], (Kind::Float, vs.device())),
            slots,
            params,
            group_of,
            all,
        })
    }

    pub fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// Drops every gradient (PyTorch's `zero_grad(set_to_none=True)`).
    pub fn zero_grad(&mut self) -> Result<(), TchError> {
        let mut ptrs = raw(&mut self.all);
        // SAFETY: the pointers are the live parameters owned by self.
        check(unsafe { pipeline_clear_grads(ptrs.as_mut_ptr(), ptrs.len()) })
    }

    /// The gradients there are (shallow copies: changing them changes the gradients).
    pub fn grads(&self) -> Vec<Tensor> {
        self.all
            .iter()
            .map(Tensor::grad)
            .filter(Tensor::defined)
            .collect()
    }

    /// The learning rate of group `g` now: the optimizer's, or the group's scaled as the
    /// schedule scales the optimizer's.
    fn lr_of(&self, g: usize) -> f64 {
        match self.settings[g].lr == self.spec.lr {
            true => self.lr,
            false => self.settings[g].lr * (self.lr / self.spec.lr),
        }
    }

    /// One update of every parameter that has a gradient (the others are left alone, as
    /// in PyTorch), group by group.
    pub fn step(&mut self) -> Result<(), TchError> {
        let with_grad: Vec<(usize, Tensor)> = self
            .params
            .iter()
            .map(Tensor::grad)
            .enumerate()
            .filter(|(_, grad)| grad.defined())
            .collect();
        if with_grad.is_empty() {
            return Ok(());
        }
        let _ = self.step.f_add_scalar_(1.0)?;
        for g in 0..self.settings.len() {
            let (chosen, grads): (Vec<usize>, Vec<Tensor>) = with_grad
                .iter()
                .filter(|(i, _)| self.group_of[*i] == g)
                .map(|(i, grad)| (*i, grad.shallow_clone()))
                .unzip();
            if chosen.is_empty() {
                continue;
            }
            let pick = |ts: &[Tensor]| -> Vec<Tensor> {
                chosen.iter().map(|&i| ts[i].shallow_clone()).collect()
            };
            let lr = self.lr_of(g);
            let mut update = Update {
                params: pick(&self.params),
                grads,
                state: self.slots.iter().map(|(n, ts)| (*n, pick(ts))).collect(),
                step: &mut self.step,
                lr,
                settings: &self.settings[g],
            };
            self.code.update(&mut update)?;
        }
        Ok(())
    }

    /// The whole state by name (`step`, `exp_avg.0`, …), for a snapshot.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut named = vec![("step".to_string(), self.step.shallow_clone())];
        for (name, tensors) in &self.slots {
            for (i, t) in tensors.iter().enumerate() {
                named.push((format!("{name}.{i}"), t.shallow_clone()));
            }
        }
        named
    }

    /// Restores a state from [`Optimizer::state`] of an optimizer with the same settings.
    pub fn load_state(&mut self, get: impl Fn(&str) -> Option<Tensor>) -> Result<(), TchError> {
        // `state()` hands out handles that share storage: copying into them restores it.
        tch::no_grad(|| {
            for (name, mut target) in self.state() {
                let saved = get(&name).ok_or_else(|| {
                    TchError::Torch(format!("optimizer state `{name}` is missing"))
                })?;
                target.f_copy_(&saved)?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::OptimizerConfig;
    use tch::{Device, Reduction};

    fn spec(kind: &str, weight_decay: f64) -> OptimizerSpec {
        OptimizerSpec {
            kind: manifests::Optimizer::named(kind).unwrap(),
            lr: 0.01,
            weight_decay,
            momentum: 0.0,
            nesterov: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            alpha: 0.99,
            centered: false,
            settings: Default::default(),
            groups: Vec::new(),
        }
    }

    /// An optimizer a program described but gave no code is a diagnostic, not a panic.
    #[test]
    fn a_described_optimizer_without_code_is_refused() {
        static DESCRIBED: manifests::OptimizerDescription = manifests::OptimizerDescription {
            name: "described-only",
            doc: "a description without code",
            keys: &[],
        };
        manifests::optimizers::register(&DESCRIBED).unwrap();
        let vs = nn::VarStore::new(Device::Cpu);
        let _ = nn::linear(vs.root(), 2, 1, Default::default());
        let refused = Optimizer::new(&spec("described-only", 0.0), &vs)
            .err()
            .unwrap();
        assert_eq!(refused.code, "pipeline::optimizer::no_implementation");
        assert!(refused
            .message
            .contains("`described-only` is described, but this program has no code for it"));
    }

    /// Five steps of a small regression, returning the final weights.
    fn train(mut step: impl FnMut(&nn::VarStore, &Tensor)) -> Tensor {
        tch::manual_seed(1);
        let vs = nn::VarStore::new(Device::Cpu);
        let layer = nn::linear(vs.root() / 0, 4, 3, Default::default());
        let x = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
        let y = Tensor::randn([16, 3], (Kind::Float, Device::Cpu));
        for _ in 0..5 {
            let loss = x
                .linear(&layer.ws, layer.bs.as_ref())
                .mse_loss(&y, Reduction::Mean);
            step(&vs, &loss);
        }
        layer.ws.detach()
    }

    #[test]
    fn every_optimizer_matches_libtorchs() {
        let sgd = |momentum, nesterov| OptimizerSpec {
            momentum,
            nesterov,
            ..spec("sgd", 0.1)
        };
        let rmsprop = |momentum, centered| OptimizerSpec {
            momentum,
            centered,
            ..spec("rmsprop", 0.1)
        };
        let cases = [
            spec("adam", 0.1),
            spec("adamw", 0.1),
            sgd(0.0, false),
            sgd(0.9, false),
            sgd(0.9, true),
            rmsprop(0.0, false),
            rmsprop(0.5, true),
        ];
        for case in cases {
            let mut ours: Option<Optimizer> = None;
            let fused = train(|vs, loss| {
                let opt = ours.get_or_insert_with(|| Optimizer::new(&case, vs).unwrap());
                opt.zero_grad().unwrap();
                loss.backward();
                opt.step().unwrap();
            });
            let mut theirs: Option<nn::Optimizer> = None;
            let reference = train(|vs, loss| {
                let (wd, lr) = (case.weight_decay, case.lr);
                let opt = theirs.get_or_insert_with(|| match case.kind.as_str() {
                    "adam" => nn::Adam {
                        wd,
                        ..Default::default()
                    }
                    .build(vs, lr)
                    .unwrap(),
                    "adamw" => nn::AdamW {
                        wd,
                        ..Default::default()
                    }
                    .build(vs, lr)
                    .unwrap(),
                    "sgd" => nn::Sgd {
                        momentum: case.momentum,
                        dampening: 0.0,
                        wd,
                        nesterov: case.nesterov,
                    }
                    .build(vs, lr)
                    .unwrap(),
                    "rmsprop" => nn::RmsProp {
                        alpha: case.alpha,
                        eps: case.eps,
                        wd,
                        momentum: case.momentum,
                        centered: case.centered,
                    }
                    .build(vs, lr)
                    .unwrap(),
                    other => unreachable!("no libtorch optimizer to compare `{other}` with"),
                });
                opt.zero_grad();
                loss.backward();
                opt.step();
            });
            assert!(
                fused.allclose(&reference, 1e-5, 1e-6, false),
                "{case:?}: {fused} vs {reference}"
            );
            assert!(
                !fused.allclose(&train(|_, _| {}), 1e-5, 1e-6, false),
                "the weights moved"
            );
        }
    }
}
