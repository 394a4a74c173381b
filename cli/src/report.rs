//! `pipeline report [RUN…|FILE] --out report.html`: one self-contained page (no network,
//! no script) on a manifest's runs — the runs shown (the latest five that trained by
//! default), what changed from each to the next, their curves (`plot`'s charts, inline
//! SVG), the stages of the latest, its confusion matrices, and the cache as it stands.

use crate::cli::ReportArgs;
use crate::load::Loaded;
use crate::plot::{self, check_directory, write_atomically};
use crate::prepare;
use crate::runs::{headline, stage_rows};
use crate::shown_runs::{self, Refused, Shown};
use pipeline_core::freshness::Freshness;
use pipeline_core::history;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// Runs shown when none is named: the latest that trained.
const DEFAULT_RUNS: usize = 5;

/// The curves drawn, those of these the runs have.
const CURVES: &[&str] = &["loss", "val.loss", "val.accuracy", "step.loss"];

pub fn run(args: &ReportArgs) -> bool {
    match report(args) {
        Ok(()) => true,
        Err(refused) => {
            refused.print();
            false
        }
    }
}

fn report(args: &ReportArgs) -> Result<(), Refused> {
    let ext = args.out.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !matches!(ext.to_ascii_lowercase().as_str(), "html" | "htm") {
        return Err(Refused::new(
            format!("--out {}: a report is an .html file", args.out.display()),
            None,
        ));
    }
    check_directory(&args.out)?;
    let (file, runs) = shown_runs::split(&args.targets);
    let shown = shown_runs::choose(&file, &runs, DEFAULT_RUNS)?;
    let page = page(&file, &shown, args)?;
    write_atomically(&args.out, page.as_bytes())?;
    let ids: Vec<&str> = shown.iter().map(|s| s.id.as_str()).collect();
    eprintln!("wrote {} ({})", args.out.display(), ids.join(", "));
    Ok(())
}

/// `text` with HTML's special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A table of `rows` (already escaped HTML), the first its header.
fn table(rows: &[Vec<String>]) -> String {
    let mut html = String::from("<table>\n");
    for (i, row) in rows.iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        html += "<tr>";
        for c in row {
            let _ = write!(html, "<{cell}>{c}</{cell}>");
        }
        html += "</tr>\n";
    }
    html + "</table>\n"
}

fn number(x: f64) -> String {
    match x.abs() >= 1e4 || (x != 0.0 && x.abs() < 1e-3) {
        true => format!("{x:.3e}"),
        false => format!("{}", (x * 1e4).round() / 1e4),
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:1000px;color:#222}\
h1{margin-bottom:0}.sub{color:#666;margin-top:.3em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:.5em 0}th,td{padding:.25em .7em;border:1px solid #ddd;text-align:left}\
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.fresh{color:#2ca02c}.stale{color:#d62728}.chart svg{max-width:100%;height:auto}ul{margin:.3em 0}";

fn page(file: &Path, shown: &[Shown], args: &ReportArgs) -> Result<String, Refused> {
    let latest = shown.last().expect("at least one run is shown");
    let name = latest
        .record
        .as_ref()
        .map_or_else(|| file.display().to_string(), |r| r.pipeline.clone());
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{} · pipeline report</title><style>{STYLE}</style></head><body>\n\
         <h1>{}</h1><p class=\"sub\">{} · {} run{} shown</p>\n",
        escape(&name),
        escape(&name),
        escape(&file.display().to_string()),
        shown.len(),
        if shown.len() == 1 { "" } else { "s" },
    );
    html += &runs_section(shown);
    html += &changes_section(shown);
    html += &curves_section(shown)?;
    html += &stages_section(latest);
    html += &confusion_section(shown);
    html += &cache_section(file, args);
    html += "</body></html>\n";
    Ok(html)
}

fn runs_section(shown: &[Shown]) -> String {
    let mut rows = vec![["run", "result", "device", "stages", "metrics"]
        .map(String::from)
        .to_vec()];
    for s in shown {
        let row = match &s.record {
            Some(r) => vec![
                escape(&s.id),
                if r.ok { "ok" } else { "failed" }.into(),
                escape(&r.device),
                escape(
                    &r.stages
                        .iter()
                        .map(|st| format!("{} {}", st.name, st.status))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                escape(&headline(r)),
            ],
            None => vec![
                escape(&s.id),
                "did not end (killed?)".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        };
        rows.push(row);
    }
    format!("<h2>Runs</h2>\n{}", table(&rows))
}

/// What changed from each run shown to the next: settings and inputs, in words, and the
/// metrics' changes (`pipeline runs diff`).
fn changes_section(shown: &[Shown]) -> String {
    if shown.len() < 2 {
        return String::new();
    }
    let mut html = String::from("<h2>What changed between the runs</h2>\n");
    for pair in shown.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let _ = writeln!(html, "<h3>{} → {}</h3>", escape(&a.id), escape(&b.id));
        let (Some(ra), Some(rb)) = (&a.record, &b.record) else {
            html += "<p>One of them did not end: it has no record to compare.</p>\n";
            continue;
        };
        let diffs = history::diff(ra, rb);
        let mut items = String::new();
        for d in diffs.iter().filter(|d| d.change != "same") {
            let reasons = match d.reasons.is_empty() {
                true => d.change.clone(),
                false => pipeline_core::stale::joined(&d.reasons),
            };
            let _ = write!(
                items,
                "<li><b>{}</b>: {}</li>",
                escape(&d.name),
                escape(&reasons)
            );
        }
        html += &match items.is_empty() {
            true => "<p>The same settings and inputs.</p>\n".to_string(),
            false => format!("<ul>{items}</ul>\n"),
        };
        let mut rows = vec![["stage", "metric", "before", "after"]
            .map(String::from)
            .to_vec()];
        for d in &diffs {
            for (metric, (before, after)) in &d.metrics {
                let show = |x: &Option<f64>| x.map_or("-".into(), number);
                rows.push(vec![
                    escape(&d.name),
                    escape(metric),
                    show(before),
                    show(after),
                ]);
            }
        }
        if rows.len() > 1 {
            html += &table(&rows);
        }
    }
    html
}

fn curves_section(shown: &[Shown]) -> Result<String, Refused> {
    let metrics: Vec<String> = CURVES
        .iter()
        .filter(|m| {
            shown.iter().any(|s| {
                !s.records
                    .series(&pipeline_core::records::Metric(m.to_string()))
                    .is_empty()
            })
        })
        .map(|m| m.to_string())
        .collect();
    if metrics.is_empty() {
        return Ok("<h2>Curves</h2>\n<p>No training was recorded.</p>\n".into());
    }
    let panels = plot::panels(shown, &metrics)?;
    let svg = plot::svg(&panels, false)?;
    // The SVG's own XML declaration has no place inside HTML.
    let svg = svg.find("<svg").map_or(svg.as_str(), |start| &svg[start..]);
    Ok(format!(
        "<h2>Curves</h2>\n<div class=\"chart\">{svg}</div>\n"
    ))
}

fn stages_section(latest: &Shown) -> String {
    let Some(r) = &latest.record else {
        return String::new();
    };
    let rows: Vec<Vec<String>> = stage_rows(r)
        .iter()
        .map(|row| row.iter().map(|c| escape(c)).collect())
        .collect();
    format!(
        "<h2>Stages of run {}</h2>\n{}",
        escape(&latest.id),
        table(&rows)
    )
}

/// The confusion matrices of the latest run that has any, counts shaded by their share
/// of the true class (in indigo, a colour no curve has).
fn confusion_section(shown: &[Shown]) -> String {
    for s in shown.iter().rev() {
        let Ok(entries) = std::fs::read_dir(&s.dir) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with("-confusion-matrix.json"))
            })
            .collect();
        files.sort();
        let matrices: Vec<String> = files
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter_map(|m| confusion_matrix(&m))
            .collect();
        if !matrices.is_empty() {
            return format!(
                "<h2>Confusion matrix (run {})</h2>\n{}",
                escape(&s.id),
                matrices.concat()
            );
        }
    }
    String::new()
}

fn confusion_matrix(m: &Value) -> Option<String> {
    let classes: Vec<&str> = m["classes"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let rows: Vec<Vec<u64>> = m["matrix"]
        .as_array()?
        .iter()
        .map(|r| {
            r.as_array()
                .map(|r| r.iter().filter_map(Value::as_u64).collect())
        })
        .collect::<Option<_>>()?;
    let mut html = format!(
        "<p>stage <b>{}</b>, split {}: rows are the true class, columns the predicted one</p>\n<table>\n<tr><th></th>",
        escape(m["stage"].as_str().unwrap_or("")),
        escape(m["split"].as_str().unwrap_or(""))
    );
    for c in &classes {
        let _ = write!(html, "<th>{}</th>", escape(c));
    }
    html += "</tr>\n";
    for (i, row) in rows.iter().enumerate() {
        let total: u64 = row.iter().sum::<u64>().max(1);
        let _ = write!(
            html,
            "<tr><th>{}</th>",
            escape(classes.get(i).copied().unwrap_or(""))
        );
        for n in row {
            let alpha = *n as f64 / total as f64;
            // White on the dark cells.
            let ink = if alpha > 0.5 { "#fff" } else { "#222" };
            let _ = write!(
                html,
                "<td class=\"n\" style=\"background:rgba(60,60,140,{alpha:.2});color:{ink}\">{n}</td>"
            );
        }
        html += "</tr>\n";
    }
    Some(html + "</table>\n")
}

/// Each stage of the manifest as the cache has it now (`pipeline status`).
fn cache_section(file: &Path, args: &ReportArgs) -> String {
    let loaded = Loaded::read_to_run(file, &[], &args.cache);
    let Some(manifest) = loaded.checked.valid() else {
        let why = loaded
            .checked
            .diagnostics
            .first()
            .map_or("it has errors".into(), |d| d.message.clone());
        return format!(
            "<h2>Cache</h2>\n<p>{} cannot be checked now: {}</p>\n",
            escape(&file.display().to_string()),
            escape(&why)
        );
    };
    let prepared = match prepare::prepare_to_look(file, manifest, &args.cache) {
        Ok(p) => p,
        Err(d) => {
            return format!(
                "<h2>Cache</h2>\n<p>The cache cannot be read: {}</p>\n",
                escape(&d.message)
            )
        }
    };
    let root = prepare::cache_root(&args.cache, &manifest.base_dir);
    let mut rows = vec![["stage", "kind", "state", "why it would run"]
        .map(String::from)
        .to_vec()];
    for s in &prepared.states {
        let stage = &manifest.stages[s.index];
        let (state, why) = match &s.freshness {
            Freshness::Fresh(_) => ("<span class=\"fresh\">fresh</span>", String::new()),
            Freshness::Stale(reasons) => (
                "<span class=\"stale\">stale</span>",
                pipeline_core::stale::joined(reasons),
            ),
        };
        rows.push(vec![
            escape(stage.name()),
            stage.kind().as_str().into(),
            state.into(),
            escape(&why),
        ]);
    }
    let fresh = prepared.states.iter().filter(|s| s.is_fresh()).count();
    format!(
        "<h2>Cache</h2>\n<p>{fresh} of {} stages fresh in {}</p>\n{}",
        prepared.states.len(),
        escape(&root.display().to_string()),
        table(&rows)
    )
}
