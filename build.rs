//! Gives `pipeline-worker` (the binary that links libtorch) an rpath to `torch/lib`,
//! which torch-sys does not add; `DEP_TCH_LIBTORCH_LIB` reaches this script because
//! `torch-sys` is a direct dependency. `pipeline` links no libtorch and needs none.
//! (`cli/build.rs` gives both the libtorch version, which every cache key holds.) With
//! `PIPELINE_RELOCATABLE` set (scripts/device-kit.sh) there is no rpath.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=PIPELINE_RELOCATABLE");
    // A build for another machine (scripts/device-kit.sh) names no path of this one: the
    // libtorch there is found through LD_LIBRARY_PATH.
    if std::env::var_os("PIPELINE_RELOCATABLE").is_some() {
        return;
    }
    match std::env::var("DEP_TCH_LIBTORCH_LIB") {
        Ok(lib) => println!("cargo:rustc-link-arg-bin=pipeline-worker=-Wl,-rpath,{lib}"),
        Err(_) => println!("cargo:warning=DEP_TCH_LIBTORCH_LIB is not set: pipeline-worker will need LD_LIBRARY_PATH"),
    }
}
