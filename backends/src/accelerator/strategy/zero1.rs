//! `strategy "zero1"`: data parallel with the optimizer's state sharded (ZeRO stage 1,
//! fairscale's OSS): each process updates its share of the parameters and sends them to
//! the others.

use super::Strategy;
use manifests::accelerator::{StrategyDescription, ZERO1};
use tch::Tensor;

pub struct Zero1;

impl Strategy for Zero1 {
    fn describe(&self) -> &'static StrategyDescription {
        &ZERO1
    }

    /// The largest parameters first, each to the process with the fewest elements so
    /// far, so the optimizer state divides evenly.
    fn owners(&self, params: &[Tensor], world: usize) -> Option<Vec<usize>> {
        let mut by_size: Vec<usize> = (0..params.len()).collect();
        by_size.sort_by_key(|&i| std::cmp::Reverse(params[i].numel()));
        let mut load = vec![0usize; world];
        let mut owner = vec![0; params.len()];
        for i in by_size {
            let least = (0..world).min_by_key(|&r| (load[r], r)).unwrap_or(0);
            owner[i] = least;
            load[least] += params[i].numel();
        }
        Some(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero1_divides_the_parameters_evenly() {
        let params: Vec<Tensor> = [100, 10, 50, 40]
            .iter()
            .map(|&n| Tensor::zeros([n], (tch::Kind::Float, tch::Device::Cpu)))
            .collect();
        assert_eq!(
            Zero1.owners(&params, 2).unwrap(),
            [0, 1, 1, 1],
            "100 elements each"
        );
        assert_eq!(Zero1.owners(&params, 1).unwrap(), [0, 0, 0, 0]);
    }
}
