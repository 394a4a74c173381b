//! Storage for what `pipeline` produces: content hashes, crash-safe writes, and the
//! run directories under `.pipeline/`.
//!
//! Invariant: a file this crate writes is either absent or complete. Every write goes
//! to a temporary file in the same directory, is synced, and is renamed into place.

mod atomic;
mod hash;
mod run_dir;
mod store;

pub use atomic::{write_atomic, write_atomic_with};
pub use hash::{hash_bytes, hash_file};
pub use run_dir::{MetricsLog, RunDir};
pub use store::{Entry, Lock, Lookup, Store};
