//! The command line, as a library that links no libtorch: every command of `pipeline`
//! ([`app::main`]: checks, graphs, the cache, and `run` answered from the cache or handed
//! to a worker), and what the worker (the root crate, `pipeline`, which runs with
//! libtorch) shares with it: the command line's arguments, loading and preparing a run,
//! rendering diagnostics, summaries.

pub mod app;
mod cache_cmd;
mod check;
pub mod cli;
mod executor;
mod explain;
pub mod fetch;
mod graph;
mod launch;
pub mod load;
mod plot;
pub mod prepare;
pub mod render;
mod report;
mod run;
mod runs;
mod shown_runs;
mod status;
pub mod summary;
mod sweep;

/// The exit status of a command whose reader went away (`pipeline status | head -1`):
/// a shell's status for a process ended by SIGPIPE.
pub const BROKEN_PIPE_STATUS: i32 = 128 + 13;

/// Whether a panic is `print!`'s on a closed stdout or stderr (EPIPE).
fn is_broken_pipe(text: &str) -> bool {
    text.starts_with("failed printing to std")
        && (text.contains("Broken pipe") || text.contains("os error 32"))
}

/// Panics are bugs; show one line, never a libtorch C++ backtrace.
///
/// One is not: `print!` panics when the reader of stdout has gone (`pipeline status |
/// head -1`), since Rust ignores SIGPIPE. Both binaries then stop at once and quietly,
/// with [`BROKEN_PIPE_STATUS`], as a process ended by SIGPIPE would. SIGPIPE itself stays
/// ignored: the worker's c10d sockets must see a closed peer as an error, not die of it.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("unknown panic");
        if is_broken_pipe(text) {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn only_print_on_a_closed_pipe_is_a_broken_pipe() {
        assert!(super::is_broken_pipe(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(super::is_broken_pipe(
            "failed printing to stderr: Broken pipe (os error 32)"
        ));
        assert!(!super::is_broken_pipe("index out of bounds"));
        assert!(!super::is_broken_pipe(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
    }
}
