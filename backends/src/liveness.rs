//! Which processes of a group still answer: every process counts a key of the rendezvous
//! store up twice a second (`shim/liveness.cpp`), and a process whose collective failed
//! watches the counts for a moment to name the ones that stopped. It works whoever
//! started the processes (our launcher, SLURM, torchrun) and across machines, where the
//! launcher's look at `/proc` cannot reach.

use crate::shim::check;
use std::ffi::{c_char, c_void, CString};
use std::time::Duration;
use tch::TchError;

mod ffi {
    use std::ffi::{c_char, c_void};

    extern "C" {
        pub fn pipeline_heartbeat_start(
            host: *const c_char,
            port: i32,
            rank: i32,
            interval_ms: i64,
            out: *mut *mut c_void,
        ) -> *const c_char;
        pub fn pipeline_heartbeat_stop(beat: *mut c_void);
        pub fn pipeline_heartbeat_silent(
            host: *const c_char,
            port: i32,
            rank: i32,
            world: i32,
            window_ms: i64,
            silent: *mut i32,
            answered: *mut i32,
        ) -> *const c_char;
    }
}

/// How often a process counts its key up.
const INTERVAL: Duration = Duration::from_millis(500);

/// How long the counts are watched: a process that did not count once in this many
/// intervals is not running (a busy machine still runs a thread that sleeps this much).
const WINDOW: Duration = Duration::from_millis(2500);

/// Where the group's store is, and which rank of how many this process is.
#[derive(Debug)]
pub(crate) struct Store {
    host: CString,
    port: u16,
    rank: usize,
    world: usize,
}

/// This process's heartbeat: it stops when dropped.
#[derive(Debug)]
pub(crate) struct Heartbeat(*mut c_void);

// SAFETY: the heartbeat's state is the shim's, behind its own lock; the handle only stops it.
unsafe impl Send for Heartbeat {}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        // SAFETY: started by `Store::beat` and stopped once.
        unsafe { ffi::pipeline_heartbeat_stop(self.0) }
    }
}

/// What watching the counts found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Silence {
    /// Every other rank counted.
    None,
    /// These ranks did not count.
    Ranks(Vec<usize>),
    /// The store did not answer: rank 0, which serves it, does not run.
    Server,
}

impl Store {
    pub(crate) fn new(host: &str, port: u16, rank: usize, world: usize) -> Result<Store, TchError> {
        let host = CString::new(host).map_err(|e| TchError::Torch(e.to_string()))?;
        Ok(Store {
            host,
            port,
            rank,
            world,
        })
    }

    /// Starts this process's heartbeat.
    pub(crate) fn beat(&self) -> Result<Heartbeat, TchError> {
        let mut beat: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid C string and out-pointer; on success the shim stores an owned
        // heartbeat.
        check(unsafe {
            ffi::pipeline_heartbeat_start(
                self.host.as_ptr() as *const c_char,
                i32::from(self.port),
                self.rank as i32,
                INTERVAL.as_millis() as i64,
                &mut beat,
            )
        })?;
        Ok(Heartbeat(beat))
    }

    /// Watches the others' counts for `window`.
    pub(crate) fn silent(&self, window: Duration) -> Result<Silence, TchError> {
        let mut silent = vec![0i32; self.world];
        let mut answered = 0i32;
        // SAFETY: a valid C string, `silent` holds `world` elements, `answered` one.
        check(unsafe {
            ffi::pipeline_heartbeat_silent(
                self.host.as_ptr() as *const c_char,
                i32::from(self.port),
                self.rank as i32,
                self.world as i32,
                window.as_millis() as i64,
                silent.as_mut_ptr(),
                &mut answered,
            )
        })?;
        let ranks: Vec<usize> = (0..self.world).filter(|&r| silent[r] != 0).collect();
        Ok(match (answered, ranks.is_empty()) {
            (0, _) => Silence::Server,
            (_, true) => Silence::None,
            (_, false) => Silence::Ranks(ranks),
        })
    }

    /// `err`, a collective's failure, with the ranks that stopped answering named first
    /// (when any did): a timeout alone blames no one, and the process that reports it is
    /// the healthy one.
    pub(crate) fn explain(&self, err: TchError) -> TchError {
        let TchError::Torch(message) = &err else {
            return err;
        };
        let who = match self.silent(WINDOW) {
            Ok(Silence::Ranks(ranks)) => {
                let names: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
                let (noun, verb) = match ranks.len() {
                    1 => ("rank", "has"),
                    _ => ("ranks", "have"),
                };
                format!(
                    "{noun} {} of the group {verb} stopped answering (no heartbeat for {} s: stopped by a signal such as SIGSTOP or Ctrl-Z, frozen, or gone)",
                    names.join(", "),
                    WINDOW.as_secs_f64()
                )
            }
            Ok(Silence::Server) if self.rank != 0 => {
                "rank 0 of the group has stopped answering (the rendezvous it serves is silent: stopped by a signal such as SIGSTOP or Ctrl-Z, frozen, or gone)".to_string()
            }
            _ => return err,
        };
        TchError::Torch(format!("{who}; {message}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process_group::{Backend, ProcessGroup};

    #[test]
    fn a_rank_whose_heartbeat_stopped_is_named_and_the_others_are_not() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let join = move |rank| {
            ProcessGroup::join(
                "127.0.0.1",
                port,
                rank,
                3,
                Duration::from_secs(30),
                Backend::Gloo,
            )
        };
        let ranks: Vec<_> = (0..3)
            .map(|rank| std::thread::spawn(move || join(rank).unwrap()))
            .collect();
        let mut groups: Vec<ProcessGroup> = ranks.into_iter().map(|t| t.join().unwrap()).collect();
        let window = Duration::from_millis(1500);
        assert_eq!(groups[0].liveness().silent(window).unwrap(), Silence::None);
        // Rank 2 stops as a stopped process's heartbeat thread does.
        groups[2].stop_heartbeat();
        for rank in [0, 1] {
            let found = groups[rank].liveness().silent(window).unwrap();
            assert_eq!(found, Silence::Ranks(vec![2]), "seen from rank {rank}");
        }
        let err = groups[1]
            .liveness()
            .explain(TchError::Torch("Timed out waiting 3000ms for recv".into()));
        assert_eq!(
            crate::error::short_message(&err),
            "rank 2 of the group has stopped answering (no heartbeat for 2.5 s: stopped by a signal such as SIGSTOP or Ctrl-Z, frozen, or gone); Timed out waiting 3000ms for recv"
        );
        // With the store's server gone, rank 1 blames rank 0.
        let rank1 = groups.remove(1);
        drop(groups);
        let err = rank1
            .liveness()
            .explain(TchError::Torch("Connection closed by peer".into()));
        assert!(
            crate::error::short_message(&err)
                .starts_with("rank 0 of the group has stopped answering"),
            "{err}"
        );
    }
}
