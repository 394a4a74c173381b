//! A run that cannot go on stops with a diagnostic that says why, located in the manifest:
//! a disk that refuses a snapshot or the trained weights (nothing half-written left), a
//! training whose loss stops being finite, a training split with no sample, a label
//! missing from the data, an evaluation of an empty split or of a metric the split leaves
//! undefined, a checkpoint that would replace a file pipeline did not write or cannot be
//! written, a model larger than the machine, a scripted model whose output is not a row
//! per sample or whose archive lost its weights, a scripted model's own error in training,
//! evaluation or prediction, an evaluation whose outputs overflow, an
//! input file that is not numbers, a bucketed sampler's feature a sample does not have, a
//! distributed environment half set.

use crate::common::{assert_fixture, pipeline, text};
use std::path::Path;

/// The diagnostic of a failed run: its stderr from the line of its code on (the progress
/// lines before it carry times).
fn diagnostic(dir: &Path, manifest: &str) -> String {
    first_diagnostic(&pipeline(dir, &["run", manifest, "--no-cache"]))
}

/// The diagnostic `out` ends with, that of a failed command.
fn first_diagnostic(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let at = stderr
        .lines()
        .position(|l| l.starts_with("pipeline::"))
        .unwrap_or_else(|| panic!("no diagnostic in {stderr}"));
    stderr.lines().skip(at).collect::<Vec<_>>().join("\n")
}

/// Samples of two features and a class, `labels` the classes as written.
fn tiny<const N: usize>(dir: &Path, labels: [&str; N], split: &str) {
    let rows: Vec<String> = (0..N)
        .map(|i| format!("{},{},{}\n", 2 * i + 1, 2 * i + 2, labels[i]))
        .collect();
    std::fs::write(dir.join("tiny.csv"), rows.concat()).unwrap();
    let manifest = format!(
        r#"pipeline "t"
data {{
    source "tiny.csv"
    split {split}
}}
model {{
    linear 2
}}
loss "cross-entropy"
optimizer "sgd" lr=0.01
train epochs=1 batch-size=2
eval "test" needs="train" split="test"
"#
    );
    std::fs::write(dir.join("t.kdl"), manifest).unwrap();
}

#[test]
fn a_loss_that_is_no_longer_finite_stops_the_training_at_its_batch() {
    let dir = crate::common::small_project(
        &crate::common::SMALL.replace(r#""adam" lr=0.01"#, r#""sgd" lr=1e30"#),
    );
    // The last finite loss is the first batch's, whose last digits are the machine's.
    let shown = diagnostic(dir.path(), "small.kdl");
    let (head, tail) = shown.split_once("it was ").expect("the last finite loss");
    let number = tail.find(|c: char| c.is_whitespace()).unwrap_or(tail.len());
    assert!(
        tail[..number]
            .parse::<f64>()
            .is_ok_and(|l| l > 2.0 && l < 2.5),
        "{shown}"
    );
    assert_fixture(
        "run-diverged.stderr",
        &format!("{head}it was …{}", &tail[number..]),
    );
}

#[test]
fn a_training_split_without_a_sample_is_named() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path(), ["0", "1", "0", "1"], "train=0.1 test=0.9");
    assert_fixture("run-no-steps.stderr", &diagnostic(dir.path(), "t.kdl"));
}

#[test]
fn a_missing_label_is_named_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path(), ["0", "", "0", "1"], "train=0.5 test=0.5");
    assert_fixture("run-missing-label.stderr", &diagnostic(dir.path(), "t.kdl"));
}

#[test]
fn an_evaluation_of_an_empty_split_is_named_at_its_split() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path(), ["0", "1", "0", "1"], "train=0.9 test=0.1");
    assert_fixture("run-empty-split.stderr", &diagnostic(dir.path(), "t.kdl"));
}

#[test]
fn a_metric_the_split_leaves_undefined_is_named_at_the_metric() {
    let dir = tempfile::tempdir().unwrap();
    // The test split is the last three samples: one class, whose AUROC is undefined.
    tiny(
        dir.path(),
        ["0", "0", "0", "1", "1", "1"],
        "train=0.5 test=0.5 shuffle=#false",
    );
    let manifest = std::fs::read_to_string(dir.path().join("t.kdl")).unwrap();
    let manifest = manifest.replace(
        r#"split="test""#,
        "split=\"test\" {\n    metrics \"auroc\"\n}",
    );
    std::fs::write(dir.path().join("t.kdl"), manifest).unwrap();
    assert_fixture(
        "run-undefined-metric.stderr",
        &diagnostic(dir.path(), "t.kdl"),
    );
}

#[test]
fn a_checkpoint_does_not_replace_a_file_pipeline_did_not_write() {
    let dir = crate::common::small_project(crate::common::SMALL);
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let mine = dir.path().join("out/model.safetensors");
    std::fs::write(&mine, "my own file").unwrap();
    assert_fixture(
        "run-checkpoint-refused.stderr",
        &diagnostic(dir.path(), "small.kdl"),
    );
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "my own file");
}

#[test]
fn a_checkpoint_whose_directory_is_a_file_is_named() {
    let dir = crate::common::small_project(crate::common::SMALL);
    std::fs::write(dir.path().join("out"), "a file").unwrap();
    assert_fixture(
        "run-write-failed.stderr",
        &diagnostic(dir.path(), "small.kdl"),
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "a file"
    );
}

#[test]
fn a_model_larger_than_the_machine_is_refused_before_it_is_built() {
    let dir = crate::common::small_project(&crate::common::SMALL.replace(
        "    linear 32\n",
        "    linear 1048576\n    linear 1048576\n",
    ));
    let shown = diagnostic(dir.path(), "small.kdl");
    // What the machine has is its own; the rest is the same everywhere.
    let (head, tail) = shown.split_once("; this machine has ").expect(&shown);
    assert_eq!(
        head,
        "pipeline::model::too_large\n\n  × the model's parameters need 4.0 TB (1099591319562 values)"
    );
    assert!(
        tail.contains("╰──── this model") && tail.contains("make the layers smaller"),
        "{tail}"
    );
}

/// A project whose model is the TorchScript module `model.pt`, which `script` (Python,
/// with `torch` imported) saves.
fn scripted(script: &str) -> tempfile::TempDir {
    let dir = crate::common::small_project(&crate::common::SMALL.replace(
        "    linear 32\n    relu\n    linear 10\n",
        "    torchscript \"model.pt\"\n",
    ));
    crate::common::py(dir.path(), &format!("import torch, zipfile\n{script}"));
    dir
}

const LINEAR: &str = "class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(64, 10)
    def forward(self, x):
        return self.l(x)";

#[test]
fn a_scripted_model_whose_output_is_not_a_row_per_sample_is_named() {
    let dir = scripted(&format!(
        "{}.unsqueeze(1)\ntorch.jit.script(M()).save('model.pt')\n",
        LINEAR
    ));
    assert_fixture(
        "run-output-shape.stderr",
        &diagnostic(dir.path(), "small.kdl"),
    );
}

#[test]
fn a_scripted_model_whose_tensors_are_missing_is_named_at_the_module() {
    // A whole archive with its code, which `check` reads, but not its weights' data.
    let dir = scripted(&format!(
        "{LINEAR}\ntorch.jit.script(M()).save('whole.pt')\n\
         whole = zipfile.ZipFile('whole.pt')\n\
         with zipfile.ZipFile('model.pt', 'w') as out:\n\
         \x20   for name in whole.namelist():\n\
         \x20       if '/data/' not in name:\n\
         \x20           out.writestr(name, whole.read(name))\n"
    ));
    let check = pipeline(dir.path(), &["check", "small.kdl"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let shown = diagnostic(dir.path(), "small.kdl");
    assert!(
        shown.starts_with(
            "pipeline::model::torchscript_load\n\n  × cannot load the TorchScript model model.pt: "
        ) && shown.contains("╰── this module")
            && shown.contains("save it again with `torch.jit.save`"),
        "{shown}"
    );
}

#[test]
fn a_scripted_models_own_error_stops_its_stage_located_there() {
    // A module that checks its inputs (as users' modules `assert`), and one that refuses
    // a short batch while training.
    // The module's source is named `guard.py` (not the temporary directory's path, which
    // its messages would show).
    let guard = |condition: &str| {
        format!(
            "import linecache\n\
             src = \"\"\"import torch\n\
             class M(torch.nn.Module):\n\
             \x20   def __init__(self):\n\
             \x20       super().__init__()\n\
             \x20       self.l = torch.nn.Linear(64, 10)\n\
             \x20   def forward(self, x):\n\
             \x20       if {condition}:\n\
             \x20           raise ValueError('refused by the module')\n\
             \x20       return self.l(x)\n\
             \"\"\"\n\
             linecache.cache['guard.py'] = (len(src), None, src.splitlines(True), 'guard.py')\n\
             exec(compile(src, 'guard.py', 'exec'))\n\
             torch.jit.script(M()).save('model.pt')\n"
        )
    };
    let stages = "eval \"hot\" needs=\"train\" source=\"hot.csv\"\n\
                  predict \"p\" needs=\"train\" source=\"hot.csv\" output=\"p.csv\"\n";
    let shown = |dir: &Path| {
        let manifest = std::fs::read_to_string(dir.join("small.kdl")).unwrap();
        let manifest = manifest
            .replace("scale \"minmax\"", "scale \"none\"")
            .replace("eval \"test\" needs=\"train\" split=\"test\"\n", stages);
        std::fs::write(dir.join("small.kdl"), manifest).unwrap();
        // Digits' pixels are 0 to 16; a row of another file has one at 200.
        let row = |first: &str| format!("{first},{}0\n", "1,".repeat(63));
        std::fs::write(dir.join("hot.csv"), row("200") + &row("1")).unwrap();
        let out = pipeline(dir, &["run", "small.kdl", "--no-cache"]);
        let stderr = text(&out.stderr);
        let at = stderr.find("pipeline::").expect(&stderr);
        stderr[at..].trim_end().to_string()
    };
    let dir = scripted(&guard("bool((x > 100).any())"));
    assert_fixture("run-module-error-eval-predict.stderr", &shown(dir.path()));
    let dir = scripted(&guard("self.training and x.size(0) < 64"));
    assert_fixture("run-module-error-train.stderr", &shown(dir.path()));
}

#[test]
fn an_evaluation_whose_outputs_overflow_names_the_data_not_the_weights() {
    // Unscaled features, one row of another file at the largest float32.
    let dir = crate::common::small_project(
        &crate::common::SMALL
            .replace("scale \"minmax\"", "scale \"none\"")
            .replace(
                "    linear 32\n    relu\n",
                "    linear 256\n    relu\n    linear 256\n    relu\n",
            )
            .replace(
                "eval \"test\" needs=\"train\" split=\"test\"",
                "eval \"far\" needs=\"train\" source=\"far.csv\"",
            ),
    );
    let row = |value: &str| format!("{}0\n", format!("{value},").repeat(64));
    std::fs::write(dir.path().join("far.csv"), row("3e38") + &row("1")).unwrap();
    assert_fixture(
        "run-eval-overflow.stderr",
        &diagnostic(dir.path(), "small.kdl"),
    );
}

#[test]
fn an_input_file_that_is_not_numbers_is_named_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path(), ["0", "1", "0", "1"], "train=0.5 test=0.5");
    std::fs::write(dir.path().join("meta.csv"), "1\n2\nabc\n4\n").unwrap();
    let manifest = r#"pipeline "t"
data {
    source "tiny.csv"
    inputs {
        meta "meta.csv"
    }
    split train=0.5 test=0.5
}
model {
    parallel {
        branch { linear 2; }
        branch input="meta" { linear 2; }
    }
    relu
    linear 2
}
loss "cross-entropy"
optimizer "sgd" lr=0.01
train epochs=1 batch-size=2
"#;
    std::fs::write(dir.path().join("inputs.kdl"), manifest).unwrap();
    assert_fixture(
        "run-bad-input.stderr",
        &diagnostic(dir.path(), "inputs.kdl"),
    );
}

#[test]
fn a_bucketed_samplers_feature_that_a_sample_does_not_have_is_refused_by_check() {
    let manifest = crate::common::SMALL.replace(
        "train epochs=3",
        "accelerator {\n    sampler \"bucketed\"\n    bucket-by 100\n}\ntrain epochs=3",
    );
    let dir = crate::common::small_project(&manifest);
    // `check` knows a sample's features from the CSV's first line.
    let out = pipeline(dir.path(), &["check", "small.kdl"]);
    assert_fixture("run-bad-bucket-key.stderr", &first_diagnostic(&out));
    assert_eq!(
        first_diagnostic(&pipeline(dir.path(), &["run", "small.kdl"])),
        first_diagnostic(&out)
    );
}

#[test]
fn a_distributed_environment_half_set_is_refused_before_anything_runs() {
    let dir = crate::common::small_project(crate::common::SMALL);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "small.kdl", "--no-cache"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("WORLD_SIZE", "2")
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_fixture("run-bad-environment.stderr", &first_diagnostic(&out));
    assert!(!dir.path().join(".pipeline/runs").exists());
}

/// The paths of the files under `dir` whose name ends with `.tmp`.
fn temporary_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(temporary_files(&path));
        } else if path.extension().is_some_and(|e| e == "tmp") {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_disk_that_refuses_a_write_stops_the_run_with_the_file_and_loses_nothing() {
    let dir = crate::common::small_project(crate::common::SMALL);
    // A snapshot (weights and Adam's two moments, ~29 kB) does not fit in 16 kB: the
    // training stops at its first snapshot, after epoch 1.
    // The diagnostic without its frame and its spaces: miette breaks its lines inside the
    // path, where depends on the cache key in it.
    let squashed = |out| -> String {
        first_diagnostic(out)
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '│')
            .collect()
    };
    let out = crate::common::pipeline_with_files_up_to(dir.path(), &["run", "small.kdl"], 16 << 10);
    let shown = squashed(&out);
    assert!(
        shown.starts_with(
            "pipeline::train::snapshot_failed×cannotwritethesnapshot./.pipeline/cache/snapshots/"
        ) && shown.contains("/snapshot-23.safetensors:Filetoolarge(oserror27)")
            && shown.ends_with("help:checkthatthecachedirectoryiswritableandthediskisnotfull"),
        "{shown}"
    );
    // One epoch and no snapshot: the trained weights (~10 kB) do not fit in 9 kB.
    let out = crate::common::pipeline_with_files_up_to(
        dir.path(),
        &["run", "small.kdl", "--set", "train.epochs=1"],
        9 << 10,
    );
    let shown = squashed(&out);
    assert!(
        shown.starts_with("pipeline::checkpoint::write_failed×cannotwrite./.pipeline/cache/")
            && shown.contains("/model.safetensors:Filetoolarge(oserror27)")
            && shown.ends_with("help:checkthatthedirectoryiswritableandthediskisnotfull"),
        "{shown}"
    );
    // Nothing half-written is left, and with room again the run ends and its checkpoint
    // is whole.
    let leftovers = temporary_files(&dir.path().join(".pipeline"));
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let out = pipeline(dir.path(), &["run", "small.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let weights = crate::common::tensors(&dir.path().join("out/model.safetensors"));
    assert_eq!(weights.len(), 4);
}
