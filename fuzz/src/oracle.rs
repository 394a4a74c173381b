//! What `pipeline check` promises for any input, checked on one input: it does what
//! `pipeline check --json FILE --set …` and `pipeline check FILE` do, in-process.
//!
//! - no panic (run under `catch_unwind`; the panic's message and place are kept);
//! - the `--json` output is one valid JSON document `{"ok", "diagnostics": [...]}` whose
//!   entries have a code, a severity, a message and a 1-based position or none;
//! - every diagnostic has a stable `pipeline::` code, a message, a help line, and labels
//!   inside the text on character boundaries;
//! - the whole answer (parsing, lowering, checking, both renderings) takes less than
//!   [`SLOW`] of CPU time
//!   (judged by the driver, and not in `cargo test`: timings there depend on the load).

use crate::Input;
use manifests::render::{self, Source};
use manifests::{has_errors, Diagnostic, Override};
use serde_json::Value;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

/// An input answered slower than this is a failure.
pub const SLOW: Duration = Duration::from_secs(1);

/// What a passing input did.
#[derive(Debug)]
pub struct Outcome {
    pub elapsed: Duration,
    pub codes: Vec<String>,
}

/// Why an input failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Panic(String),
    InvalidJson(String),
    BadDiagnostic(String),
    Slow(Duration),
}

impl Failure {
    /// A short word for file names.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Panic(_) => "panic",
            Failure::InvalidJson(_) => "json",
            Failure::BadDiagnostic(_) => "diagnostic",
            Failure::Slow(_) => "slow",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Panic(m) => write!(f, "panicked: {m}"),
            Failure::InvalidJson(m) => write!(f, "--json printed no valid document: {m}"),
            Failure::BadDiagnostic(m) => write!(f, "bad diagnostic: {m}"),
            Failure::Slow(d) => write!(f, "took {d:?} (limit {SLOW:?})"),
        }
    }
}

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the panic hook with one that keeps the message instead of printing it.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        let at = info
            .location()
            .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{text}{at}")));
    }));
}

/// CPU time of this process (the fuzzer runs one input at a time; the KDL parser runs on
/// a thread of its own): what an input costs, whatever else the machine runs (wall-clock
/// time on a machine shared with builds says more about them than about the input).
fn cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Checks one input; `Ok` says how much CPU time it took (the caller judges that: see
/// [`crate::Config::slow_fails`]) and which codes it produced.
pub fn check(input: &Input) -> Result<Outcome, Failure> {
    let start = cpu_time();
    let result = catch_unwind(AssertUnwindSafe(|| run(input)));
    let elapsed = cpu_time().saturating_sub(start);
    let codes = match result {
        Ok(Ok(codes)) => codes,
        Ok(Err(failure)) => return Err(failure),
        Err(_) => {
            let message = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "(no message)".into());
            return Err(Failure::Panic(message));
        }
    };
    Ok(Outcome { elapsed, codes })
}

/// `pipeline check --json` and `pipeline check` on the input; the codes it reported.
fn run(input: &Input) -> Result<Vec<String>, Failure> {
    let mut overrides = Vec::new();
    for set in &input.sets {
        match Override::parse(set) {
            Ok(o) => overrides.push(o),
            Err(message) => {
                // `pipeline check --json` answers a malformed `--set` with this document.
                let d = Diagnostic::error("pipeline::cli::usage", message)
                    .help("`--set` takes PATH=VALUE, for example `--set optimizer.lr=3e-4`");
                check_json(&render::json_failure(&[d], None), None)?;
                return Ok(vec!["pipeline::cli::usage".into()]);
            }
        }
    }
    let checked = pipeline_core::load(&input.text, Path::new("fuzz.kdl"), &overrides);
    let source = Source {
        name: "fuzz.kdl".into(),
        text: input.text.clone(),
    };
    for d in &checked.diagnostics {
        check_diagnostic(d, &input.text)?;
    }
    let ok = !has_errors(&checked.diagnostics);
    let document = serde_json::json!({
        "ok": ok,
        "diagnostics": render::json_all(&checked.diagnostics, Some(&source)),
    });
    check_json(&document, Some(checked.diagnostics.len()))?;
    let human = render::human_report(&checked.diagnostics, Some(&source));
    if !checked.diagnostics.is_empty() && human.is_empty() {
        return Err(Failure::BadDiagnostic("the human report is empty".into()));
    }
    Ok(checked
        .diagnostics
        .iter()
        .map(|d| d.code.to_string())
        .collect())
}

fn check_diagnostic(d: &Diagnostic, text: &str) -> Result<(), Failure> {
    let bad = |what: String| Err(Failure::BadDiagnostic(format!("{} ({what})", d.code)));
    if !d.code.starts_with("pipeline::") {
        return bad("the code is not a `pipeline::` code".into());
    }
    if d.message.trim().is_empty() {
        return bad("no message".into());
    }
    if d.help.as_deref().is_none_or(|h| h.trim().is_empty()) {
        return bad(format!("no help line: {}", d.message));
    }
    for label in &d.labels {
        let (a, n) = (label.span.offset(), label.span.len());
        let inside = a <= text.len()
            && n <= text.len() - a
            && text.is_char_boundary(a)
            && text.is_char_boundary(a + n);
        if !inside {
            return bad(format!(
                "label `{}` at {a}+{n} is outside the text of {} bytes",
                label.text,
                text.len()
            ));
        }
    }
    Ok(())
}

fn check_json(document: &Value, count: Option<usize>) -> Result<(), Failure> {
    let printed = document.to_string();
    let parsed: Value =
        serde_json::from_str(&printed).map_err(|e| Failure::InvalidJson(e.to_string()))?;
    let invalid = |m: &str| Err(Failure::InvalidJson(m.into()));
    if !parsed["ok"].is_boolean() {
        return invalid("no boolean `ok`");
    }
    let Some(diags) = parsed["diagnostics"].as_array() else {
        return invalid("no `diagnostics` array");
    };
    if count.is_some_and(|n| n != diags.len()) {
        return invalid("`diagnostics` does not list every diagnostic");
    }
    for d in diags {
        if !d["code"]
            .as_str()
            .is_some_and(|c| c.starts_with("pipeline::"))
        {
            return invalid("a diagnostic without a `pipeline::` code");
        }
        for key in ["line", "column"] {
            if !(d[key].is_null() || d[key].as_u64().is_some_and(|n| n >= 1)) {
                return invalid("a position that is not a 1-based number");
            }
        }
    }
    Ok(())
}

/// How long each step of `check` takes on `input`: parsing, lowering, the rules, and the
/// two renderings (for `pipeline-fuzz --time`, to find where a slow input spends it).
pub fn phases(input: &Input) -> Vec<(&'static str, Duration)> {
    let overrides: Vec<Override> = input
        .sets
        .iter()
        .filter_map(|s| Override::parse(s).ok())
        .collect();
    let mut out = Vec::new();
    let t = Instant::now();
    let parsed = kdl::KdlDocument::parse(&input.text).is_ok();
    out.push((
        if parsed {
            "kdl parse"
        } else {
            "kdl parse (failed)"
        },
        t.elapsed(),
    ));
    let t = Instant::now();
    let lowered = manifests::lower(&input.text, "fuzz", Path::new("."), &overrides);
    out.push(("nesting + kdl parse + lower", t.elapsed()));
    let t = Instant::now();
    let rules = lowered
        .manifest
        .as_ref()
        .map_or(0, |m| pipeline_core::check(m).len());
    out.push(("rules", t.elapsed()));
    let mut diagnostics = lowered.diagnostics;
    diagnostics.extend((0..rules).map(|_| Diagnostic::error("pipeline::x", "x")));
    let source = Source {
        name: "fuzz.kdl".into(),
        text: input.text.clone(),
    };
    let t = Instant::now();
    let json = serde_json::to_string(&render::json_all(&diagnostics, Some(&source)));
    out.push(("json", t.elapsed()));
    let t = Instant::now();
    let human = render::human_report(&diagnostics, Some(&source));
    out.push(("human", t.elapsed()));
    drop((json, human));
    out
}
