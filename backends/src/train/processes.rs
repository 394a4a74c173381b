//! What the processes of a distributed training agree on: a decision to go on, finish or
//! fail, which snapshot to resume from, and an epoch's sums.

use crate::callbacks::Control;
use crate::observer::Observer;
use crate::process_group::ProcessGroup;
use crate::snapshot::{Restored, Snapshots};
use manifests::Diagnostic;
use tch::{Device, Tensor};

/// `control`, agreed by every process of `group` when there is one.
pub(super) fn decide(
    group: Option<&ProcessGroup>,
    control: Control,
    name: &str,
) -> Result<Control, tch::TchError> {
    match group {
        Some(g) => agree(g, control, name),
        None => Ok(control),
    }
}

/// One decision for every process: any process's failure fails them all (the first
/// process's own diagnostic where it has one), else rank 0's decision to finish (rank 0
/// alone validates) or to go on.
pub(super) fn agree(
    group: &ProcessGroup,
    control: Control,
    name: &str,
) -> Result<Control, tch::TchError> {
    let code = match &control {
        Control::Continue => 0.0,
        Control::Finish(_) => 1.0,
        Control::Fail(_) => 2.0,
    };
    let codes = group.gather_values(code)?;
    Ok(match (control, codes.contains(&2.0), codes[0] == 1.0) {
        (Control::Fail(d), _, _) => Control::Fail(d),
        (_, true, _) => Control::Fail(Box::new(Diagnostic::error(
            "pipeline::train::diverged",
            format!("stage `{name}`: another process's training loss stopped being finite"),
        ))),
        (Control::Finish(why), false, true) => Control::Finish(why),
        (_, false, true) => Control::Finish("rank 0 stopped the training".into()),
        (_, false, false) => Control::Continue,
    })
}

/// The snapshot of the last step every process of `group` holds among its own last two
/// (`snapshots`, this process's): a process killed while the others saved is one snapshot
/// behind them. None when they hold no step in common.
pub(super) fn common_snapshot(
    group: &ProcessGroup,
    snapshots: &Snapshots,
    name: &str,
    obs: &mut dyn Observer,
) -> Result<Option<Result<Restored, String>>, tch::TchError> {
    let as_value = |step: Option<u64>| step.map_or(-1.0, |s| s as f64);
    let [last, previous] = snapshots.steps();
    let lasts = group.gather_values(as_value(last))?;
    if lasts.iter().all(|s| *s == lasts[0]) {
        return Ok(snapshots.load());
    }
    let previous = group.gather_values(as_value(previous))?;
    let held_by_all = |s: f64| lasts.iter().zip(&previous).all(|(l, p)| *l == s || *p == s);
    let common = (lasts.iter().chain(&previous))
        .copied()
        .filter(|s| *s >= 0.0 && held_by_all(*s))
        .fold(None, |best: Option<f64>, s| {
            Some(best.map_or(s, |b| b.max(s)))
        });
    Ok(match common {
        Some(step) => {
            if group.rank == 0 {
                obs.notice(&format!(
                    "the processes' last snapshots of `{name}` differ ({}); resuming from step {step}, which all of them hold",
                    described(&lasts)
                ));
            }
            snapshots.load_step(step as u64)
        }
        None => None,
    })
}

/// Steps as messages name them (-1: none).
fn described(steps: &[f64]) -> String {
    let steps: Vec<String> = steps
        .iter()
        .map(|s| match *s < 0.0 {
            true => "none".into(),
            false => format!("step {s}"),
        })
        .collect();
    steps.join(", ")
}

/// `restored` if every process of `group` holds a snapshot of the same step, else none.
pub(super) fn agree_on_snapshots(
    group: &ProcessGroup,
    restored: Option<Result<Restored, String>>,
    name: &str,
    obs: &mut dyn Observer,
) -> Result<Option<Result<Restored, String>>, tch::TchError> {
    let mine = match &restored {
        Some(Ok(r)) => r.position.step as f64,
        _ => -1.0,
    };
    let steps = group.gather_values(mine)?;
    if steps.iter().all(|s| *s == steps[0]) {
        return Ok(restored);
    }
    obs.notice(&format!(
        "warning: the processes' snapshots of `{name}` differ ({}); training from the start",
        described(&steps)
    ));
    Ok(None)
}

/// The epoch's loss and hit sums and sample counts over every process's shard, and
/// whether any process was `signalled` (`crate::preemption`: asked with the sums, at no
/// cost of its own).
#[allow(clippy::too_many_arguments)]
pub(super) fn sum_over_processes(
    group: &ProcessGroup,
    device: Device,
    loss_sum: &Tensor,
    hits_sum: &Tensor,
    seen: i64,
    counted: i64,
    signalled: bool,
) -> Result<(Tensor, Tensor, i64, i64, bool), tch::TchError> {
    let totals = sum_values(
        group,
        [
            loss_sum.f_double_value(&[])?,
            hits_sum.f_int64_value(&[])? as f64,
            seen as f64,
            counted as f64,
            f64::from(u8::from(signalled)),
        ],
    )?;
    Ok((
        Tensor::from(totals[0]).f_to_device(device)?,
        Tensor::from(totals[1] as i64).f_to_device(device)?,
        totals[2] as i64,
        totals[3] as i64,
        totals[4] > 0.0,
    ))
}

/// Each of `values` summed over every process of `group` (in float64).
pub(crate) fn sum_values<const N: usize>(
    group: &ProcessGroup,
    values: [f64; N],
) -> Result<[f64; N], tch::TchError> {
    let mut t = [Tensor::f_from_slice(&values)?.f_to_device(group.device)?];
    group.all_reduce_sum(&mut t)?;
    let sums = Vec::<f64>::try_from(&t[0].f_to_device(Device::Cpu)?)?;
    Ok(sums.try_into().expect("as many sums as values"))
}
