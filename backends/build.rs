//! Builds the C++ shim (`shim/`: optimizer updates, random-generator state, autocast, loss
//! scaling and clipping, which tch does not expose)
//! against the headers of the same libtorch tch links, and makes binaries that link
//! libtorch find it without `LD_LIBRARY_PATH`.
//!
//! torch-sys passes `-Wl,-rpath` only to its own C++ build, so a final binary gets no
//! rpath to `torch/lib` (the root package's `build.rs` adds it for `pipeline-worker`).
//! `libtorch_cuda.so` is deliberately not linked (rustc's `--as-needed` would drop it
//! anyway): loading it costs about 0.4 s and 400 MB at every start, so `device.rs` loads it
//! at run time, only when a run asks for CUDA. `DEP_TCH_LIBTORCH_LIB` reaches this script
//! because `torch-sys` is a direct dependency.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    for file in [
        "shim/shim.h",
        "shim/optim.cpp",
        "shim/rng.cpp",
        "shim/amp.cpp",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("DEP_TCH_LIBTORCH_LIB: torch-sys must be a direct dependency");
    let include = std::path::Path::new(&lib).join("../include");
    // c10d's Gloo header includes Gloo's, which the wheel lacks (scripts/setup.sh fetches
    // them); the Gloo code itself is inside libtorch_cpu.
    let gloo = std::env::var("PIPELINE_GLOO_INCLUDE").expect(
        "PIPELINE_GLOO_INCLUDE: build through scripts/setup.sh --env, which fetches Gloo's headers",
    );
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(&gloo)
        .define("USE_C10D_GLOO", None)
        // Every torch wheel since 2.7 uses the C++11 ABI.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .file("shim/optim.cpp")
        .file("shim/rng.cpp")
        .file("shim/amp.cpp")
        .file("shim/c10d.cpp")
        .compile("pipeline_shim");
    // For this crate's tests; the shim's own symbols come from libtorch_cpu and libc10.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // Where `device.rs` finds libtorch_cuda.so when a run asks for CUDA.
    println!("cargo:rustc-env=PIPELINE_LIBTORCH_LIB={lib}");
}
