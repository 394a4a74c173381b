//! Storage for what `pipeline` produces: content hashes (and their memo), crash-safe
//! writes, the run directories under `.pipeline/runs/`, and the content-addressed stage
//! cache (`store.rs`) with the record of each manifest's last keys (`last_keys.rs`);
//! where objects can be kept besides (`io/`: a directory, S3-compatible storage), and
//! the stage cache shared through one of them, behind the local one (`remote.rs`).
//!
//! Invariant: a file this crate writes is either absent or complete. Every write goes
//! to a temporary file in the same directory, is synced, and is renamed into place.
//!
//! Invariant: the cache never writes into a directory it did not make, and never deletes
//! what it cannot show it wrote (`root.rs`: a `CACHEDIR.TAG` of pipeline's at the root, a
//! tag in every entry, and only names it gives things itself).

mod atomic;
mod hash;
pub mod io;
mod last_keys;
mod memo;
mod remote;
mod root;
mod run_dir;
mod store;

pub use atomic::{write_atomic, write_atomic_with};
pub use hash::{hash_bytes, hash_file, require_regular};
pub use last_keys::{recorded_stages, LastKeys};
pub use memo::{HashMemo, HashedFile};
pub use remote::{Fetched, Remote, GRACE};
pub use root::{is_fingerprint, NotACache, RootState, LAYOUT, TAG_FILE, TAG_SIGNATURE};
pub use run_dir::{MetricsLog, RunDir};
pub use store::{Entry, EntryInfo, Lock, Lookup, Store};
