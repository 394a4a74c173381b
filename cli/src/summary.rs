//! How a finished run is shown: a table on stdout, or one JSON object with `--json`.

use crate::render::{self, Source};
use pipeline_core::report::{RunReport, StageResult, StageStatus};
use serde_json::{json, Value};

pub fn percent(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A loss or a metric as tables and progress lines show it: four decimals, or four
/// significant digits with an exponent from a million up (a diverging loss is not forty
/// digits wide).
pub fn value(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e6 {
        format!("{v:.3e}")
    } else {
        format!("{v:.4}")
    }
}

/// The line shown when a stage finishes: `✓ train (train): done in 2.71s`.
pub fn stage_line(r: &StageResult) -> String {
    let status = match r.status {
        StageStatus::Ran => format!("done in {:.2}s", r.seconds),
        StageStatus::Cached => "cached".into(),
        StageStatus::Failed
            if r.error
                .as_ref()
                .is_some_and(|e| e.code == pipeline_core::launch::STOPPED) =>
        {
            format!("stopped by a signal after {:.2}s", r.seconds)
        }
        StageStatus::Failed => format!("FAILED after {:.2}s", r.seconds),
        // Not started for a reason of its own: a signal stopped the run.
        StageStatus::Skipped if r.error.is_some() => "not started: a signal stopped the run".into(),
        StageStatus::Skipped => "skipped (a stage it needs failed)".into(),
    };
    let mark = if r.status.succeeded() { "✓" } else { "✗" };
    let name = manifests::escape_controls(&r.name);
    format!("{mark} {name} ({}): {status}", r.kind.as_str())
}

fn stage_json(s: &StageResult, source: Option<&Source>) -> Value {
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
    if !s.metrics_std.is_empty() {
        v["metrics_std"] = json!(s.metrics_std);
    }
    if let Some(init) = &s.init {
        v["init"] = json!(init);
    }
    if let Some(epoch) = s.resumed_at {
        v["resumed_at_epoch"] = json!(epoch);
    }
    if let Some((epoch, reason)) = &s.stopped {
        v["stopped"] = json!({"epoch": epoch, "reason": reason});
    }
    if !s.best.is_empty() {
        // Serialised without the path (as in the cache entry); here it helps.
        let best: Vec<Value> = s
            .best
            .iter()
            .map(|k| {
                let mut b = json!(k);
                b["path"] = json!(k.path);
                b
            })
            .collect();
        v["best"] = json!(best);
    }
    v
}

/// `{"pipeline", "run_dir", "device", "stages": [...]}`.
pub fn json(report: &RunReport, source: Option<&Source>) -> Value {
    let stages: Vec<_> = report
        .stages
        .iter()
        .map(|s| stage_json(s, source))
        .collect();
    json!({ "ok": report.ok(), "pipeline": report.pipeline, "run_dir": report.run_dir, "device": report.device, "stages": stages })
}

/// The table printed at the end of a run.
pub fn table(report: &RunReport) -> String {
    let mut rows = vec![[
        "stage", "kind", "status", "time", "loss", "accuracy", "output",
    ]
    .map(String::from)
    .to_vec()];
    for s in &report.stages {
        let accuracy = match s.metrics.get("accuracy") {
            Some(a) => Some(("accuracy", a)),
            None => s.metrics.get("val_accuracy").map(|a| ("val_accuracy", a)),
        };
        // Over the folds of k-fold cross-validation: the mean ± the standard deviation.
        let spread = |name: &str, shown: &dyn Fn(f64) -> String| match s.metrics_std.get(name) {
            Some(&sd) => format!(" ± {}", shown(sd)),
            None => String::new(),
        };
        rows.push(vec![
            s.name.clone(),
            s.kind.as_str().to_string(),
            s.status.as_str().to_string(),
            match s.status {
                StageStatus::Ran | StageStatus::Failed => format!("{:.2}s", s.seconds),
                StageStatus::Cached | StageStatus::Skipped => "-".into(),
            },
            s.metrics
                .get("loss")
                .map_or("-".into(), |&l| value(l) + &spread("loss", &value)),
            match (accuracy, s.metrics.get("r2")) {
                (Some((name, a)), _) => percent(*a) + &spread(name, &percent),
                (None, Some(r2)) => format!("R² {r2:.3}") + &spread("r2", &|x| format!("{x:.3}")),
                (None, None) => "-".into(),
            },
            s.outputs
                .first()
                .map_or(String::new(), |p| p.display().to_string()),
        ]);
    }
    let mut out = match &report.run_dir {
        Some(dir) => format!("\n{} · run directory {}\n", report.pipeline, dir.display()),
        None => format!("\n{} · every stage was cached\n", report.pipeline),
    };
    out += &columns(&rows);
    out
}

/// Rows as left-aligned columns two spaces apart, without trailing blanks.
/// The cells' control characters are shown escaped (a stage name is the user's).
pub fn columns(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| manifests::escape_controls(c).into_owned())
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
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

#[cfg(test)]
mod tests {
    use super::value;

    #[test]
    fn a_value_is_four_decimals_or_an_exponent_from_a_million() {
        assert_eq!(value(0.16878), "0.1688");
        assert_eq!(value(-2.5), "-2.5000");
        assert_eq!(value(999_999.0), "999999.0000");
        assert_eq!(value(1.290_079e37), "1.290e37");
        assert_eq!(value(-4.2e6), "-4.200e6");
        assert_eq!(value(f64::INFINITY), "inf");
        assert_eq!(value(f64::NAN), "NaN");
    }
}
