//! Every layer family against PyTorch itself: the same model built with `torch.nn` in
//! the project's torch venv (`$PIPELINE_VENV`, made by `scripts/setup.sh`) loads
//! pipeline's weights by name with `load_state_dict(strict=True)` and must give the same
//! outputs, within 1e-5 in float32, in training and in evaluation, and the same running
//! statistics after the training pass. `docs/models.md` is the mapping these twins follow.
//!
//! The exported checkpoint is written by `checkpoint::write_weights`, the code that writes
//! every user's checkpoint, and read with Hugging Face's `safetensors.torch.load_file`.

use backends::checkpoint;
use backends::model::Model;
use pipeline_core::network::Input;
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{Device, Kind, Tensor};

/// One model: its `model { … }` block, the shape of one sample, and its `torch.nn` twin
/// (a Python expression over `nn`).
struct Case {
    name: &'static str,
    /// `block` definitions the model uses.
    blocks: &'static str,
    model: &'static str,
    sample: &'static [i64],
    /// Token ids below this instead of normal floats (for `embedding`).
    ids: Option<i64>,
    /// Whether the training pass is deterministic (no dropout) and can be compared.
    train: bool,
    /// Whether the data gives `tokens` and a padding `mask` (some sequences padded on
    /// the right, some on the left), which the twin takes as `model(x, mask)`.
    mask: bool,
    torch: &'static str,
}

const CASES: &[Case] = &[
    Case {
        blocks: "",
        name: "linear and activations",
        model: "linear 6 bias=#false; relu; linear 5; gelu; linear 4; silu; linear 4; tanh; linear 3; leaky-relu 0.2; sigmoid; identity; softmax",
        sample: &[7],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Linear(7, 6, bias=False), nn.ReLU(), nn.Linear(6, 5), nn.GELU(), nn.Linear(5, 4), nn.SiLU(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3), nn.LeakyReLU(0.2), nn.Sigmoid(), nn.Identity(), nn.Softmax(dim=-1))",
    },
    Case {
        blocks: "",
        name: "log-softmax",
        model: "linear 4; log-softmax",
        sample: &[3],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Linear(3, 4), nn.LogSoftmax(dim=-1))",
    },
    Case {
        blocks: "",
        name: "conv2d with stride, dilation, groups; 2-D pools",
        model: "reshape 4 9 9; conv2d 8 kernel=3 stride=2 padding=2 dilation=2 groups=2; max-pool 2 stride=1; avg-pool 2 stride=1 padding=1; conv2d 6 kernel=2 bias=#false; flatten",
        sample: &[324],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Unflatten(1, (4, 9, 9)), nn.Conv2d(4, 8, 3, stride=2, padding=2, dilation=2, groups=2), nn.MaxPool2d(2, stride=1), nn.AvgPool2d(2, stride=1, padding=1), nn.Conv2d(8, 6, 2, bias=False), nn.Flatten())",
    },
    Case {
        blocks: "",
        name: "conv1d, batch-norm 1-D over channels, 1-D pools",
        model: "conv1d 6 kernel=5 padding=2; batch-norm momentum=0.3; relu; max-pool 2; conv1d 4 kernel=3 groups=2; avg-pool 2; adaptive-avg-pool 3; flatten",
        sample: &[3, 20],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Conv1d(3, 6, 5, padding=2), nn.BatchNorm1d(6, momentum=0.3), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(6, 4, 3, groups=2), nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(3), nn.Flatten())",
    },
    Case {
        blocks: "",
        name: "batch-norm 2-D, group-norm, layer-norm, adaptive and global pools",
        model: "batch-norm eps=1e-3; group-norm 2; conv2d 6 kernel=1; group-norm 3 affine=#false; layer-norm; adaptive-avg-pool 3 2; global-avg-pool",
        sample: &[4, 6, 6],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.BatchNorm2d(4, eps=1e-3), nn.GroupNorm(2, 4), nn.Conv2d(4, 6, 1), nn.GroupNorm(3, 6, affine=False), nn.LayerNorm(6), nn.AdaptiveAvgPool2d((3, 2)), nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))",
    },
    Case {
        blocks: "",
        name: "batch-norm over features",
        model: "linear 6; batch-norm; linear 2",
        sample: &[5],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))",
    },
    Case {
        blocks: "",
        name: "embedding",
        model: "embedding 10 4; flatten; linear 3",
        sample: &[5],
        ids: Some(10),
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(20, 3))",
    },
    Case {
        blocks: "",
        name: "dropout (evaluation only: its mask is random)",
        model: "linear 8; dropout 0.4; linear 2",
        sample: &[3],
        ids: None,
        train: false,
        mask: false,
        torch: "nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.4), nn.Linear(8, 2))",
    },
    Case {
        blocks: "",
        name: "residual with a strided convolution projection",
        model: "reshape 4 8 8; residual { conv2d 8 kernel=3 stride=2 padding=1; batch-norm; relu; conv2d 8 kernel=3 padding=1 }; global-avg-pool; linear 3",
        sample: &[256],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Unflatten(1, (4, 8, 8)), Residual(nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), projection=nn.Conv2d(4, 8, 1, stride=2, bias=False)), nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()), nn.Linear(8, 3))",
    },
    Case {
        blocks: "",
        name: "repeat of identity residuals, a linear projection",
        model: "linear 6; repeat 2 { residual { linear 6; relu } }; residual { linear 4 }",
        sample: &[5],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Linear(5, 6), nn.Sequential(nn.Sequential(Residual(nn.Linear(6, 6), nn.ReLU())), nn.Sequential(Residual(nn.Linear(6, 6), nn.ReLU()))), Residual(nn.Linear(6, 4), projection=nn.Linear(6, 4, bias=False)))",
    },
    Case {
        blocks: "",
        name: "parallel branches joined by concat and add",
        model: "reshape 2 5 5; parallel { branch { conv2d 3 kernel=1 }; branch { conv2d 4 kernel=3 padding=1; relu; }; }; parallel \"add\" { branch { conv2d 2 kernel=1; }; branch { identity; conv2d 2 kernel=1 bias=#false; }; branch { conv2d 2 kernel=3 padding=1; }; }; parallel dim=-1 { branch { identity; }; branch { avg-pool 3 stride=1 padding=1; }; }; flatten",
        sample: &[50],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Unflatten(1, (2, 5, 5)), Parallel(nn.Sequential(nn.Conv2d(2, 3, 1)), nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU())), Parallel(nn.Sequential(nn.Conv2d(7, 2, 1)), nn.Sequential(nn.Identity(), nn.Conv2d(7, 2, 1, bias=False)), nn.Sequential(nn.Conv2d(7, 2, 3, padding=1)), join='add'), Parallel(nn.Sequential(nn.Identity()), nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1)), dim=-1), nn.Flatten())",
    },
    Case {
        blocks: "block \"unit\" \"width\" p=0.0 { linear $width; dropout $p; relu; }",
        name: "named blocks with parameters",
        model: "unit 6; unit 4 p=0.0; linear 2",
        sample: &[3],
        ids: None,
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Sequential(nn.Linear(3, 6), nn.Dropout(0.0), nn.ReLU()), nn.Sequential(nn.Linear(6, 4), nn.Dropout(0.0), nn.ReLU()), nn.Linear(4, 2))",
    },
    Case {
        blocks: "",
        name: "embedding, learned positions, stacked bidirectional lstm, gru's last state",
        model: "embedding 12 8; positional-embedding; lstm 6 layers=2 bidirectional=#true; gru 5 output=\"last\"; linear 3",
        sample: &[7],
        ids: Some(12),
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Embedding(12, 8), PositionalEmbedding(7, 8), LSTM(8, 6, num_layers=2, bidirectional=True), GRU(12, 5, output='last'), nn.Linear(5, 3))",
    },
    Case {
        blocks: "",
        name: "sinusoidal positions, post-norm transformer encoder, self-attention, max pool",
        model: "embedding 10 8; positional-embedding \"sinusoidal\" max-length=9; transformer-encoder 2 heads=2 feed-forward=16 dropout=0.0; multi-head-attention 4; sequence-pool \"max\"; linear 2",
        sample: &[6],
        ids: Some(10),
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Embedding(10, 8), PositionalEmbedding(9, 8, kind='sinusoidal'), nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2, enable_nested_tensor=False), SelfAttention(8, 4), SequencePool('max'), nn.Linear(8, 2))",
    },
    Case {
        blocks: "",
        name: "pre-norm gelu transformer encoder, first, last and mean pools",
        model: "embedding 10 8; transformer-encoder heads=4 norm=\"pre\" activation=\"gelu\" dropout=0.0 eps=1e-6; parallel { branch { sequence-pool \"first\"; }; branch { sequence-pool \"last\"; }; branch { sequence-pool; }; }; linear 2",
        sample: &[5],
        ids: Some(10),
        train: true,
        mask: false,
        torch: "nn.Sequential(nn.Embedding(10, 8), nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 4, 32, 0.0, activation='gelu', layer_norm_eps=1e-6, batch_first=True, norm_first=True), 1, enable_nested_tensor=False), Parallel(nn.Sequential(SequencePool('first')), nn.Sequential(SequencePool('last')), nn.Sequential(SequencePool('mean'))), nn.Linear(24, 2))",
    },
    Case {
        blocks: "",
        name: "padding masks: transformer encoder, self-attention, mean, max, first and last pools",
        model: "embedding 10 8; positional-embedding; transformer-encoder 2 heads=2 feed-forward=16 dropout=0.0 mask=\"mask\"; multi-head-attention 2 mask=\"mask\"; parallel { branch { sequence-pool mask=\"mask\"; }; branch { sequence-pool \"max\" mask=\"mask\"; }; branch { sequence-pool \"first\" mask=\"mask\"; }; branch { sequence-pool \"last\" mask=\"mask\"; }; }; linear 2",
        sample: &[7],
        ids: Some(10),
        train: true,
        mask: true,
        torch: "Sequence(nn.Embedding(10, 8), PositionalEmbedding(7, 8), nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2, enable_nested_tensor=False), SelfAttention(8, 2), MaskedParallel(SequencePool('mean'), SequencePool('max'), SequencePool('first'), SequencePool('last')), nn.Linear(32, 2), masked={2, 3, 4})",
    },
];

/// A padding mask for `batch` sequences of `length`: sequence `b` holds `1 + b % length`
/// tokens, on the left for even `b` (padding on the right), else on the right.
fn padding_mask(batch: i64, length: i64) -> Tensor {
    let mut m = vec![0f32; (batch * length) as usize];
    for b in 0..batch {
        let tokens = 1 + b % length;
        for t in 0..tokens {
            let at = if b % 2 == 0 { t } else { length - 1 - t };
            m[(b * length + at) as usize] = 1.0;
        }
    }
    Tensor::from_slice(&m).reshape([batch, length])
}

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("PIPELINE_VENV").expect(
        "PIPELINE_VENV is not set: run the tests with scripts/test.sh, which sets up the torch venv",
    );
    Path::new(&venv).join("bin/python")
}

fn model_of(blocks: &str, text: &str) -> manifests::ModelSpec {
    let manifest = format!(
        "data {{ source \"x.npz\" }}\n{blocks}\nmodel {{ {text} }}\nloss \"mse\"\noptimizer \"sgd\"\ntrain\n"
    );
    let lowered = manifests::lower(&manifest, "parity", Path::new("."), &[]);
    assert!(
        !manifests::has_errors(&lowered.diagnostics),
        "{text}: {:#?}",
        lowered.diagnostics
    );
    lowered.manifest.expect("no syntax error").model
}

#[test]
fn every_layer_family_matches_its_torch_nn_twin() {
    let dir = tempfile::tempdir().unwrap();
    let mut jobs = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        tch::manual_seed(i as i64);
        let names: &[&str] = if case.mask {
            &["tokens", "mask"]
        } else {
            &["features"]
        };
        let inputs: Vec<Input> = names
            .iter()
            .map(|name| Input {
                name: name.to_string(),
                shape: case.sample.to_vec(),
            })
            .collect();
        let model = Model::build(
            &model_of(case.blocks, case.model),
            &inputs,
            Device::Cpu,
            Kind::Float,
        )
        .unwrap_or_else(|d| panic!("{}: {d:?}", case.name));
        let shape: Vec<i64> = std::iter::once(6)
            .chain(case.sample.iter().copied())
            .collect();
        let x = match case.ids {
            Some(n) => Tensor::randint(n, shape.as_slice(), (Kind::Int64, Device::Cpu)),
            None => Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu)),
        };
        let mut xs = vec![x.shallow_clone()];
        if case.mask {
            xs.push(padding_mask(shape[0], case.sample[0]));
        }
        let before = dir.path().join(format!("{i}-before.safetensors"));
        checkpoint::write_weights(&model, &before, Kind::Float).unwrap();
        let train = match case.train {
            true => Some(model.forward(&xs, true).unwrap()),
            false => None,
        };
        let eval = model.forward(&xs, false).unwrap();
        let after = dir.path().join(format!("{i}-after.safetensors"));
        checkpoint::write_weights(&model, &after, Kind::Float).unwrap();
        let tensors = dir.path().join(format!("{i}-io.safetensors"));
        let mut io = vec![("x", x), ("eval", eval)];
        if let [_, mask] = &xs[..] {
            io.push(("mask", mask.shallow_clone()));
        }
        if let Some(t) = train {
            io.push(("train", t));
        }
        Tensor::write_safetensors(&io, &tensors).unwrap();
        jobs.push(serde_json::json!({
            "name": case.name,
            "torch": case.torch,
            "before": before,
            "after": after,
            "io": tensors,
        }));
    }
    let list = dir.path().join("cases.json");
    std::fs::write(&list, serde_json::to_vec(&jobs).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parity.py");
    let out = Command::new(venv_python())
        .arg(&script)
        .arg(&list)
        .output()
        .expect("the venv's python runs");
    let report = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    println!("{report}");
    assert!(out.status.success(), "{report}\n{errors}");
    assert_eq!(
        report.lines().filter(|l| l.starts_with("ok ")).count(),
        CASES.len(),
        "{report}"
    );
}
