//! The crate's integration tests, one module per subject, linked as one test binary.

mod data_and_training;
mod parity;
