//! Makes every binary that links libtorch (the `pipeline` command, the tests) find it
//! without `LD_LIBRARY_PATH`, and see CUDA. Used by `backends` and by the root package
//! (`build = "backends/build.rs"`), each of which depends on torch-sys directly.
//!
//! torch-sys passes `-Wl,-rpath` only to its own C++ build, so the final binary gets no
//! rpath to `torch/lib`. `libtorch_cuda.so` is deliberately not linked (rustc's
//! `--as-needed` would drop it anyway): loading it costs about 0.4 s and 400 MB of
//! resident memory at every start, so `backends::device` loads it at run time, only when
//! a run asks for CUDA. `DEP_TCH_LIBTORCH_LIB` reaches this script because `torch-sys` is
//! a direct dependency.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!(
            "cargo:warning=DEP_TCH_LIBTORCH_LIB is not set: binaries will need LD_LIBRARY_PATH"
        );
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    // Where `backends::device` finds libtorch_cuda.so when a run asks for CUDA.
    println!("cargo:rustc-env=PIPELINE_LIBTORCH_LIB={lib}");
}
