//! Manifests: KDL text → a typed, spanned [`Manifest`].
//!
//! - `schema.rs` — every node and key, with its type, default and one-line doc;
//! - `reader.rs` — the schema-driven reading of one KDL node into checked fields;
//! - `lower.rs` — KDL text → [`Manifest`]: sections, stages, `--set` paths, typed specs;
//! - `manifest.rs` — the typed specs, defaults applied;
//! - `overrides.rs` — `--set PATH=VALUE`;
//! - `diagnostic.rs` — the one diagnostic type all layers report with;
//! - `suggest.rs` — "did you mean".

pub mod diagnostic;
mod lower;
pub mod manifest;
pub mod overrides;
mod reader;
pub mod schema;
pub mod suggest;

pub use diagnostic::{has_errors, Diagnostic, Diagnostics, Label, Severity};
pub use lower::{lower, Lowered};
pub use manifest::*;
pub use overrides::Override;
