//! A structure-aware mutation fuzzer for `pipeline check`, on stable Rust.
//!
//! `pipeline check` reads a manifest and `--set` overrides, lowers and checks them
//! (`pipeline_core::load`) and renders every diagnostic for a person or as JSON
//! (`manifests::render`). None of that touches libtorch, so this crate drives exactly that
//! code in-process, many thousand inputs a minute:
//!
//! - inputs start from a seed corpus (every `.kdl` of `examples/`, `bench/manifests/`,
//!   `tests/fixtures/` and `tests/fuzz-regressions/`) and are mutated by [`mutate`]:
//!   byte and character edits, KDL tokens inserted, deleted and duplicated, nodes spliced
//!   between corpus files, huge and negative integers, deep nesting, long strings and
//!   lines, odd Unicode, many repeated keys, and random `--set PATH=VALUE` built from the
//!   schema's paths;
//! - every input runs under `catch_unwind` and [`oracle::check`] asserts what `check`
//!   promises: no panic, one valid JSON document, diagnostics with a stable code, a help
//!   line and labels inside the text, and an answer within [`oracle::SLOW`];
//! - the PRNG is seeded ([`rng::Rng`]), so a run is reproducible from its seed;
//! - an input that fails is written to `tests/fuzz-regressions/` (`NAME.kdl`, and
//!   `NAME.sets` with its overrides, one per line), and `tests/replay.rs` replays every
//!   file there on each `cargo test`.
//!
//! The honest limitation: a stack overflow aborts the process and cannot be caught; the
//! driver writes each input to a file before running it ([`Fuzzer::current`]), so the
//! input that killed it is on disk. That is why `manifests::lower` bounds nesting
//! before it hands text to the recursive KDL parser.

pub mod mutate;
pub mod oracle;
pub mod rng;

use oracle::{Failure, Outcome};
use rng::Rng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One input of `pipeline check`: the manifest's text and its `--set` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub text: String,
    pub sets: Vec<String>,
}

impl Input {
    /// Reads `NAME.kdl` and, when present, `NAME.sets` (one `--set` a line).
    pub fn read(path: &Path) -> std::io::Result<Input> {
        let bytes = std::fs::read(path)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let sets = match std::fs::read_to_string(path.with_extension("sets")) {
            Ok(s) => s.lines().map(str::to_string).collect(),
            Err(_) => Vec::new(),
        };
        Ok(Input { text, sets })
    }

    /// Writes `NAME.kdl` (and `NAME.sets` when there are overrides) into `dir`.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{name}.kdl"));
        std::fs::write(&path, &self.text)?;
        if !self.sets.is_empty() {
            std::fs::write(path.with_extension("sets"), self.sets.join("\n") + "\n")?;
        }
        Ok(path)
    }
}

/// The repository's root (this crate is `fuzz/` in it).
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/ is inside the repository")
        .to_path_buf()
}

/// Where inputs that failed are kept, and replayed by `cargo test`.
pub fn regressions_dir() -> PathBuf {
    repository().join("tests/fuzz-regressions")
}

/// Every `.kdl` under the seed directories, sorted by path.
pub fn seed_corpus() -> Vec<Input> {
    let root = repository();
    let mut paths = Vec::new();
    for dir in [
        "examples",
        "bench/manifests",
        "tests/fixtures",
        "tests/fuzz-regressions",
    ] {
        collect_kdl(&root.join(dir), &mut paths);
    }
    paths.sort();
    paths.iter().filter_map(|p| Input::read(p).ok()).collect()
}

fn collect_kdl(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_kdl(&path, out);
        } else if path.extension().is_some_and(|e| e == "kdl") {
            out.push(path);
        }
    }
}

/// How long and how hard to fuzz.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    /// Stop after this many inputs…
    pub iterations: u64,
    /// …or after this long, whichever comes first.
    pub duration: Duration,
    /// Where failing inputs are written (`None`: not written).
    pub save_failures: Option<PathBuf>,
    /// Each input is written here before it runs, so one that aborts the process (a
    /// stack overflow) is not lost.
    pub current: Option<PathBuf>,
    /// Whether an input slower than [`oracle::SLOW`] is a failure (in `scripts/fuzz.sh`;
    /// not in `cargo test`, whose machine may be busy with other builds).
    pub slow_fails: bool,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    pub inputs: u64,
    pub elapsed: Duration,
    pub slowest: Duration,
    pub slowest_input: Option<Input>,
    pub failures: Vec<(Input, Failure)>,
    pub saved: Vec<PathBuf>,
    /// Distinct diagnostic codes seen: a rough measure of how much of `check` was reached.
    pub codes: std::collections::BTreeSet<String>,
}

/// The fuzzing loop.
pub struct Fuzzer {
    pub config: Config,
    pub corpus: Vec<Input>,
}

impl Fuzzer {
    pub fn new(config: Config, corpus: Vec<Input>) -> Fuzzer {
        assert!(!corpus.is_empty(), "the seed corpus is empty");
        Fuzzer { config, corpus }
    }

    pub fn run(&mut self) -> Report {
        oracle::quiet_panics();
        let mut rng = Rng::new(self.config.seed);
        let mut report = Report::default();
        let start = Instant::now();
        while report.inputs < self.config.iterations && start.elapsed() < self.config.duration {
            let base = &self.corpus[rng.below(self.corpus.len())];
            let input = mutate::mutate(&mut rng, base, &self.corpus);
            if let Some(current) = &self.config.current {
                let _ = input.write(
                    current.parent().unwrap_or(Path::new(".")),
                    &current
                        .file_stem()
                        .map_or("current".into(), |s| s.to_string_lossy().into_owned()),
                );
            }
            report.inputs += 1;
            let result = match oracle::check(&input) {
                Ok(o) if self.config.slow_fails && o.elapsed > oracle::SLOW => {
                    Err(Failure::Slow(o.elapsed))
                }
                other => other,
            };
            match result {
                Ok(Outcome { elapsed, codes }) => {
                    if elapsed > report.slowest {
                        report.slowest = elapsed;
                        report.slowest_input = Some(input.clone());
                    }
                    report.codes.extend(codes);
                    // Some small inputs become seeds themselves, so mutations compound.
                    if self.corpus.len() < 4096 && input.text.len() < 8192 && rng.one_in(64) {
                        self.corpus.push(input);
                    }
                }
                Err(failure) => {
                    if let Some(dir) = &self.config.save_failures {
                        let name = format!("{}-{:016x}", failure.kind(), hash(&input));
                        if let Ok(path) = input.write(dir, &name) {
                            report.saved.push(path);
                        }
                    }
                    report.failures.push((input, failure));
                }
            }
        }
        report.elapsed = start.elapsed();
        report
    }
}

/// FNV-1a of the input, to name a saved failure.
fn hash(input: &Input) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in input
        .text
        .bytes()
        .chain(input.sets.iter().flat_map(|s| s.bytes()))
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}
