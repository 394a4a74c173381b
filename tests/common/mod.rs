//! What the end-to-end tests share: running the binary, fixtures, a project directory.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn pipeline(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PIPELINE_CACHE_DIR")
        .output()
        .expect("the pipeline binary runs")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Compares `actual` with the fixture file, or rewrites it under PIPELINE_BLESS=1.
pub fn assert_fixture(name: &str, actual: &str) {
    let path = root().join("tests/fixtures").join(name);
    if std::env::var_os("PIPELINE_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing; run with PIPELINE_BLESS=1", path.display()));
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

/// The digits example in a fresh directory (so runs write there, not into examples/).
pub fn digits_project() -> tempfile::TempDir {
    let data = root().join("examples/data/digits.csv.gz");
    assert!(
        data.is_file(),
        "{} is missing: run scripts/setup.sh (scripts/test.sh does)",
        data.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::copy(&data, dir.path().join("data/digits.csv.gz")).unwrap();
    std::fs::copy(
        root().join("examples/digits.kdl"),
        dir.path().join("digits.kdl"),
    )
    .unwrap();
    dir
}
