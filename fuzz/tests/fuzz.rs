//! The fuzzer in every `cargo test`: each input it ever failed on, replayed, and a short
//! seeded run (about 1,500 inputs; `scripts/fuzz.sh SECONDS` runs a longer one).

use pipeline_fuzz::{oracle, regressions_dir, seed_corpus, Config, Fuzzer, Input};
use std::time::Duration;

/// Runs `f` on a thread with a main thread's stack (test threads have 2 MiB), so that a
/// regression that overflowed `pipeline`'s stack would overflow here too.
fn on_main_sized_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn every_input_the_fuzzer_failed_on_now_passes() {
    let mut paths: Vec<_> = std::fs::read_dir(regressions_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kdl"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "tests/fuzz-regressions/ has no inputs");
    let failures = on_main_sized_stack(move || {
        oracle::quiet_panics();
        paths
            .iter()
            .filter_map(|p| {
                let input = Input::read(p).unwrap();
                oracle::check(&input)
                    .err()
                    .map(|f| format!("{}: {f}", p.display()))
            })
            .collect::<Vec<_>>()
    });
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_short_seeded_run_finds_nothing() {
    let config = Config {
        seed: 20_251_201,
        iterations: 1500,
        duration: Duration::from_secs(30),
        save_failures: None,
        current: None,
        slow_fails: false,
    };
    let report = on_main_sized_stack(move || Fuzzer::new(config, seed_corpus()).run());
    println!(
        "{} inputs in {:?}; slowest {:?}; {} codes",
        report.inputs,
        report.elapsed,
        report.slowest,
        report.codes.len()
    );
    let failures: Vec<String> = report
        .failures
        .iter()
        .map(|(input, f)| {
            format!(
                "{f}\n  --set {:?}\n  {:?}",
                input.sets,
                input.text.chars().take(400).collect::<String>()
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "write these into tests/fuzz-regressions/ (scripts/fuzz.sh does) and fix them:\n{}",
        failures.join("\n")
    );
}
