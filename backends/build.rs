//! Builds the C++ shim (`shim/`: optimizer updates, random-generator state, autocast, loss
//! scaling and clipping, TorchScript modules with their buffers, which tch does not expose)
//! against the headers of the same libtorch tch links, and makes binaries that link
//! libtorch find it without `LD_LIBRARY_PATH`.
//!
//! torch-sys passes `-Wl,-rpath` only to its own C++ build, so a final binary gets no
//! rpath to `torch/lib` (the root package's `build.rs` adds it for `pipeline-worker`).
//! `libtorch_cuda.so` is deliberately not linked (rustc's `--as-needed` would drop it
//! anyway): loading it costs about 0.4 s and 400 MB at every start, so `device.rs` loads it
//! at run time, only when a run asks for CUDA. `DEP_TCH_LIBTORCH_LIB` reaches this script
//! because `torch-sys` is a direct dependency.
//!
//! c10d's NCCL process group lives in libtorch_cuda too, so its part of the shim
//! (`shim/nccl.cpp`) is a shared library of its own, `libpipeline_nccl.so`, which
//! `process_group.rs` loads only when a group asks for NCCL. It needs the CUDA and NCCL
//! headers of the wheel's `nvidia/*` packages (scripts/setup.sh adds the two header-only
//! ones torch does not depend on); without them, or with a CPU-only libtorch, it is not
//! built and NCCL is refused at run time with the reason.

use std::path::{Path, PathBuf};

/// The parts of the shim linked into this crate (`shim/nccl.cpp` is a library of its own).
/// They are compiled as one translation unit that includes them all: a part's cost is
/// almost all in parsing ATen's headers (10–16 s each), which that does once (21 s for
/// the seven, against 66 s one by one). The parts share no file-local name.
const PARTS: [&str; 7] = [
    "optim.cpp",
    "rng.cpp",
    "amp.cpp",
    "c10d.cpp",
    "sync_bn.cpp",
    "script.cpp",
    "liveness.cpp",
];

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=PIPELINE_GLOO_INCLUDE");
    println!("cargo:rerun-if-env-changed=PIPELINE_RELOCATABLE");
    // A build for another machine (scripts/device-kit.sh): the NCCL library is looked for
    // beside the executable, and neither it nor the binaries name a path of this machine.
    let relocatable = std::env::var_os("PIPELINE_RELOCATABLE").is_some();
    for file in PARTS.iter().chain(&["shim.h", "group.h", "nccl.cpp"]) {
        println!("cargo:rerun-if-changed=shim/{file}");
    }
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("DEP_TCH_LIBTORCH_LIB: torch-sys must be a direct dependency");
    let include = Path::new(&lib).join("../include");
    // c10d's Gloo header includes Gloo's, which the wheel lacks (scripts/setup.sh fetches
    // them); the Gloo code itself is inside libtorch_cpu.
    let gloo = std::env::var("PIPELINE_GLOO_INCLUDE").expect(
        "PIPELINE_GLOO_INCLUDE: build through scripts/setup.sh --env, which fetches Gloo's headers",
    );
    let nccl = std::thread::spawn({
        let (lib, include) = (lib.clone(), include.clone());
        move || build_nccl(&lib, &include, relocatable)
    });
    // Included as `shim/<part>` from this crate's directory (a build script's working
    // directory), so that the file names compiled in stay relative.
    let unity = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("shim.cpp");
    let includes: String = PARTS
        .iter()
        .map(|part| format!("#include \"shim/{part}\"\n"))
        .collect();
    std::fs::write(&unity, includes).expect("OUT_DIR is writable");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(&gloo)
        .include(".")
        .define("USE_C10D_GLOO", None)
        // Every torch wheel since 2.7 uses the C++11 ABI.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .file(&unity)
        .compile("pipeline_shim");
    // For this crate's tests; the shim's own symbols come from libtorch_cpu and libc10.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // Where `device.rs` finds libtorch_cuda.so when a run asks for CUDA.
    println!("cargo:rustc-env=PIPELINE_LIBTORCH_LIB={lib}");
    match nccl.join().expect("the NCCL build thread panicked") {
        Ok(_) if relocatable => {}
        Ok(path) => println!("cargo:rustc-env=PIPELINE_NCCL_SHIM={}", path.display()),
        Err(why) => {
            println!("cargo:warning=NCCL support not built: {why}");
            println!("cargo:rustc-env=PIPELINE_NCCL_MISSING={why}");
        }
    }
}

/// Compiles `shim/nccl.cpp` into `$OUT_DIR/libpipeline_nccl.so`, linked against
/// libtorch_cuda; `Err` says what is missing.
fn build_nccl(lib: &str, include: &Path, relocatable: bool) -> Result<PathBuf, String> {
    let lib = Path::new(lib);
    if !lib.join("libtorch_cuda.so").exists() {
        return Err("this libtorch has no CUDA support".into());
    }
    // torch/lib → site-packages, where the CUDA wheels put `nvidia/<package>/include`;
    // headers installed there later (scripts/setup.sh) rerun this script.
    let site = lib.join("../..");
    if site.join("nvidia").is_dir() {
        println!("cargo:rerun-if-changed={}", site.join("nvidia").display());
    }
    let mut cuda_includes = Vec::new();
    for entry in std::fs::read_dir(site.join("nvidia"))
        .map_err(|e| format!("{}: {e}", site.join("nvidia").display()))?
    {
        let dir = entry.map_err(|e| e.to_string())?.path().join("include");
        if dir.is_dir() {
            // CUDA 13 keeps CCCL (`nv/target`) one level down.
            if dir.join("cccl").is_dir() {
                cuda_includes.push(dir.join("cccl"));
            }
            cuda_includes.push(dir);
        }
    }
    for needed in ["nccl.h", "cuda_runtime.h", "crt/host_config.h", "nv/target"] {
        if !cuda_includes.iter().any(|d| d.join(needed).exists()) {
            return Err(format!(
                "no `{needed}` under {}/nvidia/*/include (scripts/setup.sh installs the CUDA headers)",
                site.display()
            ));
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?)
        .join("libpipeline_nccl.so");
    let compiler = cc::Build::new().cpp(true).get_compiler();
    let mut command = compiler.to_command();
    command
        .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-w"])
        .args(["-D_GLIBCXX_USE_CXX11_ABI=1", "-DUSE_C10D_NCCL"])
        .arg(format!("-I{}", include.display()))
        .arg(format!(
            "-I{}",
            include.join("torch/csrc/api/include").display()
        ))
        .args(cuda_includes.iter().map(|d| format!("-I{}", d.display())))
        .arg("shim/nccl.cpp")
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .args((!relocatable).then(|| format!("-Wl,-rpath,{}", lib.display())))
        .args([
            "-ltorch_cuda",
            "-ltorch_cpu",
            "-lc10_cuda",
            "-lc10",
            "-Wl,--no-undefined",
        ]);
    let output = command
        .output()
        .map_err(|e| format!("cannot run the C++ compiler: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().find(|l| l.contains("error")).unwrap_or("");
        return Err(format!("compiling shim/nccl.cpp failed: {first}"));
    }
    Ok(out)
}
