//! Which runs `pipeline plot` and `pipeline report` show: those named on the command line
//! (ids, unique prefixes, `last`, `last~N`, or run directories, a killed run's too), of
//! the manifest named there (`pipeline.kdl` by default); else the manifest's latest runs
//! that trained. Each with its records (`pipeline_core::records`).

use pipeline_core::history::{self, RunRecord};
use pipeline_core::records::{self, Kind, ReadError, Records};
use std::path::{Path, PathBuf};

/// A run to show.
pub struct Shown {
    /// Its id: the name of its directory.
    pub id: String,
    pub dir: PathBuf,
    /// What `run.json` says of it (none for a run that did not end: killed).
    pub record: Option<RunRecord>,
    pub records: Records,
}

/// Why runs cannot be shown: the message, and what to do.
pub struct Refused {
    pub message: String,
    pub help: Option<String>,
}

impl Refused {
    pub fn new(message: impl Into<String>, help: Option<String>) -> Refused {
        Refused {
            message: message.into(),
            help,
        }
    }

    /// Says it on stderr.
    pub fn print(&self) {
        eprintln!("error: {}", self.message);
        if let Some(help) = &self.help {
            eprintln!("  help: {help}");
        }
    }
}

/// The manifest among `targets` (a `.kdl` file), and the rest: the runs.
pub fn split(targets: &[String]) -> (PathBuf, Vec<&str>) {
    let is_manifest = |t: &&String| t.ends_with(".kdl");
    let file = targets
        .iter()
        .find(is_manifest)
        .map_or_else(|| PathBuf::from("pipeline.kdl"), PathBuf::from);
    let runs = targets
        .iter()
        .filter(|t| !is_manifest(t))
        .map(String::as_str)
        .collect();
    (file, runs)
}

/// The runs `runs` name, or else `file`'s `latest` last that trained (oldest first);
/// warnings on stderr.
pub fn choose(file: &Path, runs: &[&str], latest: usize) -> Result<Vec<Shown>, Refused> {
    let base = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let recorded = history::list(base, file);
    let lister = format!("`pipeline runs {}` lists them", file.display());
    let mut shown = Vec::new();
    for target in runs {
        let dir = Path::new(target);
        let (id, dir, record) = if dir.is_dir() {
            let id = dir
                .canonicalize()
                .ok()
                .and_then(|d| Some(d.file_name()?.to_string_lossy().into_owned()))
                .unwrap_or_else(|| target.to_string());
            (id, dir.to_path_buf(), history::read(dir))
        } else if target.contains(std::path::MAIN_SEPARATOR) {
            return Err(Refused::new(
                format!("run directory {target} does not exist"),
                Some(lister),
            ));
        } else {
            let (id, record) = history::find(&recorded, target)
                .map_err(|why| Refused::new(why, Some(lister.clone())))?;
            (
                id.clone(),
                history::runs_dir(base).join(id),
                Some(record.clone()),
            )
        };
        let records = read(&id, &dir)?;
        if record.is_none() {
            eprintln!("warning: run {id} did not end (it has no run.json): showing what it recorded before it stopped");
        }
        shown.push(Shown {
            id,
            dir,
            record,
            records,
        });
    }
    if !runs.is_empty() {
        return Ok(shown);
    }
    // The latest runs that trained.
    for (id, record) in recorded.iter().rev() {
        let dir = history::runs_dir(base).join(id);
        let Ok(records) = records::read(&dir) else {
            continue;
        };
        if records.records.iter().any(|r| r.kind == Kind::Epoch) {
            shown.push(Shown {
                id: id.clone(),
                dir,
                record: Some(record.clone()),
                records,
            });
            if shown.len() == latest {
                break;
            }
        }
    }
    if !shown.is_empty() {
        shown.reverse();
        return Ok(shown);
    }
    Err(Refused::new(
        match recorded.is_empty() {
            true => format!("no recorded runs of {} yet", file.display()),
            false => format!("no run of {} has trained yet (every stage was cached, or none was a `train` stage)", file.display()),
        },
        Some(format!(
            "`pipeline run {}` records one; `pipeline runs {}` lists those there are",
            file.display(),
            file.display()
        )),
    ))
}

/// The records of run `id` in `dir`; a half line at the end is said.
fn read(id: &str, dir: &Path) -> Result<Records, Refused> {
    let records = records::read(dir).map_err(|e| match e {
        ReadError::Missing(_) => Refused::new(
            format!("run {id} has no metrics.jsonl: it was killed before it recorded anything, or {} is not a run directory", dir.display()),
            None,
        ),
        e => Refused::new(format!("run {id}: {e}"), None),
    })?;
    if records.cut {
        eprintln!(
            "warning: run {id} was stopped while writing {}: its last, unfinished line is left out",
            records.path.display()
        );
    }
    Ok(records)
}
