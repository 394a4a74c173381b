//! `strategy "ddp"`: data parallel; gradients averaged over the processes in buckets
//! (torch's DistributedDataParallel, `bucket_cap_mb`).

use super::Strategy;
use manifests::accelerator::{StrategyDescription, DDP};

pub struct Ddp;

impl Strategy for Ddp {
    fn describe(&self) -> &'static StrategyDescription {
        &DDP
    }
}
