//! Every diagnostic code the project's code can produce is produced by a test: its code
//! appears in a test (a `tests/` file, a `#[cfg(test)]` module) or in a fixture that a
//! test compares whole (`tests/fixtures/`). The codes no test reaches yet are listed in
//! [`NOT_YET_TESTED`]: the list may only shrink — a new code without a test fails here,
//! and so does a listed code that a test now reaches (take it off the list).

use std::collections::BTreeSet;
use std::path::Path;

/// Codes no test produces yet (issue 34 part 6), to be covered and taken off.
const NOT_YET_TESTED: &[&str] = &[
    "pipeline::accelerator::deterministic",
    "pipeline::cache::bad_weights",
    "pipeline::cache::entry_incomplete",
    "pipeline::data::workers",
    "pipeline::launch::collective_failed",
    "pipeline::model::allocation",
    "pipeline::run::internal",
    "pipeline::train::callback_failed",
    "pipeline::train::keep_best_failed",
    "pipeline::train::optimizer",
];

/// Every `pipeline::SECTION::NAME` in `text`.
fn codes(text: &str, out: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(at) = rest.find("pipeline::") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let code = &tail[..end];
        if code.matches("::").count() == 2 && !code.ends_with(':') {
            out.insert(code.to_string());
        }
        rest = &tail[end.max("pipeline::".len())..];
    }
}

/// The codes the code can produce (string literals outside tests), and those the tests
/// and fixtures name.
fn scan(dir: &Path, in_tests: bool, made: &mut BTreeSet<String>, tested: &mut BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name.starts_with('.') || name == "target" || name == "fuzz" {
                continue;
            }
            scan(&path, in_tests || name == "tests", made, tested);
            continue;
        }
        // This file lists codes, and produces none.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if name == "diagnostic_coverage.rs" {
            continue;
        }
        if name.ends_with(".rs") && !in_tests {
            // A module's tests follow its `#[cfg(test)]`.
            let (body, tests) = text.split_at(text.find("#[cfg(test)]").unwrap_or(text.len()));
            let mut literals = BTreeSet::new();
            codes(body, &mut literals);
            // Only quoted codes are produced; a doc comment may name one.
            made.extend(
                literals
                    .into_iter()
                    .filter(|c| body.contains(&format!("\"{c}\""))),
            );
            codes(tests, tested);
        } else if in_tests {
            codes(&text, tested);
        }
    }
}

#[test]
fn every_diagnostic_code_is_produced_by_a_test_or_listed_as_not_yet() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (mut made, mut tested) = (BTreeSet::new(), BTreeSet::new());
    scan(&root, false, &mut made, &mut tested);
    assert!(made.len() > 200, "the scan found the code: {}", made.len());
    let listed: BTreeSet<String> = NOT_YET_TESTED.iter().map(|c| c.to_string()).collect();
    let untested: Vec<&String> = made
        .iter()
        .filter(|c| !tested.contains(*c) && !listed.contains(*c))
        .collect();
    assert!(
        untested.is_empty(),
        "no test produces {untested:?}: add one (a test that asserts the code, or a fixture)"
    );
    let stale: Vec<&String> = listed
        .iter()
        .filter(|c| tested.contains(*c) || !made.contains(*c))
        .collect();
    assert!(
        stale.is_empty(),
        "{stale:?} are tested now (or gone): take them off NOT_YET_TESTED"
    );
    eprintln!(
        "{} codes, {} produced by tests, {} not yet",
        made.len(),
        made.len() - listed.len(),
        listed.len()
    );
}
