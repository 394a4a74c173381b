//! Showing diagnostics: miette's graphical report on stderr, or JSON objects.
//!
//! The renderer lives in `manifests::render` (no libtorch), so the fuzzer renders with the
//! same code as both binaries; this module is its name here.

pub use manifests::render::*;
