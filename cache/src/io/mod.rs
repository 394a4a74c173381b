//! Where checkpoints and cache entries can be kept: one trait, [`CheckpointIo`] (write,
//! read, list and delete objects by key), and a registry of its members by URL scheme,
//! as Lightning's `CheckpointIO` plugin separates *where* from *what*.
//!
//! | scheme | member | file |
//! |---|---|---|
//! | `file://DIR`, or a plain path | a directory on a mounted file system | `local.rs` |
//! | `s3://BUCKET/PREFIX` | S3-compatible object storage (AWS, MinIO, Ceph, moto…) | `s3.rs` |
//!
//! A library user adds a member with [`register`]; an unknown scheme is an error that
//! lists the registered ones. Keys are `/`-separated and relative to the location's
//! prefix; a member never reads or writes outside it.
//!
//! Invariant of every member: an object is visible whole or not at all (a write killed
//! half-way leaves the old object or none), and [`CheckpointIo::create`] writes only where
//! nothing is, atomically — the commit point of a cache entry (`remote.rs`).

mod local;
mod s3;

pub use local::LocalIo;
pub use s3::S3Io;

use std::fmt;
use std::io::{Read, Write};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::SystemTime;

/// One object in a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// Relative to the location's prefix.
    pub key: String,
    pub size: u64,
    pub modified: Option<SystemTime>,
}

/// Why an operation on a store of objects failed, naming the place (never a secret).
#[derive(Debug, Clone, PartialEq)]
pub struct IoError {
    /// The location as [`CheckpointIo::describe`] names it.
    pub place: String,
    pub message: String,
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.place, self.message)
    }
}

impl std::error::Error for IoError {}

impl From<IoError> for std::io::Error {
    fn from(e: IoError) -> std::io::Error {
        std::io::Error::other(e.to_string())
    }
}

/// A place to keep objects by key: a directory, a bucket.
pub trait CheckpointIo: Send + Sync + fmt::Debug {
    /// The location in messages: `s3://bucket/prefix (endpoint http://…)`. Never a secret.
    fn describe(&self) -> String;

    /// Fails when the place cannot be used at all (unreachable, refused credentials, no
    /// such bucket), with one cheap request; `open` does not ask.
    fn check(&self) -> Result<(), IoError> {
        Ok(())
    }

    /// Writes what `from` reads as `key`, replacing any object there. Readers see the
    /// old object or the new one, whole.
    fn write(&self, key: &str, from: &mut dyn Read) -> Result<(), IoError>;

    /// Writes `bytes` as `key` only if no object is there, atomically: `Ok(false)` when
    /// one was (and it is left as it is).
    fn create(&self, key: &str, bytes: &[u8]) -> Result<bool, IoError>;

    /// Copies object `key` into `to`: `Ok(false)` when there is none. On `Err`, `to`
    /// may hold part of it (write into a temporary file).
    fn read(&self, key: &str, to: &mut dyn Write) -> Result<bool, IoError>;

    /// The size of object `key`, `None` when there is none.
    fn size(&self, key: &str) -> Result<Option<u64>, IoError>;

    /// What identifies the current content of object `key` (S3's ETag and size; a
    /// file's size and modification time), `None` when there is none: a copy made when
    /// it was the same is still good.
    fn version(&self, key: &str) -> Result<Option<String>, IoError>;

    /// Every object whose key starts with `prefix`.
    fn list(&self, prefix: &str) -> Result<Vec<Object>, IoError>;

    /// Removes object `key` (nothing when it is absent).
    fn delete(&self, key: &str) -> Result<(), IoError>;

    /// Discards writes started before `before` that never finished (S3's incomplete
    /// multipart uploads, which are invisible but billed); how many.
    fn discard_unfinished(&self, before: SystemTime) -> Result<usize, IoError> {
        let _ = before;
        Ok(0)
    }

    /// Object `key` whole, `None` when there is none.
    fn read_bytes(&self, key: &str) -> Result<Option<Vec<u8>>, IoError> {
        let mut bytes = Vec::new();
        Ok(self.read(key, &mut bytes)?.then_some(bytes))
    }
}

/// Opens the location after a member's scheme (`bucket/prefix` for `s3://bucket/prefix`).
pub type Opener = fn(&str) -> Result<Arc<dyn CheckpointIo>, IoError>;

/// A registered kind of place.
#[derive(Clone, Copy)]
pub struct Member {
    /// The URL scheme, without `://`.
    pub scheme: &'static str,
    /// One line for `pipeline explain` and the unknown-scheme error.
    pub doc: &'static str,
    pub open: Opener,
}

fn registry() -> &'static RwLock<Vec<Member>> {
    static MEMBERS: OnceLock<RwLock<Vec<Member>>> = OnceLock::new();
    MEMBERS.get_or_init(|| RwLock::new(vec![local::MEMBER, s3::MEMBER]))
}

/// Adds a kind of place (or replaces the one with its scheme).
pub fn register(member: Member) {
    let mut members = registry().write().unwrap_or_else(|e| e.into_inner());
    members.retain(|m| m.scheme != member.scheme);
    members.push(member);
}

/// The registered kinds of place.
pub fn members() -> Vec<Member> {
    registry().read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The scheme of `location` when it is a URL (`s3` of `s3://b/p`), `None` for a path.
pub fn scheme(location: &str) -> Option<&str> {
    let (scheme, _) = location.split_once("://")?;
    let plain = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    plain.then_some(scheme)
}

/// Whether `location` names a place through a scheme (`s3://…`) rather than a path.
pub fn is_url(location: &str) -> bool {
    scheme(location).is_some()
}

/// Opens `location`: `scheme://rest` by the member registered for its scheme, a plain
/// path as a directory.
pub fn open(location: &str) -> Result<Arc<dyn CheckpointIo>, IoError> {
    let Some(scheme) = scheme(location) else {
        return (local::MEMBER.open)(location);
    };
    let rest = &location[scheme.len() + 3..];
    let members = members();
    match members.iter().find(|m| m.scheme == scheme) {
        Some(member) => (member.open)(rest),
        None => Err(IoError {
            place: location.to_string(),
            message: format!(
                "no place is registered for `{scheme}://`; registered: {}",
                members
                    .iter()
                    .map(|m| format!("`{}://` ({})", m.scheme, m.doc))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// `key` split into the parent's key and the last name: a remote object (`s3://b/k/f`)
/// is opened as its directory and read by its name.
pub fn split_object(location: &str) -> Option<(&str, &str)> {
    let (parent, name) = location.rsplit_once('/')?;
    (!name.is_empty() && scheme(parent).is_some_and(|s| parent.len() > s.len() + 3))
        .then_some((parent, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_by_scheme() {
        assert_eq!(scheme("s3://bucket/prefix"), Some("s3"));
        assert_eq!(scheme("/data/cache"), None);
        assert_eq!(scheme("relative/dir"), None);
        assert_eq!(scheme("odd dir://x"), None);
        let e = open("ftp://host/dir").unwrap_err();
        assert_eq!(e.place, "ftp://host/dir");
        assert!(
            e.message
                .starts_with("no place is registered for `ftp://`; registered: `file://`"),
            "{}",
            e.message
        );
        assert!(e.message.contains("`s3://`"), "{}", e.message);
        assert_eq!(
            split_object("s3://b/models/w.safetensors"),
            Some(("s3://b/models", "w.safetensors"))
        );
        assert_eq!(
            split_object("s3://b/w.safetensors"),
            Some(("s3://b", "w.safetensors"))
        );
        assert_eq!(split_object("s3://b"), None);
        assert_eq!(split_object("/local/w.safetensors"), None);
    }
}
