//! What the two binaries share: `pipeline` (checks, graphs, and hands `run` over) and
//! `pipeline-worker` (runs; the only one that loads libtorch, so that `pipeline check`
//! starts in milliseconds).

pub mod cli;
pub mod load;
pub mod prepare;
pub mod render;
pub mod summary;

/// Panics are bugs; show one line, never a libtorch C++ backtrace.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        let cut = text.find("Exception raised from").unwrap_or(text.len());
        let first = text[..cut]
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or(text)
            .trim();
        eprintln!("error: internal error: {first}");
        if let Some(at) = info.location() {
            eprintln!("  at {}:{}", at.file(), at.line());
        }
        eprintln!("  this is a bug in pipeline; please report it with the manifest that caused it");
    }));
}
