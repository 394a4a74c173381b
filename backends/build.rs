//! Makes every binary that links libtorch (the `pipeline` command, the tests) find it
//! without `LD_LIBRARY_PATH`, and see CUDA. Used by `backends` and by the root package
//! (`build = "backends/build.rs"`), each of which depends on torch-sys directly.
//!
//! torch-sys passes `-Wl,-rpath` only to its own C++ build, so the final binary gets no
//! rpath to `torch/lib`; and rustc links with `--as-needed`, which drops
//! `libtorch_cuda.so` (no symbol of it is referenced), so CUDA would never be available.
//! `DEP_TCH_LIBTORCH_LIB` reaches this script because `torch-sys` is a direct dependency.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!(
            "cargo:warning=DEP_TCH_LIBTORCH_LIB is not set: binaries will need LD_LIBRARY_PATH"
        );
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    if std::path::Path::new(&lib).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
