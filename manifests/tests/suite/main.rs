//! The crate's integration tests, one module per subject, linked as one test binary.

mod bounds;
mod data_formats;
mod diagnostic_coverage;
mod lowering;
