//! libtorch's CUDA library, loaded when the `cuda` accelerator (`accelerator/cuda.rs`)
//! is first asked for; and how a device is named.
//!
//! libtorch's CUDA support lives in `libtorch_cuda.so`, which registers itself with
//! libtorch when it is loaded. It is not linked into the binary (see `build.rs`): it is
//! loaded here, before anything asks libtorch about CUDA, and only when the manifest
//! asks for `cuda` or `auto`, so CPU runs never pay for it.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use tch::Device;

/// Loads `libtorch_cuda.so` (from the directory the running libtorch was loaded from) once;
/// `Err` says why it could not be loaded.
pub fn load_cuda() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let path = libtorch_dir()?.join("libtorch_cuda.so");
            if !path.exists() {
                return Err(format!(
                    "this libtorch has no CUDA support ({} is missing)",
                    path.display()
                ));
            }
            open_library(&path).map(drop)
        })
        .clone()
}

/// Whether this machine may have an NVIDIA GPU: its driver's library loads, or the
/// driver's files are there. Without any of them CUDA cannot be available, and `device
/// "auto"` does not load libtorch's CUDA libraries to find that out (they would hold about
/// 140 MiB of a CPU run's memory).
pub fn nvidia_driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        let files = [
            "/proc/driver/nvidia/version",
            "/dev/nvidiactl",
            "/dev/nvidia0",
        ];
        if files.iter().any(|f| Path::new(f).exists()) {
            return true;
        }
        // SAFETY: dlopen with a valid NUL-terminated name; the handle is kept (CUDA would
        // load the same library).
        let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY) };
        !handle.is_null()
    })
}

/// The directory of the libtorch this process runs with (see [`loaded_libtorch_dir`]),
/// else the one it was built with.
fn libtorch_dir() -> Result<PathBuf, String> {
    loaded_libtorch_dir()
        .or_else(|| option_env!("PIPELINE_LIBTORCH_LIB").map(PathBuf::from))
        .ok_or_else(|| "built without libtorch's directory".into())
}

/// Where the loader found `libtorch_cpu.so` (through the rpath or `LD_LIBRARY_PATH`):
/// libtorch's other libraries must come from the same place.
fn loaded_libtorch_dir() -> Option<PathBuf> {
    // SAFETY: RTLD_NOLOAD only looks the already-loaded library up; dlinfo writes at most
    // PATH_MAX bytes into `origin`, NUL-terminated.
    unsafe {
        let handle = libc::dlopen(
            c"libtorch_cpu.so".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        if handle.is_null() {
            return None;
        }
        let mut origin = [0 as libc::c_char; libc::PATH_MAX as usize + 1];
        let found = libc::dlinfo(handle, libc::RTLD_DI_ORIGIN, origin.as_mut_ptr().cast()) == 0;
        libc::dlclose(handle);
        found.then(|| {
            PathBuf::from(
                CStr::from_ptr(origin.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
            )
        })
    }
}

/// `dlopen`s `path` for good, its symbols global (as libtorch expects of its backends).
pub(crate) fn open_library(path: &Path) -> Result<*mut libc::c_void, String> {
    let c_path = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: dlopen with a valid NUL-terminated path; the handle is never closed.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        return Err(format!("cannot load {}: {}", path.display(), dl_error()));
    }
    Ok(handle)
}

/// The dynamic loader's last error.
pub(crate) fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let why = unsafe { libc::dlerror() };
    if why.is_null() {
        "unknown error".into()
    } else {
        unsafe { CStr::from_ptr(why) }
            .to_string_lossy()
            .into_owned()
    }
}

/// How the device is named in messages and metadata.
pub fn describe(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(n) => format!("cuda:{n}"),
        Device::Mps => "mps".into(),
        Device::Vulkan => "vulkan".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Cuda, Kind, Tensor};

    /// Loading the library late must still register libtorch's CUDA kernels and hooks:
    /// then touching a CUDA tensor reaches the CUDA runtime (which, on a machine without a
    /// GPU, reports the missing driver) instead of failing for want of a CUDA backend.
    #[test]
    fn the_cuda_library_loaded_at_run_time_registers_itself() {
        let dir = libtorch_dir().unwrap();
        if !dir.join("libtorch_cuda.so").exists() {
            eprintln!("skipped: a CPU-only libtorch");
            return;
        }
        load_cuda().unwrap();
        match Tensor::f_zeros([2], (Kind::Float, Device::Cuda(0))) {
            Ok(t) => assert_eq!(t.device(), Device::Cuda(0)),
            Err(e) => {
                let message = e.to_string();
                // Unregistered, libtorch says "Could not run 'aten::empty.memory_format' with
                // arguments from the 'CUDA' backend"; registered, it reaches the driver.
                assert!(
                    !message.contains("Could not run") && !message.contains("without ATen_cuda"),
                    "CUDA is not registered: {message}"
                );
                assert!(!Cuda::is_available());
            }
        }
    }

    /// The CUDA library is looked for beside the libtorch actually loaded, found through
    /// the loader (here, the rpath to the libtorch the tests were built with).
    #[test]
    fn libtorch_is_found_where_the_loader_found_it() {
        let found = loaded_libtorch_dir().unwrap().canonicalize().unwrap();
        let built = Path::new(env!("PIPELINE_LIBTORCH_LIB"))
            .canonicalize()
            .unwrap();
        assert_eq!(found, built);
    }
}
