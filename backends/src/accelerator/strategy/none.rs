//! `strategy "none"`: one process; nothing to reduce.

use super::Strategy;
use manifests::accelerator::{StrategyDescription, NONE};

pub struct Single;

impl Strategy for Single {
    fn describe(&self) -> &'static StrategyDescription {
        &NONE
    }
}
