//! `pipeline runs [FILE]`, `runs show RUN`, `runs diff RUN RUN`: the history of a
//! manifest's runs, from the `run.json` each run directory holds
//! (`pipeline_core::history`). Never loads libtorch, nor the manifest: the runs are those
//! under `.pipeline/runs/` beside it that name it (a manifest since removed still has its
//! runs; one that neither exists nor has runs is an error, most likely a typo). With
//! `--json`, one document on stdout whatever happens: the answer with `"ok": true`, or
//! `{"ok": false, "diagnostics": [...]}`.

use crate::cli::{RunsArgs, RunsCommand};
use crate::render;
use crate::summary::columns;
use manifests::Diagnostic;
use pipeline_core::history::{self, RunRecord};
use pipeline_core::sweep::escaped;
use serde_json::json;
use std::path::Path;

pub fn run(args: &RunsArgs) -> bool {
    let (json, done) = match &args.command {
        None => (args.json, list(&args.file, args.json)),
        Some(RunsCommand::Show { run, file, json }) => (*json, show(file, run, *json)),
        Some(RunsCommand::Diff { a, b, file, json }) => (*json, diff(file, a, b, *json)),
    };
    match done {
        Ok(()) => true,
        Err(d) => {
            eprintln!("error: {}", d.message);
            if let Some(help) = &d.help {
                eprintln!("  help: {help}");
            }
            if json {
                println!("{}", render::json_failure(&[d], None));
            }
            false
        }
    }
}

/// The recorded runs of `file`, oldest first; refused when there are none and `file`
/// does not exist.
fn runs_of(file: &Path) -> Result<Vec<(String, RunRecord)>, Diagnostic> {
    let base = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let runs = history::list(base, file);
    if runs.is_empty() {
        if let Err(e) = std::fs::metadata(file) {
            let file = escaped(&file.display().to_string());
            return Err(Diagnostic::error(
                "pipeline::manifest::unreadable",
                format!("cannot read {file}: {e}, and no runs of it are recorded"),
            )
            .help("pass the manifest's path: `pipeline runs FILE`"));
        }
    }
    Ok(runs)
}

/// `ran 2, cached 1`: how many stages ended how.
fn statuses(record: &RunRecord) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for s in &record.stages {
        match counts.iter_mut().find(|(k, _)| *k == s.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((s.status.clone(), 1)),
        }
    }
    counts
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The metrics a run is read by: each eval stage's accuracy (or R², else loss), else the
/// last train stage's loss.
pub(crate) fn headline(record: &RunRecord) -> String {
    let evals: Vec<String> = record
        .stages
        .iter()
        .filter(|s| s.kind == "eval")
        .filter_map(|s| {
            let m = &s.metrics;
            let (name, value) = ["accuracy", "r2", "loss"]
                .into_iter()
                .find_map(|k| Some((k, *m.get(k)?)))?;
            Some(format!(
                "{} {name} {}",
                s.name,
                crate::summary::value(value)
            ))
        })
        .collect();
    if !evals.is_empty() {
        return evals.join(", ");
    }
    record
        .stages
        .iter()
        .rev()
        .find(|s| s.kind == "train")
        .and_then(|s| {
            let loss = crate::summary::value(*s.metrics.get("loss")?);
            Some(format!("{} loss {loss}", s.name))
        })
        .unwrap_or_else(|| "-".into())
}

fn list(file: &Path, json: bool) -> Result<(), Diagnostic> {
    let runs = runs_of(file)?;
    if json {
        let runs: Vec<_> = runs
            .iter()
            .map(|(id, r)| json!({"id": id, "run": r}))
            .collect();
        println!("{}", json!({ "ok": true, "runs": runs }));
        return Ok(());
    }
    if runs.is_empty() {
        eprintln!(
            "no recorded runs of {} yet: `pipeline run {}` records one",
            file.display(),
            file.display()
        );
        return Ok(());
    }
    let mut rows = vec![["run", "ok", "stages", "seconds", "metrics", "fingerprint"]
        .map(String::from)
        .to_vec()];
    for (id, r) in &runs {
        let seconds: f64 = r.stages.iter().map(|s| s.seconds).sum();
        let train = r.stages.iter().find(|s| s.kind == "train");
        rows.push(vec![
            id.clone(),
            if r.ok { "yes" } else { "no" }.into(),
            statuses(r),
            format!("{seconds:.2}"),
            headline(r),
            train.map_or("-".into(), |s| s.fingerprint.chars().take(12).collect()),
        ]);
    }
    print!("{}", columns(&rows));
    Ok(())
}

/// The run `id` names.
fn find(
    runs: &[(String, RunRecord)],
    file: &Path,
    id: &str,
) -> Result<(String, RunRecord), Diagnostic> {
    match history::find(runs, id) {
        Ok((id, r)) => Ok((id.clone(), r.clone())),
        Err(why) => Err(
            Diagnostic::error("pipeline::runs::unknown_run", escaped(&why)).help(format!(
                "`pipeline runs {}` lists them",
                escaped(&file.display().to_string())
            )),
        ),
    }
}

fn show(file: &Path, id: &str, json: bool) -> Result<(), Diagnostic> {
    let runs = runs_of(file)?;
    let (id, r) = find(&runs, file, id)?;
    if json {
        println!("{}", json!({"ok": true, "id": id, "run": r}));
        return Ok(());
    }
    let line = format!(
        "run {id} of `{}` ({}) on {}: {}",
        r.pipeline,
        r.manifest.display(),
        r.device,
        if r.ok { "succeeded" } else { "failed" }
    );
    println!("{}", manifests::escape_controls(&line));
    print!("{}", columns(&stage_rows(&r)));
    Ok(())
}

/// A run's stages: a header, then a row each (status, time, fingerprint, metrics).
pub(crate) fn stage_rows(r: &RunRecord) -> Vec<Vec<String>> {
    let mut rows = vec![[
        "stage",
        "kind",
        "status",
        "seconds",
        "fingerprint",
        "metrics",
    ]
    .map(String::from)
    .to_vec()];
    for s in &r.stages {
        let metrics: Vec<String> = s
            .metrics
            .iter()
            .map(|(k, v)| format!("{k} {}", number(*v)))
            .collect();
        rows.push(vec![
            s.name.clone(),
            s.kind.clone(),
            s.status.clone(),
            format!("{:.2}", s.seconds),
            s.fingerprint.chars().take(12).collect(),
            metrics.join(", "),
        ]);
    }
    rows
}

/// A count as an integer, anything else to six decimals.
fn number(v: f64) -> String {
    match v.fract() == 0.0 && v.abs() < 1e15 {
        true => format!("{v:.0}"),
        false => format!("{v:.6}"),
    }
}

fn diff(file: &Path, a: &str, b: &str, json: bool) -> Result<(), Diagnostic> {
    let runs = runs_of(file)?;
    let (ia, ra) = find(&runs, file, a)?;
    let (ib, rb) = find(&runs, file, b)?;
    let stages = history::diff(&ra, &rb);
    if json {
        println!(
            "{}",
            json!({"ok": true, "from": ia, "to": ib, "stages": stages})
        );
        return Ok(());
    }
    println!("from run {ia} to run {ib}:");
    for s in &stages {
        let line = format!("{}: {}", s.name, s.change);
        println!("{}", manifests::escape_controls(&line));
        for reason in &s.reasons {
            println!("  {}", manifests::escape_controls(&reason.to_string()));
        }
        for (metric, values) in &s.metrics {
            let line = match values {
                (Some(x), Some(y)) => format!("{metric} {x:.6} → {y:.6} ({:+.6})", y - x),
                (Some(x), None) => format!("{metric} {x:.6} → none"),
                (None, Some(y)) => format!("{metric} none → {y:.6}"),
                (None, None) => continue,
            };
            println!("  {line}");
        }
    }
    Ok(())
}
