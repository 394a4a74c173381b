//! `pipeline run FILE`: check, plan, execute, summarise.

use crate::progress::{self, percent};
use backends::{RunReport, StageStatus};
use manifests::{suggest, Diagnostic, Override};
use pipeline_cli::load::Loaded;
use pipeline_cli::render;
use pipeline_core::Plan;
use serde_json::json;
use std::path::Path;

pub fn run(file: &Path, stage: Option<&str>, overrides: &[Override], json: bool) -> bool {
    let loaded = Loaded::read(file, overrides);
    let Some(manifest) = loaded.report() else {
        return false;
    };
    let source = loaded.source.as_ref();
    let fail = |d: Diagnostic| {
        eprintln!("{}", render::human(&d, source));
        if json {
            println!(
                "{}",
                json!({ "pipeline": manifest.name, "error": render::json(&d, source), "stages": [] })
            );
        }
        false
    };

    let plan = Plan::new(manifest);
    let order = match stage {
        None => plan.order.clone(),
        Some(name) => match manifest.stages.iter().position(|s| s.name() == name) {
            Some(i) => plan.upto(i),
            None => {
                let names: Vec<&str> = manifest.stages.iter().map(|s| s.name()).collect();
                return fail(
                    Diagnostic::error(
                        "pipeline::run::unknown_stage",
                        format!("--stage {name}: the manifest has no such stage"),
                    )
                    .help(suggest::help_for(name, "stage", &names)),
                );
            }
        },
    };

    let mut hashed = source.map(|s| s.text.clone()).unwrap_or_default();
    for o in overrides {
        hashed += &format!("\n--set {o}");
    }
    let manifest_hash = cache::hash_bytes(hashed.as_bytes());

    let mut observer = progress::for_stderr(json);
    let report = match backends::run(manifest, &order, &manifest_hash, observer.as_mut()) {
        Ok(r) => r,
        Err(d) => return fail(d),
    };
    for s in &report.stages {
        if let Some(e) = &s.error {
            eprintln!("{}", render::human(e, source));
        }
    }
    if json {
        println!("{}", report_json(&report, source));
    } else {
        print!("{}", summary(&report));
    }
    report.ok()
}

fn report_json(report: &RunReport, source: Option<&render::Source>) -> serde_json::Value {
    let stages: Vec<_> = report
        .stages
        .iter()
        .map(|s| {
            let mut v = json!({
                "name": s.name,
                "kind": s.kind.as_str(),
                "status": s.status,
                "seconds": s.seconds,
                "metrics": s.metrics,
                "outputs": s.outputs,
            });
            if let Some(e) = &s.error {
                v["error"] = render::json(e, source);
            }
            v
        })
        .collect();
    json!({ "pipeline": report.pipeline, "run_dir": report.run_dir, "device": report.device, "stages": stages })
}

/// The table printed at the end of a run.
fn summary(report: &RunReport) -> String {
    let mut rows = vec![[
        "stage", "kind", "status", "time", "loss", "accuracy", "output",
    ]
    .map(String::from)
    .to_vec()];
    for s in &report.stages {
        let status = match s.status {
            StageStatus::Ran => "ran",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
        };
        let accuracy = s.metrics.get("accuracy").or(s.metrics.get("val_accuracy"));
        rows.push(vec![
            s.name.clone(),
            s.kind.as_str().to_string(),
            status.to_string(),
            format!("{:.2}s", s.seconds),
            s.metrics
                .get("loss")
                .map_or("-".into(), |l| format!("{l:.4}")),
            accuracy.map_or("-".into(), |a| percent(*a)),
            s.outputs
                .first()
                .map_or(String::new(), |p| p.display().to_string()),
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "\n{} · run directory {}\n",
        report.pipeline,
        report.run_dir.display()
    );
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}
