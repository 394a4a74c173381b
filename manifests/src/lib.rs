//! Manifests: KDL text → a typed, spanned [`Manifest`].
//!
//! - `schema.rs` — every node and key, with its type, default and one-line doc;
//! - `layers/` — every model layer, one type each: its schema entry, shape rule,
//!   parameters and forward pass (over `layers::Ops`, which backends implement);
//! - `reader.rs` — the schema-driven reading of one KDL node into checked fields;
//! - `lower.rs` — KDL text → [`Manifest`]: sections, stages, `--set` paths, typed specs;
//! - `manifest.rs` — the typed specs, defaults applied;
//! - `transforms/` — every image transform, one type each: its schema entry, size rule
//!   and what it does to an image (over `transforms::Pixels`, which core implements);
//! - `images.rs` — the `data.images` block → the channels and the transforms;
//! - `text.rs` — the `data.text` block → the text column and its tokenisation;
//! - `categorical.rs` — `data`'s `categorical` nodes → columns read as categories;
//! - `sweep.rs` — the `sweep` block → the keys `pipeline sweep` sweeps;
//! - `model.rs` — the `model` block and `block` definitions → a tree of layers and
//!   structures (`residual`, `repeat`, `parallel`), block uses expanded;
//! - `registry.rs` — a family of members a manifest names (`Registry`, `Chosen`);
//! - `formats/` — every data format, one file each: its name, extensions and kind (a
//!   table, arrays, images, samples), which decide the keys of `data` it reads;
//! - `callbacks.rs` — the callbacks a program registers, turned on by name in `train`;
//! - `losses/` — every loss, one file each: what it compares, its keys;
//! - `optimizers/` — every optimizer, one file each: its keys; `group` (parameter groups);
//! - `accelerator/` — the registries of accelerators, strategies and precisions: what a
//!   manifest may name, and what the compatibility rules ask of each member;
//! - `choice.rs` — `choice!`: an enum of manifest names, its names listed once;
//! - `overrides.rs` — `--set PATH=VALUE`;
//! - `limits.rs` — how large and how deep a text may be, before the KDL parser sees it;
//! - `diagnostic.rs` — the one diagnostic type all layers report with;
//! - `render.rs` — diagnostics shown to a person (miette) or as JSON;
//! - `suggest.rs` — "did you mean".

#[macro_use]
mod choice;
pub mod accelerator;
pub mod callbacks;
mod categorical;
pub mod diagnostic;
mod folds;
pub mod formats;
mod images;
mod inputs;
pub mod layers;
mod limits;
pub mod losses;
mod lower;
pub mod manifest;
mod metric;
mod model;
pub mod optimizers;
pub mod overrides;
mod param_groups;
mod reader;
pub mod registry;
pub mod render;
pub mod schedules;
pub mod schema;
mod stages;
pub mod suggest;
mod sweep;
mod text;
pub mod transforms;

pub use diagnostic::{escape_controls, has_errors, Diagnostic, Diagnostics, Label, Severity};
pub use folds::fold_name;
pub use lower::{lower, Lowered};
pub use manifest::*;
pub use overrides::Override;
