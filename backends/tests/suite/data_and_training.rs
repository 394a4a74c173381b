//! Data formats, label checks and small trainings through the library API.

use backends::data::Dataset;
use backends::observer::Silent;
use backends::{run, RunReport, StageStatus};
use manifests::{Diagnostic, Manifest, SplitName, StageConfig};
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// Runs the stages `order` without a cache, one run at a time: libtorch's random
/// generator is global, and tests run on parallel threads.
/// Taken by whatever uses libtorch's random generator, which is global, while tests run
/// on parallel threads.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_uncached(m: &Manifest, order: &[usize]) -> Result<RunReport, Diagnostic> {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = pipeline_core::fingerprint::Environment {
        tool: "test".into(),
        libtorch: "test".into(),
        device: "cpu".into(),
        processes: 1,
        threads: Some(2),
    };
    let states = pipeline_core::freshness::assess(
        m,
        order,
        &env,
        None,
        &mut cache::HashMemo::none(),
        &Default::default(),
    )?;
    run(
        m,
        &states,
        None,
        backends::accelerator::resolve(&m.accelerator, None)?,
        None,
        Default::default(),
        &mut Silent,
    )
}

fn manifest(dir: &Path, text: &str) -> Manifest {
    let path = dir.join("m.kdl");
    std::fs::write(&path, text).unwrap();
    let checked = pipeline_core::load(text, &path, &[]);
    assert!(checked.valid().is_some(), "{:#?}", checked.diagnostics);
    checked.manifest.unwrap()
}

fn classification(data: &str) -> String {
    format!("data {{\n{data}\n}}\nmodel {{ linear 3 }}\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\n")
}

fn features_and_labels() -> (Tensor, Tensor) {
    let x = Tensor::arange(40, (Kind::Float, Device::Cpu)).reshape([10, 4]);
    let y = Tensor::from_slice(&[0i64, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
    (x, y)
}

#[test]
fn npz_safetensors_and_npy_load_alike() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y) = features_and_labels();
    Tensor::write_npz(&[("x", &x), ("y", &y)], dir.path().join("d.npz")).unwrap();
    Tensor::write_safetensors(
        &[("feats", &x), ("target", &y)],
        dir.path().join("d.safetensors"),
    )
    .unwrap();
    x.write_npy(dir.path().join("x.npy")).unwrap();
    y.write_npy(dir.path().join("y.npy")).unwrap();
    for data in [
        "source \"d.npz\"",
        "source \"d.safetensors\"\nfeatures \"feats\"\nlabels \"target\"",
        "source \"x.npy\"\nlabels \"y.npy\"",
    ] {
        let m = manifest(dir.path(), &classification(data));
        let d = Dataset::load(&m, true, None).unwrap();
        assert_eq!(d.sample_shape, [4], "{data}");
        assert_eq!(d.labels.kind(), Kind::Int64);
        assert_eq!(
            Vec::<i64>::try_from(&d.labels).unwrap(),
            [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
        );
        assert_eq!(d.splits.train.len() + d.splits.test.len(), 10);
        let (xs, _) = d.batch(d.splits.get(SplitName::Train), None).unwrap();
        assert_eq!(xs[0].size(), [8, 4]);
    }
}

#[test]
fn a_missing_array_name_lists_the_names_there_are() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y) = features_and_labels();
    Tensor::write_npz(&[("inputs", &x), ("y", &y)], dir.path().join("d.npz")).unwrap();
    let m = manifest(dir.path(), &classification("source \"d.npz\""));
    let err = Dataset::load(&m, true, None).unwrap_err();
    assert_eq!(err.code, "pipeline::data::missing_array");
    assert!(
        err.message
            .ends_with("d.npz: no array named `x`; it has: inputs, y"),
        "{}",
        err.message
    );
}

#[test]
fn class_labels_must_be_whole_and_features_finite() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.csv"), "1,2,0\n3,4,1.5\n").unwrap();
    let m = manifest(dir.path(), &classification("source \"a.csv\""));
    let err = Dataset::load(&m, true, None).unwrap_err();
    assert_eq!(err.code, "pipeline::data::bad_label");
    assert!(
        err.message
            .ends_with("a.csv:2: label 1.5 is not a class index"),
        "{}",
        err.message
    );

    // NaN is a missing value (`data.missing`), infinity is not a number to train on.
    std::fs::write(dir.path().join("b.csv"), "1,2,0\n3,nan,1\n").unwrap();
    let m = manifest(dir.path(), &classification("source \"b.csv\""));
    let err = Dataset::load(&m, true, None).unwrap_err();
    assert_eq!(err.code, "pipeline::data::missing_value");
    assert!(
        err.message
            .ends_with("b.csv:2: feature `column 1` (column 1) is missing"),
        "{}",
        err.message
    );
    std::fs::write(dir.path().join("c.csv"), "1,2,0\n3,inf,1\n").unwrap();
    let m = manifest(dir.path(), &classification("source \"c.csv\""));
    let err = Dataset::load(&m, true, None).unwrap_err();
    assert_eq!(err.code, "pipeline::data::not_finite");
    assert!(
        err.message.ends_with("c.csv:2: a feature is infinite"),
        "{}",
        err.message
    );
}

#[test]
fn standard_scaling_uses_the_training_split_only() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..100)
        .map(|i| format!("{},{}\n", i as f64, i % 2))
        .collect();
    std::fs::write(dir.path().join("s.csv"), rows).unwrap();
    let m = manifest(
        dir.path(),
        &classification("source \"s.csv\"\nscale \"standard\""),
    );
    let d = Dataset::load(&m, true, None).unwrap();
    let (train, _) = d.batch(d.splits.get(SplitName::Train), None).unwrap();
    let (test, _) = d.batch(d.splits.get(SplitName::Test), None).unwrap();
    let (train, test) = (&train[0], &test[0]);
    assert!(train.mean(Kind::Float).double_value(&[]).abs() < 1e-5);
    assert!((train.std(false).double_value(&[]) - 1.0).abs() < 1e-4);
    assert!(
        test.mean(Kind::Float).double_value(&[]).abs() > 1e-4,
        "test statistics are not used"
    );
}

#[test]
fn regression_with_mse_learns_a_linear_rule() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..200)
        .map(|i| {
            let (a, b) = ((i % 17) as f64 / 17.0, (i % 11) as f64 / 11.0);
            format!("{a},{b},{}\n", 2.0 * a - b + 0.5)
        })
        .collect();
    std::fs::write(dir.path().join("r.csv"), rows).unwrap();
    let text = "seed 3\ndata { source \"r.csv\"; split train=0.8 val=0.1 test=0.1; }\nmodel { linear 1 }\nloss \"mse\"\noptimizer \"sgd\" lr=0.1 momentum=0.9 nesterov=#true\nschedule \"step\" step-size=20 gamma=0.5\ntrain epochs=60 batch-size=16\neval \"test\" needs=\"train\"\n";
    let m = manifest(dir.path(), text);
    let report = run_uncached(&m, &[0, 1]).unwrap();
    assert!(report.ok(), "{report:#?}");
    let train = &report.stages[0].metrics;
    let test = &report.stages[1].metrics;
    assert!(train["val_loss"] < 1e-3, "{train:?}");
    assert!(test["loss"] < 1e-3, "{test:?}");
    assert!(
        !test.contains_key("accuracy"),
        "regression reports no accuracy"
    );
    assert!(report
        .run_dir
        .as_ref()
        .unwrap()
        .join("metrics.jsonl")
        .is_file());
    assert_eq!(report.stages[0].status, StageStatus::Ran);
}

#[test]
fn a_regression_model_must_match_the_number_of_targets() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("r.csv"),
        "1,2,3\n4,5,6\n7,8,9\n1,1,1\n2,2,2\n",
    )
    .unwrap();
    let m = manifest(
        dir.path(),
        "data { source \"r.csv\"; }\nmodel { linear 2 }\nloss \"mse\"\noptimizer \"adam\"\ntrain\n",
    );
    let err = run_uncached(&m, &[0]).unwrap_err();
    assert_eq!(err.code, "pipeline::model::output_size");
    assert_eq!(
        err.message,
        "the model has 2 outputs per sample but the data has 1 targets"
    );
    assert!(
        !dir.path().join(".pipeline").exists(),
        "nothing is written when a run cannot start"
    );
}

#[test]
fn a_train_stage_can_start_from_another_and_the_same_seed_gives_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..60)
        .map(|i| format!("{},{},{}\n", (i % 7) as f64, (i % 5) as f64, i % 3))
        .collect();
    std::fs::write(dir.path().join("c.csv"), rows).unwrap();
    let text = "data { source \"c.csv\"; scale \"minmax\"; }\nmodel { linear 8; batch-norm; gelu; dropout 0.1; linear 3; log-softmax; }\nloss \"nll\"\noptimizer \"rmsprop\" lr=0.01\ntrain \"pre\" epochs=2\ntrain \"fine\" epochs=2 needs=\"pre\"\ncheckpoint needs=\"fine\"\n";
    let m = manifest(dir.path(), text);
    let a = run_uncached(&m, &[0, 1, 2]).unwrap();
    let b = run_uncached(&m, &[0, 1, 2]).unwrap();
    assert!(a.ok() && b.ok());
    assert_eq!(a.stages[1].metrics["steps"], 4.0);
    let bytes_a = std::fs::read(&a.stages[2].outputs[0]).unwrap();
    let bytes_b = std::fs::read(&b.stages[2].outputs[0]).unwrap();
    assert_eq!(
        bytes_a, bytes_b,
        "same seed, same machine: identical weights"
    );
}

#[test]
fn batch_norm_refuses_a_batch_of_one_instead_of_training_nan_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..11)
        .map(|i| format!("{},{},{}\n", i, i * 2, i % 2))
        .collect();
    std::fs::write(dir.path().join("b.csv"), rows).unwrap();
    let text = "data { source \"b.csv\"; }\nmodel { linear 4; batch-norm; linear 2; }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain batch-size=8\n";
    let m = manifest(dir.path(), text);
    let report = run_uncached(&m, &[0]).unwrap();
    let err = report.stages[0].error.as_ref().unwrap();
    assert_eq!(err.code, "pipeline::train::batch_of_one");
    assert_eq!(err.message, "stage `train`: a training batch would hold one sample (9 samples in batches of 8), and batch-norm needs at least two");
    let m = manifest(
        dir.path(),
        &text.replace("batch-size=8", "batch-size=8 drop-last=#true"),
    );
    assert!(run_uncached(&m, &[0]).unwrap().ok());
}

#[test]
fn training_can_start_from_exported_weights_and_a_mismatch_is_diagnosed() {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..40)
        .map(|i| format!("{},{},{}\n", (i % 7) as f64, (i % 5) as f64, i % 2))
        .collect();
    std::fs::write(dir.path().join("c.csv"), rows).unwrap();
    let base = "data { source \"c.csv\"; }\nmodel { linear 4; relu; linear 2; }\nloss \"cross-entropy\"\noptimizer \"sgd\" lr=0.01\n";
    let m = manifest(
        dir.path(),
        &format!("{base}train epochs=3\ncheckpoint needs=\"train\" path=\"w.safetensors\"\n"),
    );
    let first = run_uncached(&m, &[0, 1]).unwrap();
    assert!(first.ok());
    let m = manifest(
        dir.path(),
        &format!("{base}train epochs=1 init=\"w.safetensors\"\n"),
    );
    let resumed = run_uncached(&m, &[0]).unwrap();
    assert!(resumed.ok());
    assert!(
        resumed.stages[0].metrics["loss"] < first.stages[0].metrics["loss"] * 1.5,
        "starting from trained weights, not from scratch: {:?} vs {:?}",
        resumed.stages[0].metrics,
        first.stages[0].metrics
    );
    let m = manifest(
        dir.path(),
        &format!(
            "{}train epochs=1 init=\"w.safetensors\"\n",
            base.replace("linear 4", "linear 5")
        ),
    );
    let report = run_uncached(&m, &[0]).unwrap();
    let err = report.stages[0].error.as_ref().unwrap();
    assert_eq!(err.code, "pipeline::train::bad_init");
    assert_eq!(
        err.message,
        "stage `train`: the weights in w.safetensors do not match the model: of another shape `0.bias` (the model's [5], the file's [4]), `0.weight` (the model's [5, 2], the file's [4, 2]), `2.weight` (the model's [2, 5], the file's [2, 4])"
    );
}

#[test]
fn init_loads_what_matches_by_name_and_shape_in_the_models_dtype_and_keeps_the_rest_fresh() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.csv"), "1,2,0\n3,4,1\n").unwrap();
    // Another model's weights: layer 0 as this one's (in float64), layer 2 of another
    // size, and a tensor this model has not.
    let opts = (Kind::Double, Device::Cpu);
    let (w0, b0) = (Tensor::randn([4, 2], opts), Tensor::randn([4], opts));
    let (w2, b2) = (Tensor::randn([3, 4], opts), Tensor::randn([3], opts));
    let extra = Tensor::randn([7], opts);
    Tensor::write_safetensors(
        &[
            ("0.weight", &w0),
            ("0.bias", &b0),
            ("2.weight", &w2),
            ("2.bias", &b2),
            ("head.scale", &extra),
        ],
        dir.path().join("w.safetensors"),
    )
    .unwrap();
    let m = manifest(
        dir.path(),
        "data { source \"c.csv\"; }\nmodel { linear 4; relu; linear 2; }\nloss \"cross-entropy\"\noptimizer \"sgd\"\ntrain init=\"w.safetensors\" strict=#false\n",
    );
    let build = || {
        tch::manual_seed(7);
        backends::model::Model::build(&m.model, &features(&[2]), Device::Cpu, Kind::Float).unwrap()
    };
    let (fresh, model) = (build(), build());
    let StageConfig::Train(spec) = &m.stages[0].config else {
        panic!("a train stage")
    };
    let init = spec.init.as_ref().unwrap();
    let matched =
        backends::finetune::load_init(&model, &m, &m.stages[0], spec, init, &mut Silent).unwrap();
    assert_eq!(matched.loaded, ["0.bias", "0.weight"]);
    assert_eq!(matched.not_loaded(), ["2.bias", "2.weight"]);
    assert_eq!(matched.unused(), ["2.bias", "2.weight", "head.scale"]);
    let (now, before) = (model.vs.variables(), fresh.vs.variables());
    for (name, file) in [("0.weight", &w0), ("0.bias", &b0)] {
        assert_eq!(now[name].kind(), Kind::Float, "{name}");
        assert!(now[name].equal(&file.to_kind(Kind::Float)), "{name} loaded");
    }
    for name in ["2.weight", "2.bias"] {
        assert!(
            now[name].equal(&before[name]),
            "{name} kept its fresh values"
        );
    }
}

/// The weights a run exported through its `checkpoint` stage (the last stage).
fn exported(report: &RunReport) -> Vec<(String, Tensor)> {
    let path = &report.stages.last().unwrap().outputs[0];
    let mut named = Tensor::read_safetensors(path).unwrap();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

#[test]
fn accumulating_four_batches_equals_one_batch_four_times_bigger() {
    accumulation_equals_one_bigger_batch(256);
}

/// 250 samples: the last step of each epoch accumulates 3 batches of 8 and one of 2,
/// which must weigh like the last batch of 26 of the big-batch run (by samples, not
/// by micro-batches).
#[test]
fn accumulating_a_short_last_batch_weighs_it_by_its_samples() {
    accumulation_equals_one_bigger_batch(250);
}

fn accumulation_equals_one_bigger_batch(samples: usize) {
    let dir = tempfile::tempdir().unwrap();
    let rows: String = (0..samples)
        .map(|i| {
            let (a, b) = ((i % 13) as f64 / 13.0, (i % 7) as f64 / 7.0);
            format!("{a},{b},{}\n", usize::from(a + b > 0.9))
        })
        .collect();
    std::fs::write(dir.path().join("a.csv"), rows).unwrap();
    let text = |batch: u64, accumulate: u64| {
        format!(
            "seed 5\ndata {{ source \"a.csv\"; split train=1.0 val=0.0 test=0.0; }}\nmodel {{ linear 16; tanh; linear 2; }}\nloss \"cross-entropy\"\noptimizer \"adamw\" lr=0.01 weight-decay=0.01\nschedule \"cosine\" warmup-epochs=1\naccelerator accumulate={accumulate} max-norm=0.5\ntrain epochs=3 batch-size={batch}\ncheckpoint needs=\"train\"\n"
        )
    };
    let small = run_uncached(&manifest(dir.path(), &text(8, 4)), &[0, 1]).unwrap();
    let big = run_uncached(&manifest(dir.path(), &text(32, 1)), &[0, 1]).unwrap();
    assert!(small.ok() && big.ok(), "{small:#?}");
    assert_eq!(
        small.stages[0].metrics["steps"],
        3.0 * 8.0,
        "8 optimizer steps per epoch"
    );
    assert_eq!(
        small.stages[0].metrics["steps"],
        big.stages[0].metrics["steps"]
    );
    let (a, b) = (exported(&small), exported(&big));
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x.allclose(y, 1e-5, 1e-6, false), "{name}: {x} vs {y}");
    }
    let unclipped = run_uncached(
        &manifest(dir.path(), &text(32, 1).replace(" max-norm=0.5", "")),
        &[0, 1],
    )
    .unwrap();
    assert!(
        !exported(&unclipped)[0]
            .1
            .allclose(&b[0].1, 1e-5, 1e-6, false),
        "clipping changed the training"
    );
}

#[test]
fn bf16_mixed_computes_the_forward_pass_in_bf16_and_keeps_fp32_weights() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.csv"),
        (0..64)
            .map(|i| format!("{},{},{}\n", i % 5, i % 3, i % 2))
            .collect::<String>(),
    )
    .unwrap();
    let m = manifest(
        dir.path(),
        "data { source \"c.csv\"; }\nmodel { linear 8; relu; linear 2; }\nloss \"cross-entropy\"\noptimizer \"adam\"\naccelerator precision=\"bf16-mixed\"\ntrain epochs=2\ncheckpoint needs=\"train\"\n",
    );
    let numerics = backends::numerics::Numerics::new(&m.accelerator, Device::Cpu).unwrap();
    let model =
        backends::model::Model::build(&m.model, &features(&[2]), Device::Cpu, numerics.weights)
            .unwrap();
    let x = [Tensor::ones([4, 2], (Kind::Float, Device::Cpu))];
    let out = numerics.autocast(|| model.forward(&x, true)).unwrap();
    assert_eq!(out.kind(), Kind::BFloat16, "the forward pass ran in bf16");
    assert_eq!(
        model.forward(&x, true).unwrap().kind(),
        Kind::Float,
        "and only under autocast"
    );
    for (name, w) in model.vs.variables() {
        assert_eq!(w.kind(), Kind::Float, "{name}: master weights stay fp32");
    }
    let report = run_uncached(&m, &[0, 1]).unwrap();
    assert!(report.ok(), "{report:#?}");
    assert!(exported(&report)
        .iter()
        .all(|(_, t)| t.kind() == Kind::Float));

    // bf16-true trains in bf16 and still exports fp32.
    let m = manifest(
        dir.path(),
        &std::fs::read_to_string(dir.path().join("m.kdl"))
            .unwrap()
            .replace("bf16-mixed", "bf16-true"),
    );
    let numerics = backends::numerics::Numerics::new(&m.accelerator, Device::Cpu).unwrap();
    assert_eq!(numerics.weights, Kind::BFloat16);
    let report = run_uncached(&m, &[0, 1]).unwrap();
    assert!(report.ok(), "{report:#?}");
    assert!(exported(&report)
        .iter()
        .all(|(_, t)| t.kind() == Kind::Float));
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/test-gpu.sh runs it"]
fn sixteen_mixed_trains_on_cuda_with_the_loss_scaler() {
    backends::device::load_cuda().expect("the CUDA library loads");
    assert!(tch::Cuda::is_available(), "no CUDA device");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.csv"),
        (0..256)
            .map(|i| format!("{},{},{}\n", i % 5, i % 3, (i % 5 + i % 3) % 2))
            .collect::<String>(),
    )
    .unwrap();
    let m = manifest(
        dir.path(),
        "data { source \"c.csv\"; scale \"standard\"; }\nmodel { linear 32; relu; linear 2; }\nloss \"cross-entropy\"\noptimizer \"adam\" lr=0.01\naccelerator device=\"cuda:0\" precision=\"16-mixed\" max-norm=1.0\ntrain epochs=5\ncheckpoint needs=\"train\"\n",
    );
    let report = run_uncached(&m, &[0, 1]).unwrap();
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.device, "cuda:0");
    let metrics = &report.stages[0].metrics;
    assert!(metrics["skipped_steps"] < metrics["steps"], "{metrics:?}");
    assert!(exported(&report)
        .iter()
        .all(|(_, t)| t.kind() == Kind::Float));
}

/// The one model input of tabular data, of this shape.
fn features(shape: &[i64]) -> Vec<pipeline_core::network::Input> {
    vec![pipeline_core::network::Input {
        name: "features".into(),
        shape: shape.to_vec(),
    }]
}
