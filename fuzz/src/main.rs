//! `pipeline-fuzz [--seconds N] [--iterations N] [--seed S]`: fuzz `pipeline check`.
//! `pipeline-fuzz --time FILE [--set PATH=VALUE]...`: check one file and say how long it took.
//!
//! Failing inputs are written to `tests/fuzz-regressions/`; each input is written to
//! `target/fuzz-current.kdl` before it runs, so one that aborts the process is kept.
//! `scripts/fuzz.sh` runs this in the release profile.

use pipeline_fuzz::{oracle, regressions_dir, repository, seed_corpus, Config, Fuzzer, Input};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seconds = 60.0;
    let mut iterations = u64::MAX;
    let mut seed = None;
    let mut time = None;
    let mut sets = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--seconds" => seconds = value.parse().unwrap_or(seconds),
            "--iterations" => iterations = value.parse().unwrap_or(iterations),
            "--seed" => seed = value.parse().ok(),
            "--time" => time = Some(value),
            "--set" => sets.push(value),
            other => {
                eprintln!("unknown argument `{other}`; see the top of fuzz/src/main.rs");
                return ExitCode::from(2);
            }
        }
        i += 2;
    }

    if let Some(file) = time {
        let input = match Input::read(std::path::Path::new(&file)) {
            Ok(mut input) => {
                input.sets.extend(sets);
                input
            }
            Err(e) => {
                eprintln!("cannot read {file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        for (phase, took) in oracle::phases(&input) {
            println!("  {phase}: {took:?}");
        }
        oracle::quiet_panics();
        return match oracle::check(&input) {
            Ok(outcome) if outcome.elapsed > oracle::SLOW => {
                println!("{file}: {}", oracle::Failure::Slow(outcome.elapsed));
                ExitCode::FAILURE
            }
            Ok(outcome) => {
                println!(
                    "{file}: ok in {:?}, {} diagnostics",
                    outcome.elapsed,
                    outcome.codes.len()
                );
                ExitCode::SUCCESS
            }
            Err(failure) => {
                println!("{file}: {failure}");
                ExitCode::FAILURE
            }
        };
    }

    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let corpus = seed_corpus();
    let config = Config {
        seed,
        iterations,
        duration: Duration::from_secs_f64(seconds),
        save_failures: Some(regressions_dir()),
        current: Some(repository().join("target/fuzz-current.kdl")),
        slow_fails: true,
    };
    println!(
        "fuzzing `pipeline check`: seed {seed}, {} seed inputs, {seconds} s",
        corpus.len()
    );
    // The stack of a main thread, so that what overflows here overflows in `pipeline`.
    let report = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || Fuzzer::new(config, corpus).run())
        .expect("a thread starts")
        .join()
        .expect("the fuzzer catches every panic");
    let rate = report.inputs as f64 / report.elapsed.as_secs_f64().max(1e-9);
    println!(
        "{} inputs in {:.1} s ({rate:.0}/s); slowest {:?}; {} distinct diagnostic codes; {} failures",
        report.inputs,
        report.elapsed.as_secs_f64(),
        report.slowest,
        report.codes.len(),
        report.failures.len()
    );
    for ((input, failure), path) in report.failures.iter().zip(&report.saved) {
        println!(
            "  {}: {failure} ({} bytes, {} --set)",
            path.display(),
            input.text.len(),
            input.sets.len()
        );
    }
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
