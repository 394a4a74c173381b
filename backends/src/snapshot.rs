//! Resumable snapshots of a `train` stage: everything the rest of the training depends
//! on, so that a run killed at any moment resumes from the last snapshot and ends with the
//! same weights, bit for bit, as a run that was never interrupted.
//!
//! A snapshot holds the weights (and batch-norm statistics), the optimizer's and the loss
//! scaler's state, the random generators' state and the epoch's running loss sums, in one safetensors file,
//! plus `snapshot.json`: the position (epoch, step), the last epoch's record, the
//! file's blake3 and a checksum of all three. The learning rate and the data order need no saving: both are functions
//! of the step and the seed. The JSON is renamed into place after the tensors, so it always
//! names a complete file; the checksum catches a file torn by a power loss (snapshots are
//! not fsynced: they only need to survive the process).
//!
//! In a distributed run each process saves its own snapshot at the same steps (the runner
//! gives each a directory) and keeps the one before it, and the training loop resumes from
//! the last step all of them hold: a process killed between the others' saves leaves them
//! one snapshot apart.

use crate::error::torch_error;
use crate::model::Model;
use crate::numerics::Scaler;
use crate::observer::EpochRecord;
use crate::optimizer::Optimizer;
use crate::rng_state;
use manifests::Diagnostic;
use pipeline_core::reshard::Lineages;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use tch::{Device, TchError, Tensor};

/// Where a training stands when a snapshot is taken.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Position {
    /// The epoch in progress (1-based).
    pub epoch: u64,
    /// Batches of that epoch already done (always at the end of an optimizer step).
    pub step_in_epoch: u64,
    /// Optimizer steps taken in all.
    pub step: u64,
    /// Samples seen, and samples counted for accuracy, in that epoch so far.
    pub seen: i64,
    pub counted: i64,
    /// The record of the last finished epoch, if any.
    pub last: Option<EpochRecord>,
    /// The callbacks' states by name (`callbacks/`): early stopping's best value and
    /// patience counter. Absent when empty, so that older snapshots read the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub callbacks: BTreeMap<String, serde_json::Value>,
    /// Where the step records stand (`logging { log-every-steps N }`), so that those after
    /// a resume are those of a training never stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_log: Option<crate::train::StepLogState>,
    /// The learning rates' state (reduce-on-plateau's), when they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<serde_json::Value>,
    /// The training went on from the snapshot of another global batch
    /// (`pipeline run --reshard`): its order of samples is not the one its key describes,
    /// so its result is never stored in the cache (nor that of the stages using it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reordered: bool,
}

impl Position {
    /// What the rates kept: snapshots taken before the schedule held reduce-on-plateau
    /// kept it as that callback's.
    pub fn schedule_state(&self) -> Option<&serde_json::Value> {
        (self.schedule.as_ref()).or_else(|| self.callbacks.get("reduce-on-plateau"))
    }
}

impl Position {
    /// Whether this position can be reached in a training of `epochs` epochs of
    /// `batches` batches (the key of a stage covers both, so a snapshot beside it that
    /// does not fit was not written by it).
    pub fn fits(&self, epochs: u64, batches: u64) -> bool {
        (1..=epochs).contains(&self.epoch)
            && self.step_in_epoch < batches
            && self
                .last
                .as_ref()
                .map_or(self.epoch == 1, |l| l.epoch + 1 == self.epoch)
    }
}

/// The running sums of an epoch, on the device.
pub struct Sums<'a> {
    pub loss: &'a Tensor,
    pub hits: &'a Tensor,
}

/// A snapshot read back: its position and its tensors by name.
pub struct Restored {
    pub position: Position,
    tensors: HashMap<String, Tensor>,
}

impl Restored {
    fn get(&self, name: &str) -> Option<Tensor> {
        self.tensors.get(name).map(Tensor::shallow_clone)
    }

    /// Puts the weights, optimizer and loss-scaler state, random state and sums back.
    pub fn apply(
        &self,
        model: &mut Model,
        opt: &mut Optimizer,
        scaler: Option<&mut Scaler>,
        sums: Sums,
        device: Device,
    ) -> Result<(), TchError> {
        tch::no_grad(|| -> Result<(), TchError> {
            for (name, mut var) in model.vs.variables() {
                let saved = self.get(&format!("model.{name}")).ok_or_else(|| {
                    TchError::Torch(format!("the snapshot has no weight `{name}`"))
                })?;
                var.f_copy_(&saved)?;
            }
            for (name, target) in [("sums.loss", sums.loss), ("sums.hits", sums.hits)] {
                let saved = self
                    .get(name)
                    .ok_or_else(|| TchError::Torch(format!("the snapshot has no `{name}`")))?;
                target.shallow_clone().f_copy_(&saved)?;
            }
            Ok(())
        })?;
        opt.load_state(|n| self.get(&format!("optim.{n}")))?;
        if let Some(scaler) = scaler {
            tch::no_grad(|| scaler.load_state(|n| self.get(&format!("scaler.{n}"))))?;
        }
        rng_state::restore(device, |n| self.get(&format!("rng.{n}")))
    }
}

/// The saved states of one training: where it takes its snapshots (and resumes from the
/// last), the final state of a cached shorter training it continues (its index and its
/// tensors, `pipeline_core::extend`), and where it keeps its own final state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Saved<'a> {
    pub snapshots: Option<&'a Snapshots>,
    pub extends: Option<(&'a Path, &'a Path)>,
    pub final_state: Option<&'a Snapshots>,
    /// Without snapshots of its own, those of the same training laid out otherwise.
    pub elsewhere: Option<&'a Elsewhere>,
    /// Whether to continue from those of another global batch (`pipeline run --reshard`).
    pub reshard: bool,
}

/// The snapshots of one training stage, in a directory of their own.
#[derive(Debug, Clone, Default)]
pub struct Snapshots {
    pub dir: PathBuf,
    pub every_epochs: u64,
    pub every_steps: u64,
    /// How the training is laid out, written in each index so that the same training on
    /// another number of processes finds its snapshots ([`Snapshots::elsewhere`]).
    pub taken: Option<Taken>,
}

/// How a training that takes snapshots is laid out (`pipeline_core::reshard`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Taken {
    pub lineages: Lineages,
    /// Its strategy's name: `zero1` shards the optimizer's state among the processes.
    pub strategy: String,
}

#[derive(Serialize, Deserialize)]
struct Index {
    file: String,
    blake3: String,
    position: Position,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    taken: Option<Taken>,
    /// blake3 of the fields above (as canonical JSON), so that an edited or torn
    /// position is never trusted: resuming from a wrong position would store wrong
    /// weights as the stage's result.
    #[serde(default)]
    checksum: String,
}

impl Index {
    fn checksum(&self) -> String {
        let fields = match &self.taken {
            None => serde_json::json!([self.file, self.blake3, self.position]),
            Some(taken) => serde_json::json!([self.file, self.blake3, self.position, taken]),
        };
        cache::hash_bytes(fields.to_string().as_bytes())
    }
}

/// The snapshots of the same training laid out otherwise (another number of processes,
/// per-process batch, strategy or thread count), beside a stage's own.
#[derive(Debug, Clone)]
pub struct Elsewhere {
    /// Their stage directory (its `rank-R-of-W` directories when taken by several).
    pub dir: PathBuf,
    pub taken: Taken,
    /// The optimizer step of the last (rank 0's).
    pub step: u64,
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::error(
        "pipeline::train::snapshot_failed",
        format!("cannot write the snapshot {}: {e}", path.display()),
    )
    .help("check that the cache directory is writable and the disk is not full")
}

/// Writes `bytes` to `path` through a temporary file and a rename (no fsync).
fn replace(path: &Path, write: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), Diagnostic> {
    let tmp = path.with_extension("tmp");
    write(&tmp)
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| e.to_string()))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_error(path, e)
        })
}

impl Snapshots {
    /// Whether a snapshot is due at the end of epoch `epoch` of `epochs`. None is taken
    /// after the last: the stage's result is stored instead.
    pub fn due_after_epoch(&self, epoch: u64, epochs: u64) -> bool {
        epoch < epochs && self.every_epochs > 0 && epoch.is_multiple_of(self.every_epochs)
    }

    /// Whether a snapshot is due after optimizer step `step` (counted over all epochs).
    pub fn due_after_step(&self, step: u64) -> bool {
        self.every_steps > 0 && step.is_multiple_of(self.every_steps)
    }

    /// Saves a snapshot, replacing the previous one.
    pub fn save(
        &self,
        position: &Position,
        model: &Model,
        opt: &Optimizer,
        scaler: Option<&Scaler>,
        sums: Sums,
        device: Device,
    ) -> Result<(), Diagnostic> {
        let fail = |e: TchError| {
            torch_error(
                "pipeline::train::snapshot_failed",
                "cannot save a snapshot",
                &e,
            )
        };
        let mut named: Vec<(String, Tensor)> = Vec::new();
        for (name, var) in model.vs.variables() {
            named.push((format!("model.{name}"), var));
        }
        for (name, t) in opt.state() {
            named.push((format!("optim.{name}"), t));
        }
        for (name, t) in scaler.map(Scaler::state).unwrap_or_default() {
            named.push((format!("scaler.{name}"), t));
        }
        for (name, t) in rng_state::save(device).map_err(fail)? {
            named.push((format!("rng.{name}"), t));
        }
        named.push(("sums.loss".into(), sums.loss.shallow_clone()));
        named.push(("sums.hits".into(), sums.hits.shallow_clone()));
        let named = named
            .into_iter()
            .map(|(k, t)| Ok((k, t.f_to_device(Device::Cpu)?.f_contiguous()?)))
            .collect::<Result<Vec<_>, TchError>>()
            .map_err(fail)?;

        fs::create_dir_all(&self.dir).map_err(|e| io_error(&self.dir, e))?;
        let file = format!("snapshot-{}.safetensors", position.step);
        let path = self.dir.join(&file);
        let bytes = crate::checkpoint::safetensors_bytes(&named).map_err(|e| io_error(&path, e))?;
        replace(&path, |tmp| {
            fs::write(tmp, &bytes).map_err(|e| e.to_string())
        })?;
        let mut index = Index {
            blake3: cache::hash_file(&path).map_err(|e| io_error(&path, e))?,
            file: file.clone(),
            position: position.clone(),
            taken: self.taken.clone(),
            checksum: String::new(),
        };
        index.checksum = index.checksum();
        let json = serde_json::to_vec_pretty(&index).expect("snapshots serialise");
        // A process of a distributed run keeps its previous snapshot too: killed between
        // two processes' saves, they still hold a step in common.
        let previous = match self.per_process() {
            true => {
                let _ = fs::rename(self.dir.join(INDEX), self.dir.join(PREVIOUS));
                self.index(PREVIOUS).map(|i| i.file)
            }
            false => None,
        };
        replace(&self.dir.join(INDEX), |tmp| {
            fs::write(tmp, &json).map_err(|e| e.to_string())
        })?;
        // Older tensor files are no longer named by an index.
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("snapshot-")
                && name != file
                && previous.as_ref().is_none_or(|p| *p != name)
            {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    /// Whether these are one process's snapshots of a distributed run (`rank-R-of-W`).
    fn per_process(&self) -> bool {
        (self.dir.file_name()).is_some_and(|n| n.to_string_lossy().starts_with("rank-"))
    }

    /// The index `name` in the directory, if readable.
    fn index(&self, name: &str) -> Option<Index> {
        serde_json::from_slice(&fs::read(self.dir.join(name)).ok()?).ok()
    }

    /// The optimizer steps of the last snapshot and of the one before it (which only a
    /// process of a distributed run keeps).
    pub fn steps(&self) -> [Option<u64>; 2] {
        [INDEX, PREVIOUS].map(|name| self.index(name).map(|i| i.position.step))
    }

    /// The last snapshots of the same training laid out otherwise (the same `any`
    /// reshard lineage, another stage directory), the most advanced first found.
    pub fn elsewhere(&self) -> Option<Elsewhere> {
        let ours = self.taken.as_ref()?;
        let stage = match self.per_process() {
            true => self.dir.parent()?,
            false => &self.dir,
        };
        let found = fs::read_dir(stage.parent()?)
            .ok()?
            .flatten()
            .filter_map(|entry| {
                let dir = entry.path();
                if dir == stage {
                    return None;
                }
                // Taken by one process, or by several: rank 0's.
                let first = match dir.join(INDEX).is_file() {
                    true => dir.clone(),
                    false => fs::read_dir(&dir)
                        .ok()?
                        .flatten()
                        .map(|e| e.path())
                        .find(|p| {
                            p.file_name()
                                .is_some_and(|n| n.to_string_lossy().starts_with("rank-0-of-"))
                        })?,
                };
                let index: Index =
                    serde_json::from_slice(&fs::read(first.join(INDEX)).ok()?).ok()?;
                let taken = index.taken?;
                (taken.lineages.any == ours.lineages.any).then_some(Elsewhere {
                    dir,
                    taken,
                    step: index.position.step,
                })
            });
        found.max_by_key(|e| e.step)
    }

    /// The snapshot taken at optimizer step `step`: the last, or the one before it.
    pub fn load_step(&self, step: u64) -> Option<Result<Restored, String>> {
        let name = [INDEX, PREVIOUS]
            .into_iter()
            .find(|name| self.index(name).is_some_and(|i| i.position.step == step))?;
        let text = fs::read(self.dir.join(name)).ok()?;
        Some(read(&text, name, |file| self.dir.join(file)))
    }

    /// The last snapshot: `None` when there is none, `Err` (why, in words) when it is
    /// unusable, in which case training starts over.
    pub fn load(&self) -> Option<Result<Restored, String>> {
        let text = fs::read(self.dir.join(INDEX)).ok()?;
        Some(read(&text, INDEX, |file| self.dir.join(file)))
    }

    /// The files of the last snapshot: its index and its tensors (`None` when there is
    /// none), as a finished training stores its final state.
    pub fn files(&self) -> Option<(PathBuf, PathBuf)> {
        let text = fs::read(self.dir.join(INDEX)).ok()?;
        let index: Index = serde_json::from_slice(&text).ok()?;
        Some((self.dir.join(INDEX), self.dir.join(index.file)))
    }
}

/// The snapshot process `rank` of `world` resumes from, made of the last snapshots in
/// `from`, taken by another number of processes: the weights, the optimizer's step and
/// the loss scaler of rank 0 (every process holds the same), the random state of process
/// `rank` mod the processes then, the epoch's sums and sample counts all on rank 0 (they
/// are summed over the processes at the epoch's end), and the optimizer's per-parameter
/// state gathered from the shards it had (`owners`: each parameter's process then and
/// now, `None` where the state was not sharded) and dealt as it is sharded now.
/// `parameters`: how many the optimizer trains.
pub fn resharded(
    from: &Elsewhere,
    rank: usize,
    parameters: usize,
    owners: [Option<&[usize]>; 2],
) -> Result<Restored, String> {
    let then = from.taken.lineages.processes as usize;
    let dirs: Vec<PathBuf> = match then {
        1 => vec![from.dir.clone()],
        w => (0..w)
            .map(|r| from.dir.join(format!("rank-{r}-of-{w}")))
            .collect(),
    };
    let olds = dirs
        .iter()
        .map(|dir| {
            let snapshots = Snapshots {
                dir: dir.clone(),
                ..Default::default()
            };
            snapshots
                .load()
                .unwrap_or_else(|| Err(format!("{} holds no snapshot", dir.display())))
        })
        .collect::<Result<Vec<Restored>, String>>()?;
    if olds
        .iter()
        .any(|o| o.position.step != olds[0].position.step)
    {
        return Err("the processes that took it hold snapshots of different steps".into());
    }
    let fail = |e: TchError| crate::error::short_message(&e);
    let mut tensors: HashMap<String, Tensor> = olds[0]
        .tensors
        .iter()
        .filter(|(name, _)| name.starts_with("model.") || name.starts_with("scaler."))
        .map(|(name, t)| (name.clone(), t.shallow_clone()))
        .collect();
    for (name, t) in &olds[rank % then].tensors {
        if name.starts_with("rng.") {
            tensors.insert(name.clone(), t.shallow_clone());
        }
    }
    for name in ["sums.loss", "sums.hits"] {
        let parts: Vec<Tensor> = olds
            .iter()
            .map(|o| {
                o.get(name)
                    .ok_or_else(|| format!("the snapshot has no `{name}`"))
            })
            .collect::<Result<_, _>>()?;
        let sum = match rank {
            0 => Tensor::f_stack(&parts, 0).and_then(|t| t.f_sum(t.kind())),
            _ => parts[0].f_zeros_like(),
        };
        tensors.insert(name.into(), sum.map_err(fail)?);
    }
    let step = olds[0]
        .get("optim.step")
        .ok_or("the snapshot has no optimizer step")?;
    tensors.insert("optim.step".into(), step);
    // Each parameter's state (`exp_avg`, …) by its index among those trained.
    let held = |owners: Option<&[usize]>, r: usize| -> Vec<usize> {
        match owners {
            Some(o) => (0..parameters).filter(|&p| o.get(p) == Some(&r)).collect(),
            None => (0..parameters).collect(),
        }
    };
    let mut state: HashMap<(String, usize), Tensor> = HashMap::new();
    for (r, old) in olds.iter().enumerate() {
        if owners[0].is_none() && r > 0 {
            break; // every process held the whole state
        }
        let globals = held(owners[0], r);
        for (name, t) in &old.tensors {
            let Some((slot, j)) = name
                .strip_prefix("optim.")
                .and_then(|n| n.rsplit_once('.'))
                .and_then(|(slot, j)| Some((slot, j.parse::<usize>().ok()?)))
            else {
                continue;
            };
            let p = *globals
                .get(j)
                .ok_or_else(|| format!("optimizer state `{name}` is of no parameter"))?;
            state.insert((slot.to_string(), p), t.shallow_clone());
        }
    }
    // This process's parameters now, each at its index among them.
    let mine: HashMap<usize, usize> = (held(owners[1], rank).into_iter().enumerate())
        .map(|(j, p)| (p, j))
        .collect();
    for ((slot, p), t) in state {
        if let Some(j) = mine.get(&p) {
            tensors.insert(format!("optim.{slot}.{j}"), t);
        }
    }
    let mut position = olds[0].position.clone();
    let total = |f: fn(&Position) -> i64| olds.iter().map(|o| f(&o.position)).sum::<i64>();
    (position.seen, position.counted) = match rank {
        0 => (total(|p| p.seen), total(|p| p.counted)),
        _ => (0, 0),
    };
    // The step records' windows count this process's samples: they start again.
    position.step_log = None;
    Ok(Restored { position, tensors })
}

/// A snapshot's index in its directory.
const INDEX: &str = "snapshot.json";
/// The index of the snapshot before it, in a process of a distributed run.
const PREVIOUS: &str = "snapshot.previous.json";

/// The snapshot stored as two files elsewhere (a cached training's final state, whose
/// index names its tensors by the name they had beside it).
pub fn load_stored(index: &Path, tensors: &Path) -> Result<Restored, String> {
    let name = index
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let text = fs::read(index).map_err(|e| format!("{name}: {e}"))?;
    read(&text, &name, |_| tensors.to_path_buf())
}

/// A snapshot from its index's text (`name`d so in messages), its tensors where
/// `tensors` says the index's file is.
fn read(
    text: &[u8],
    name: &str,
    tensors: impl FnOnce(&str) -> PathBuf,
) -> Result<Restored, String> {
    let index: Index =
        serde_json::from_slice(text).map_err(|e| format!("{name} is unreadable: {e}"))?;
    if index.checksum != index.checksum() {
        return Err(format!("{name} does not match its checksum"));
    }
    let path = tensors(&index.file);
    let hash = cache::hash_file(&path).map_err(|e| format!("{}: {e}", index.file))?;
    if hash != index.blake3 {
        return Err(format!("{} does not match its checksum", index.file));
    }
    let tensors = Tensor::read_safetensors(&path)
        .map_err(|e| format!("{}: {}", index.file, crate::error::short_message(&e)))?;
    Ok(Restored {
        position: index.position,
        tensors: tensors.into_iter().collect(),
    })
}

impl Snapshots {
    /// Removes the snapshots (the stage finished and its result is stored); the last
    /// process of a distributed run to remove its own (`rank-R-of-W`) removes their
    /// stage's directory.
    pub fn clear(&self) {
        let _ = fs::remove_dir_all(&self.dir);
        if let (true, Some(stage)) = (self.per_process(), self.dir.parent()) {
            let _ = fs::remove_dir(stage); // only once empty
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// reduce-on-plateau's state is the schedule's now; a snapshot taken when it was a
    /// callback's still gives it to the schedule, and a new one's own field wins.
    #[test]
    fn the_plateau_state_of_an_older_snapshot_is_found_among_the_callbacks() {
        let older = serde_json::json!({
            "epoch": 2, "step_in_epoch": 0, "step": 10, "seen": 0, "counted": 0, "last": null,
            "callbacks": {"reduce-on-plateau": {"lr": 0.5, "best": 1.0, "bad": 1, "cooldown_left": 0}}
        });
        let position: Position = serde_json::from_value(older).unwrap();
        assert_eq!(position.schedule, None);
        assert_eq!(position.schedule_state().unwrap()["lr"], 0.5);
        let newer = Position {
            schedule: Some(serde_json::json!({"lr": 0.25})),
            ..position
        };
        assert_eq!(newer.schedule_state().unwrap()["lr"], 0.25);
        let text = serde_json::to_value(&newer).unwrap();
        assert_eq!(text["schedule"]["lr"], 0.25);
    }

    /// The checksum is recomputed from the parsed index, so every float must read back
    /// as the float written (serde_json's `float_roundtrip`); otherwise a good snapshot
    /// would now and then be refused as edited.
    #[test]
    fn an_index_read_back_has_the_checksum_it_was_written_with() {
        let mut bits: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            bits = bits
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = f64::from_bits(bits >> 2) % 10.0;
            let record = EpochRecord {
                stage: "train".into(),
                epoch: 2,
                epochs: 5,
                loss: x,
                accuracy: Some(x / 7.0),
                val_loss: None,
                val_accuracy: None,
                val_metrics: [("f1-macro".to_string(), x / 9.0)].into(),
                lr: x * 1e-3,
                seconds: x / 3.0,
                samples_per_second: x * 1234.5,
                comm_seconds: Some(x / 11.0),
                steps: 23,
            };
            let mut index = Index {
                file: "snapshot-46.safetensors".into(),
                blake3: "ab".repeat(32),
                position: Position {
                    epoch: 3,
                    step_in_epoch: 0,
                    step: 46,
                    seen: 0,
                    counted: 0,
                    last: Some(record),
                    callbacks: BTreeMap::from([(
                        "early-stop".to_string(),
                        serde_json::json!({"best": [x, 2], "waited": 1}),
                    )]),
                    step_log: Some(crate::train::StepLogState {
                        base: crate::train::Totals {
                            loss: x * 77.0,
                            hits: 640.0,
                            seen: 704.0,
                            counted: 704.0,
                        },
                        carry: crate::train::Totals::default(),
                    }),
                    schedule: Some(
                        serde_json::json!({"lr": x, "best": x, "bad": 2, "cooldown_left": 0}),
                    ),
                    reordered: true,
                },
                taken: Some(Taken {
                    lineages: Lineages {
                        exact: "cd".repeat(32),
                        any: "ef".repeat(32),
                        processes: 2,
                        batch: 32,
                        global_batch: 64,
                    },
                    strategy: "zero1".into(),
                }),
                checksum: String::new(),
            };
            index.checksum = index.checksum();
            let text = serde_json::to_vec_pretty(&index).unwrap();
            let back: Index = serde_json::from_slice(&text).unwrap();
            assert_eq!(back.checksum(), index.checksum, "loss {x:e}");
        }
    }
}
