//! `PIPELINE_LIBTORCH_VERSION` (from `torch/version.py`, found through
//! `DEP_TCH_LIBTORCH_LIB`, which reaches this script because `torch-sys` is a direct
//! dependency), part of every cache key: `pipeline` decides what is cached without
//! loading libtorch.

/// `__version__ = '2.13.0+cu130'` in torch's `version.py` → `2.13.0+cu130`.
fn libtorch_version(lib: &str) -> Option<String> {
    let path = std::path::Path::new(lib).parent()?.join("version.py");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with("__version__"))?;
    Some(line.split(['\'', '"']).nth(1)?.to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB");
    let version = lib
        .ok()
        .as_deref()
        .and_then(libtorch_version)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PIPELINE_LIBTORCH_VERSION={version}");
}
