//! Storage for what `pipeline` produces: content hashes (and their memo), crash-safe
//! writes, the run directories under `.pipeline/runs/`, and the content-addressed stage
//! cache (`store.rs`) with the record of each manifest's last keys (`last_keys.rs`).
//!
//! Invariant: a file this crate writes is either absent or complete. Every write goes
//! to a temporary file in the same directory, is synced, and is renamed into place.

mod atomic;
mod hash;
mod last_keys;
mod memo;
mod run_dir;
mod store;

pub use atomic::{write_atomic, write_atomic_with};
pub use hash::{hash_bytes, hash_file};
pub use last_keys::{recorded_stages, LastKeys};
pub use memo::HashMemo;
pub use run_dir::{MetricsLog, RunDir};
pub use store::{Entry, EntryInfo, Lock, Lookup, Store};
