//! Why a stage must run, as typed reasons (cargo's `DirtyReason`): found by comparing
//! keys ([`crate::fingerprint::explain_change`]) and looking at the cache
//! ([`crate::freshness`]), rendered in one place ([`Reason`]'s `Display`) in the words
//! `pipeline status`, `runs diff` and `report` show, naming manifest keys as the user
//! writes them (`accelerator.strategy`, `schedule.min-lr`). In JSON a reason is its words.

use serde::{Serialize, Serializer};
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// `run --no-cache`.
    CacheOff,
    /// `run --force`.
    Forced,
    /// The store holds an entry under the stage's fingerprint that cannot be served.
    Unusable(String),
    /// Cached on this machine but not on every process's (a distributed run).
    NotEverywhere { missing: usize, processes: usize },
    /// No run of this manifest ran a stage of this name.
    NeverRun,
    /// A stage it needs must run first.
    UpstreamStale(String),
    /// A stage it needs has changed since this one last ran.
    UpstreamChanged(String),
    /// A stage it needs changed (named by neither run: `runs diff`).
    SomeUpstreamChanged,
    /// A manifest key's value, as the manifest writes the key: `optimizer.lr`, `seed`.
    Setting {
        key: String,
        from: String,
        to: String,
    },
    /// The model has another number of nodes (layers and structures, counted through
    /// the structures).
    ModelSize { from: usize, to: usize },
    /// The node at `at` (`3`, `2.1.1`, `3.branch 2.1`) is of another kind.
    LayerKind {
        at: String,
        from: String,
        to: String,
    },
    /// A setting of the node at `at`, of kind `kind`.
    LayerSetting {
        at: String,
        kind: String,
        key: String,
        from: String,
        to: String,
    },
    /// The content of the file the stage reads as `role` (`data`, `labels`, `init`).
    FileChanged { role: String, file: Option<String> },
    /// A file the stage did not read before.
    FileAdded { role: String, file: Option<String> },
    /// Where or with what the stage runs.
    Platform {
        what: Platform,
        from: String,
        to: String,
    },
    /// The entry is gone although the key is the same.
    OutputMissing(&'static str),
    /// An `eval` stage's result is gone although the key is the same.
    ResultMissing,
    /// Another key than the last run's, but nothing in it tells why (a cache moved).
    NotInCache,
    /// A longer training continues a cached shorter one ([`crate::extend`]).
    Extends { epochs: u64 },
    /// Only longer than a cached training, but it cannot continue it: why.
    Retrains(String),
}

/// Where and with what a stage runs, beside the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Device,
    Processes,
    Libtorch,
    Tool,
    KeyFormat,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Platform::Device => "the device",
            Platform::Processes => "the number of processes",
            Platform::Libtorch => "libtorch",
            Platform::Tool => "pipeline",
            Platform::KeyFormat => "the cache key format",
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let file = |file: &Option<String>| file.as_ref().map_or(String::new(), |n| format!(" {n}"));
        match self {
            Reason::CacheOff => write!(f, "the cache is off (--no-cache)"),
            Reason::Forced => write!(f, "forced (--force)"),
            Reason::Unusable(why) => write!(f, "the cache entry is unusable: {why}"),
            Reason::NotEverywhere { missing, processes } => {
                write!(
                    f,
                    "cached here, but not for {missing} of the {processes} processes"
                )
            }
            Reason::NeverRun => write!(f, "never run"),
            Reason::UpstreamStale(name) => write!(f, "upstream stage {name} is stale"),
            Reason::UpstreamChanged(name) => write!(f, "upstream stage {name} changed"),
            Reason::SomeUpstreamChanged => write!(f, "a stage it needs changed"),
            Reason::Setting { key, from, to } => write!(f, "{key} changed {from} → {to}"),
            Reason::ModelSize { from, to } => {
                write!(f, "model changed {from} layers → {to} layers")
            }
            Reason::LayerKind { at, from, to } => {
                write!(f, "model layer {at} changed {from} → {to}")
            }
            Reason::LayerSetting {
                at,
                kind,
                key,
                from,
                to,
            } => write!(f, "model layer {at} ({kind}): {key} changed {from} → {to}"),
            Reason::FileChanged { role, file: name } => {
                write!(f, "{role} file{} changed", file(name))
            }
            Reason::FileAdded { role, file: name } => write!(f, "{role} file{} added", file(name)),
            Reason::Platform { what, from, to } => write!(f, "{what} changed {from} → {to}"),
            Reason::OutputMissing(name) => write!(f, "output {name} missing from the cache"),
            Reason::ResultMissing => write!(f, "its result is missing from the cache"),
            Reason::NotInCache => write!(f, "not in the cache"),
            Reason::Extends { epochs } => write!(f, "extends the cached {epochs}-epoch training"),
            Reason::Retrains(why) => write!(f, "it retrains from the start: {why}"),
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Reasons as `status` shows them on one line.
pub fn joined(reasons: &[Reason]) -> String {
    reasons
        .iter()
        .map(Reason::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
