//! `digits-compressed`: pipeline's whole command line, with two members of its own.
//!
//! - **`strategy "ddp-bf16"`** ([`CompressedDdp`]): data parallel whose gradients travel
//!   as bfloat16, half the bytes of float32 — PyTorch's `bf16_compress_hook`: each
//!   process casts its gradients to bfloat16 and divides them by the number of
//!   processes, the all-reduce sums them, and each process casts the sum back.
//! - **`precision "bf16-inputs"`** ([`Bf16Inputs`]): float32 weights and compute, with
//!   every input batch rounded to bfloat16, as data kept in bfloat16 (half the memory
//!   and transfers) would reach the model.
//! - **`loss "focal" gamma=2`** ([`focal::Focal`]): cross-entropy with each sample's term
//!   scaled by (1 − p_t)^γ, a key of its own (`gamma`) and the built-in `class-weights`.
//! - **`metrics "brier"`** ([`brier::Brier`]): the Brier score of the class probabilities,
//!   measured wherever a built-in metric is (`eval`, `validate`, monitors).
//! - **`optimizer "lion"`** ([`lion::Lion`]): the sign of momentum blended with the
//!   gradient, one state tensor per weight; Adam's `beta1`/`beta2` keys, and groups.
//! - **`schedule "warm-restarts"`** ([`warm_restarts`]): cosine cycles, each longer than
//!   the one before (PyTorch's `CosineAnnealingWarmRestarts`), keys of its own and the
//!   built-in `min-lr`.
//! - **`train { callbacks "epochs-csv" }`** ([`epochs_csv`]): a CSV of the stage's epochs
//!   beside `metrics.jsonl`, its rows kept across a resume.
//! - **`data { source "train.svm" }`** ([`svmlight`]): LIBSVM / SVMlight sparse text
//!   files, read as scikit-learn reads them, split, scaled and checked as any data.
//!
//! Registering them before [`pipeline::main_with_worker`] is all it takes: `check`
//! and `explain` know their names and keys and holds them to the compatibility rules by what their
//! descriptions say (`strategy "ddp-bf16"` on one process is refused like `ddp`), and
//! `run --nproc-per-node 2` starts this program as its own workers.
//!
//! ```text
//! cargo build --release -p pipeline-extension-example
//! target/release/digits-compressed run examples/extension/digits.kdl --nproc-per-node 2
//! ```

mod brier;
mod epochs_csv;
mod focal;
mod lion;
mod svmlight;
mod warm_restarts;

use backends::accelerator::{self, Precision, Strategy};
use backends::process_group::ProcessGroup;
use manifests::accelerator::{Dtype, PrecisionDescription, StrategyDescription};
use std::process::ExitCode;
use tch::{Kind, TchError, Tensor};

/// Data parallel with bfloat16-compressed gradients.
struct CompressedDdp;

static COMPRESSED_DDP: StrategyDescription = StrategyDescription {
    name: "ddp-bf16",
    doc: "data parallel; gradients sent as bfloat16 (half the bytes), averaged, and cast back",
    // What the compatibility rules ask: it needs several processes, and each keeps the
    // whole optimizer state.
    distributed: true,
    shards_optimizer: false,
};

impl Strategy for CompressedDdp {
    fn describe(&self) -> &'static StrategyDescription {
        &COMPRESSED_DDP
    }

    fn reduce_gradients(
        &self,
        group: &ProcessGroup,
        grads: &mut [Tensor],
        _bucket_bytes: usize,
    ) -> Result<(), TchError> {
        if grads.is_empty() {
            return Ok(());
        }
        // One flat buffer: every gradient, divided by the processes first (so the sum
        // is the mean and stays in bfloat16's range), compressed.
        let flat: Vec<Tensor> = grads
            .iter()
            .map(|g| g.f_flatten(0, -1))
            .collect::<Result<_, _>>()?;
        let mut compressed = [Tensor::f_cat(&flat, 0)?
            .f_div_scalar(group.world as f64)?
            .f_to_kind(Kind::BFloat16)?];
        group.all_reduce_sum(&mut compressed)?;
        let mean = compressed[0].f_to_kind(grads[0].kind())?;
        let mut offset = 0;
        for g in grads.iter_mut() {
            let n = g.numel() as i64;
            let part = mean.f_narrow(0, offset, n)?.f_view_as(g)?;
            g.f_copy_(&part)?;
            offset += n;
        }
        Ok(())
    }
}

/// float32 weights and compute; inputs rounded to bfloat16.
struct Bf16Inputs;

static BF16_INPUTS: PrecisionDescription = PrecisionDescription {
    name: "bf16-inputs",
    doc: "fp32 weights and compute; every input batch rounded to bfloat16, as data kept in bfloat16 reaches the model",
    weights: Dtype::Float32,
    autocast: None,
    loss_scaling: false,
    needs_cuda: false,
};

impl Precision for Bf16Inputs {
    fn describe(&self) -> &'static PrecisionDescription {
        &BF16_INPUTS
    }

    fn input(&self, x: &Tensor) -> Result<Tensor, TchError> {
        if !x.is_floating_point() {
            return Ok(x.shallow_clone()); // token ids
        }
        x.f_to_kind(Kind::BFloat16)?.f_to_kind(Kind::Float)
    }
}

fn main() -> ExitCode {
    let registered = accelerator::register_strategy(&CompressedDdp)
        .and_then(|()| accelerator::register_precision(&Bf16Inputs))
        .and_then(|()| backends::loss::register_loss(&focal::Focal))
        .and_then(|()| pipeline_core::metrics::register_metric(&brier::Brier, brier::DOC))
        .and_then(|()| backends::optimizer::register_optimizer(&lion::Lion))
        .and_then(|()| pipeline_core::schedule::register_schedule(&warm_restarts::WARM_RESTARTS))
        .and_then(|()| backends::callbacks::register_callback(&epochs_csv::EPOCHS_CSV))
        .and_then(|()| pipeline_core::formats::register_data_format(&svmlight::Svmlight));
    if let Err(why) = registered {
        eprintln!("error: cannot register this program's members: {why}");
        return ExitCode::FAILURE;
    }
    pipeline::main_with_worker()
}
