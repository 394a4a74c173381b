//! The end-to-end tests of the `pipeline` binary, one module per subject, linked as one
//! test binary (as cargo's own `tests/testsuite/`): one link instead of one per file.

mod common;

mod cache;
mod cache_safety;
mod categorical;
mod check_robustness;
mod cli;
mod distributed;
mod extend;
mod finetune;
mod folds;
mod images;
mod inputs;
mod integrity;
mod json_output;
mod label_scaling;
mod lifecycle;
mod losses;
mod metrics;
mod models;
mod object_store;
mod outputs;
mod param_groups;
mod plot;
mod predict;
mod preemption;
mod report;
mod reshard;
mod restarts;
mod run_failures;
mod runs;
mod schedules;
mod slurm;
mod step_records;
mod streaming;
mod sweep;
mod tabular;
mod tensorboard;
mod text;
mod torchscript;
mod windows;
