//! Stopping a training cleanly when the scheduler asks: SLURM's warning before a time
//! limit or a preemption (`sbatch --signal=B:USR1@120`), or SIGTERM. The signal handler
//! only records the signal ([`received`]); the training acts on it at its next optimizer
//! step, every process at the same step (`crate::train`): it writes its snapshot, and
//! the run stops with `pipeline_core::launch::STOPPED_STATUS` (under SLURM, after `scontrol requeue`, which the
//! worker's `main` does). A second signal while that happens is only recorded again.
//!
//! Without [`install`] (a program using the library, a test) nothing is recorded and a
//! training asks nothing of the other processes.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static INSTALLED: AtomicBool = AtomicBool::new(false);
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// Records `signals` (SIGUSR1, SIGTERM) from now on, instead of their default action.
pub fn install(signals: &[i32]) -> std::io::Result<()> {
    for &signal in signals {
        // SAFETY: the action only stores into an atomic, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || {
                let _ = RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
            })?;
        }
    }
    INSTALLED.store(!signals.is_empty(), Ordering::SeqCst);
    Ok(())
}

/// Whether signals are recorded (then a distributed training agrees on them at every step).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// The first signal recorded, if one was.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// A signal's name, as `kill -l` gives it with `SIG` (`SIGUSR1`).
pub fn name(signal: i32) -> String {
    signal_hook::low_level::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), String::from)
}
