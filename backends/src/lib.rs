//! Everything that touches libtorch (tch): devices, data, models, losses, optimizers,
//! the training and evaluation loops, checkpoints, and the runner that executes a plan.
//!
//! Every failure is a [`manifests::Diagnostic`] naming the stage, the data file and line,
//! or the manifest entry; libtorch's own messages are cut to their first line
//! (`error.rs`), so a user never sees a C++ stack trace.
//!
//! What tch does not expose comes from a small C++ shim in `shim/` (optimizer updates whose
//! state we own, the random generators' state, autocast and loss scaling, c10d process
//! groups, TorchScript modules with their buffers), compiled by `build.rs` against the
//! same libtorch's headers.

pub mod accelerator;
mod arrays;
pub mod callbacks;
pub mod checkpoint;
pub mod data;
pub mod device;
pub mod error;
pub mod evaluate;
pub mod finetune;
mod liveness;
pub mod loss;
pub mod measure;
pub mod model;
pub mod numerics;
pub mod observer;
mod ops;
pub mod optimizer;
pub mod predict;
pub mod preemption;
pub mod process_group;
mod rng_state;
pub mod runner;
pub mod script;
pub mod session;
mod shim;
pub mod snapshot;
pub mod train;

pub use observer::{EpochRecord, Observer, StepRecord};
pub use pipeline_core::report::{RunReport, StageResult, StageStatus};
pub use runner::{run, Options};
pub use tch::Device;
