//! A training that resumes from the snapshots the same training left on another number
//! of processes (`pipeline_core::reshard`): every process must have found the same ones;
//! with the same global batch and the same samples per epoch (the processes' padding),
//! the steps map exactly and the training continues as the one that took them would have,
//! to within the sums' order; otherwise only `pipeline run --reshard` continues, saying
//! that the order of samples changes from there.

use super::processes::sum_values;
use crate::observer::Observer;
use crate::process_group::ProcessGroup;
use crate::snapshot::{resharded, Restored, Saved};
use pipeline_core::reshard::batches_done;
use pipeline_core::sampler::{shard_len, Sampler};
use tch::{TchError, Tensor};

/// How this training is laid out, for the mapping.
pub(super) struct Now<'a> {
    pub group: Option<&'a ProcessGroup>,
    pub strategy: &'static dyn crate::accelerator::Strategy,
    /// The parameters the optimizer trains.
    pub params: &'a [Tensor],
    pub batch: u64,
    pub accumulate: u64,
    /// Optimizer steps per epoch.
    pub steps: u64,
    pub sampler: &'a Sampler,
    /// Training samples, and whether the processes drop the remainder rather than pad.
    pub samples: usize,
    pub drop: bool,
}

/// `snapshot` (this training's own) when there is one on any process; else those
/// `saved.elsewhere` names, resharded for this process, when every process found the same
/// ones and they may continue this training.
pub(super) fn or_elsewhere(
    snapshot: Option<Result<Restored, String>>,
    saved: &Saved,
    now: &Now,
    name: &str,
    obs: &mut dyn Observer,
) -> Result<Option<Result<Restored, String>>, TchError> {
    let (rank, world) = now.group.map_or((0, 1), |g| (g.rank, g.world));
    let found = saved.elsewhere.filter(|_| snapshot.is_none());
    let mine = found.map_or([-1.0; 3], |f| {
        let l = &f.taken.lineages;
        [f.step as f64, l.processes as f64, l.global_batch as f64]
    });
    // Every process found the same snapshots (the sums equal world × each).
    let agreed = match now.group {
        Some(g) => {
            let sums = sum_values(g, mine)?;
            let squares = sum_values(g, mine.map(|v| v * v))?;
            (0..3).all(|i| sums[i] * sums[i] == squares[i] * world as f64)
        }
        None => true,
    };
    let (Some(found), true) = (found, agreed) else {
        return Ok(snapshot);
    };
    let Some(ours) = saved.snapshots.and_then(|s| s.taken.as_ref()) else {
        return Ok(None);
    };
    let (then, now_l) = (&found.taken.lineages, &ours.lineages);
    let padded = |processes: u64| {
        let p = processes as usize;
        match now.sampler {
            // The bucketed sampler pads each global batch, not the epoch.
            Sampler::Bucketed { .. } => now.samples,
            Sampler::Distributed { .. } => shard_len(now.samples, p, now.drop) * p,
        }
    };
    let exact = then.exact == now_l.exact && padded(then.processes) == padded(now_l.processes);
    let said = |obs: &mut dyn Observer, text: String| {
        if rank == 0 {
            obs.notice(&text);
        }
    };
    let taken_by = match then.processes {
        1 => "1 process".to_string(),
        n => format!("{n} processes"),
    };
    let why_not = match (then.global_batch == now_l.global_batch, exact) {
        (_, true) => None,
        (true, false) => Some(format!(
            "its {} training samples were padded to a multiple of {} processes, and are to one of {}",
            now.samples, then.processes, now_l.processes
        )),
        (false, _) => Some(format!(
            "its global batch was {}, this run's is {}",
            then.global_batch, now_l.global_batch
        )),
    };
    if let (Some(why), false) = (&why_not, saved.reshard) {
        said(obs, format!(
            "stage `{name}`: the snapshot this training left with {taken_by} (step {}) does not continue it exactly: {why}; training from the start (`pipeline run --reshard` continues from it, the order of samples changing from there)",
            found.step
        ));
        return Ok(None);
    }
    let params = now.params;
    let owners_then = (then.processes > 1)
        .then(|| crate::accelerator::strategy_named(&found.taken.strategy))
        .flatten()
        .and_then(|s| s.owners(params, then.processes as usize));
    let owners_now = now.group.and_then(|g| now.strategy.owners(params, g.world));
    let restored = resharded(
        found,
        rank,
        params.len(),
        [owners_then.as_deref(), owners_now.as_deref()],
    );
    let restored = restored.map(|mut r| {
        let at = &mut r.position;
        let batches = batches_done(
            at.step_in_epoch,
            then.batch * then.processes,
            now.batch * world as u64,
            now.accumulate,
        );
        at.step_in_epoch = batches;
        at.step = (at.epoch - 1) * now.steps + batches / now.accumulate.max(1);
        at.reordered |= why_not.is_some();
        r
    });
    if let Ok(r) = &restored {
        let here = match world {
            1 => "1 process".to_string(),
            n => format!("{n} processes"),
        };
        said(obs, match why_not {
            None => format!(
                "stage `{name}`: resuming from the snapshot this training left with {taken_by} (epoch {}), now on {here}: the same global batch of {}",
                r.position.epoch, now_l.global_batch
            ),
            Some(why) => format!(
                "warning: stage `{name}`: resuming from the snapshot this training left with {taken_by} (epoch {}), now on {here}, as --reshard asks: {why}, so the order of samples changes from here",
                r.position.epoch
            ),
        });
    }
    Ok(Some(restored))
}
