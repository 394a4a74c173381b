//! End-to-end tests of named model inputs with the real binary: token ids stored as an
//! integer `.npy` with `padding-id` give `tokens` and `mask`; layers written with
//! `mask="mask"` leave the padding out (a task only the mask can solve is solved with it
//! and not without); a TorchScript module takes the inputs by its `forward`'s argument
//! names; and every way of naming an input wrongly is a located diagnostic.

use crate::common::{assert_fixture, checkpoint_metadata, pipeline, py, refused, text};
use serde_json::Value;
use std::path::Path;

/// Sequences of 3 to 12 token ids from 1 to 4, padded with 0 on the right to 12; the
/// label is the last real token's (its id − 1). The last step is padding for most
/// sequences, so only a mask finds the real one.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    py(
        dir.path(),
        "import numpy as np\n\
         rng = np.random.default_rng(3)\n\
         n, length = 1200, 12\n\
         tokens = np.zeros((n, length), dtype=np.int64)\n\
         labels = np.zeros(n, dtype=np.int64)\n\
         for i in range(n):\n\
         \x20   k = rng.integers(3, length + 1)\n\
         \x20   tokens[i, :k] = rng.integers(1, 5, size=k)\n\
         \x20   labels[i] = tokens[i, k - 1] - 1\n\
         np.save('tokens.npy', tokens)\n\
         np.save('labels.npy', labels)\n",
    );
    std::fs::write(
        dir.path().join("last.kdl"),
        "pipeline \"last-token\"\nseed 5\n\
         data {\n    source \"tokens.npy\"\n    labels \"labels.npy\"\n    padding-id 0\n    split train=0.8 test=0.2\n}\n\
         model {\n    embedding 5 8\n    sequence-pool \"last\" mask=\"mask\"\n    linear 4\n}\n\
         loss \"cross-entropy\"\noptimizer \"adam\" lr=1e-2\n\
         train {\n    epochs 6\n    batch-size 32\n}\n\
         eval \"test\" {\n    needs \"train\"\n    split \"test\"\n}\n\
         checkpoint \"export\" {\n    needs \"train\"\n}\n",
    )
    .unwrap();
    dir
}

fn test_accuracy(dir: &Path, manifest: &str) -> f64 {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap()
}

#[test]
fn a_padding_mask_finds_the_last_real_token() {
    let dir = project();
    let with_mask = test_accuracy(dir.path(), "last.kdl");
    assert!(with_mask >= 0.98, "with the mask: {with_mask}");
    let out = pipeline(dir.path(), &["run", "last.kdl", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let metadata = checkpoint_metadata(dir.path(), &report, 2);
    assert_eq!(metadata["inputs"], serde_json::json!(["tokens", "mask"]));

    // Without it, the last step is mostly padding: no better than guessing the most
    // frequent class.
    let manifest = std::fs::read_to_string(dir.path().join("last.kdl")).unwrap();
    std::fs::write(
        dir.path().join("unmasked.kdl"),
        manifest.replace(" mask=\"mask\"", ""),
    )
    .unwrap();
    let without = test_accuracy(dir.path(), "unmasked.kdl");
    assert!(without < 0.5, "without the mask: {without}");
}

#[test]
fn a_torchscript_module_takes_the_inputs_by_its_arguments_names() {
    let dir = project();
    // `forward(self, mask, tokens)`: by name, whatever the order.
    py(
        dir.path(),
        "import torch\nfrom torch import nn\n\
         class Last(nn.Module):\n\
         \x20   def __init__(self):\n\
         \x20       super().__init__()\n\
         \x20       self.embed = nn.Embedding(5, 8)\n\
         \x20       self.out = nn.Linear(8, 4)\n\
         \x20   def forward(self, mask, tokens):\n\
         \x20       at = tokens.shape[1] - 1 - (mask != 0).long().flip(1).argmax(1)\n\
         \x20       x = self.embed(tokens.long())\n\
         \x20       return self.out(x[torch.arange(x.shape[0]), at])\n\
         torch.jit.script(Last()).save('last.pt')\n\
         class Extra(nn.Module):\n\
         \x20   def forward(self, tokens, lengths):\n\
         \x20       return tokens\n\
         torch.jit.script(Extra()).save('extra.pt')\n",
    );
    let manifest = std::fs::read_to_string(dir.path().join("last.kdl")).unwrap();
    let start = manifest.find("model {").unwrap();
    let end = start + manifest[start..].find("}\n").unwrap() + 2;
    let scripted = |file: &str| {
        format!(
            "{}model {{\n    torchscript \"{file}\"\n}}\n{}",
            &manifest[..start],
            &manifest[end..]
        )
    };
    std::fs::write(dir.path().join("script.kdl"), scripted("last.pt")).unwrap();
    let accuracy = test_accuracy(dir.path(), "script.kdl");
    assert!(accuracy >= 0.98, "the scripted twin: {accuracy}");

    std::fs::write(dir.path().join("extra.kdl"), scripted("extra.pt")).unwrap();
    let out = pipeline(dir.path(), &["run", "extra.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_fixture("inputs-torchscript-argument.run.stderr", &text(&out.stderr));
}

#[test]
fn token_ids_that_are_not_ids_or_all_padding_are_named_before_training() {
    let dir = project();
    py(
        dir.path(),
        "import numpy as np\n\
         t = np.load('tokens.npy').astype(np.float32)\n\
         t[7, 2] = 2.5\n\
         np.save('fractions.npy', t)\n\
         t = np.load('tokens.npy')\n\
         t[9] = 0\n\
         np.save('empty.npy', t)\n",
    );
    let manifest = std::fs::read_to_string(dir.path().join("last.kdl")).unwrap();
    for (file, fixture) in [
        ("fractions.npy", "inputs-not-a-token.run.stderr"),
        ("empty.npy", "inputs-all-padding.run.stderr"),
    ] {
        std::fs::write(
            dir.path().join("bad.kdl"),
            manifest.replace("tokens.npy", file),
        )
        .unwrap();
        let out = pipeline(dir.path(), &["run", "bad.kdl"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert_fixture(fixture, &text(&out.stderr));
    }
}

#[test]
fn inputs_named_wrongly_are_located_by_check() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.csv"), "a,b,c,y\n1,2,3,0\n4,5,6,1\n").unwrap();
    let manifest = |model: &str| {
        format!(
            "data {{\n    source \"t.csv\"\n    header #true\n    label \"y\"\n}}\n\
             model {{\n{model}\n}}\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\n"
        )
    };
    for (name, model) in [
        // A mask on a layer that reads every step.
        ("no-mask", "    linear 4\n    lstm 4 mask=\"mask\"\n    linear 2"),
        // A mask the data does not give (tabular data gives `features` only).
        (
            "unknown-mask",
            "    reshape 3 1\n    sequence-pool mask=\"mask\"\n    linear 2",
        ),
        // A mask of another length than the sequence (any input can be a mask).
        (
            "mask-shape",
            "    reshape 1 3\n    sequence-pool mask=\"features\"\n    linear 2",
        ),
        // A branch from an input of another name.
        (
            "unknown-branch-input",
            "    parallel {\n        branch { linear 2; }\n        branch input=\"feature\" { linear 2; }\n    }\n    linear 2",
        ),
    ] {
        std::fs::write(dir.path().join(format!("{name}.kdl")), manifest(model)).unwrap();
        let out = pipeline(dir.path(), &["check", &format!("{name}.kdl")]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stderr));
        assert_fixture(
            &format!("inputs-{name}.check.stderr"),
            &text(&out.stderr),
        );
    }
}

/// Features in an `.npy`, and a second input in a CSV of its own; the label needs both:
/// `x0 + m0 > 0`, the CSV's column on another scale.
fn two_files() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    py(
        dir.path(),
        "import numpy as np\n\
         rng = np.random.default_rng(4)\n\
         x = rng.normal(size=(800, 3)).astype(np.float32)\n\
         m = rng.normal(size=(800, 2))\n\
         np.save('x.npy', x)\n\
         np.save('y.npy', (x[:, 0] + m[:, 0] > 0).astype(np.int64))\n\
         with open('meta.csv', 'w') as f:\n\
         \x20   f.write('age,income\\n')\n\
         \x20   for a, b in m:\n\
         \x20       f.write(f'{100 * a + 40:.4f},{b:.4f}\\n')\n",
    );
    std::fs::write(
        dir.path().join("two.kdl"),
        "pipeline \"two-inputs\"\nseed 3\n\
         data {\n    source \"x.npy\"\n    labels \"y.npy\"\n    header #true\n    inputs {\n        meta \"meta.csv\" scale=\"standard\"\n    }\n    split train=0.8 test=0.2\n}\n\
         model {\n    parallel {\n        branch { linear 8; }\n        branch input=\"meta\" { linear 8; }\n    }\n    relu\n    linear 2\n}\n\
         loss \"cross-entropy\"\noptimizer \"adam\" lr=1e-2\n\
         train {\n    epochs 20\n    batch-size 32\n}\n\
         eval \"test\" {\n    needs \"train\"\n    split \"test\"\n}\n\
         checkpoint \"export\" {\n    needs \"train\"\n}\n",
    )
    .unwrap();
    dir
}

#[test]
fn an_input_from_a_file_of_its_own_joins_the_model_by_name() {
    let dir = two_files();
    let out = pipeline(dir.path(), &["run", "two.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.95, "{report}");
    let metadata = checkpoint_metadata(dir.path(), &report, 2);
    assert_eq!(metadata["inputs"], serde_json::json!(["features", "meta"]));
    let age = metadata["input_scaling"]["meta"]["subtract"][0]
        .as_f64()
        .unwrap();
    assert!((age - 40.0).abs() < 10.0, "{metadata}");

    // The input's file is in the cache key.
    let meta = dir.path().join("meta.csv");
    let mut rows = std::fs::read_to_string(&meta).unwrap();
    rows = rows.replacen(",", ",1", 2);
    std::fs::write(&meta, rows).unwrap();
    let status = text(&pipeline(dir.path(), &["status", "two.kdl"]).stdout);
    assert!(
        status.contains("input meta file meta.csv changed"),
        "{status}"
    );
}

/// A `predict` stage reads each of `data.inputs` from the file it names for its own
/// samples, scaled as the training's: predicting the test rows from files of their own
/// gives the test split's evaluation; without a file for an input, or with one for an
/// input the model does not have, `check` refuses it where it is written.
#[test]
fn a_prediction_reads_each_input_from_its_own_file() {
    let dir = two_files();
    let d = dir.path();
    let out = pipeline(d, &["run", "two.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    // The test rows, as new files: the features, and the input `meta` (its header kept).
    let split = d
        .join(report["run_dir"].as_str().unwrap())
        .join("split.json");
    py(
        d,
        &format!(
            "import json, numpy as np\n\
             test = json.load(open({split:?}))['test']\n\
             np.save('new-x.npy', np.load('x.npy')[test])\n\
             np.save('new-y.npy', np.load('y.npy')[test])\n\
             lines = open('meta.csv').read().splitlines()\n\
             open('new-meta.csv', 'w').write('\\n'.join([lines[0]] + [lines[1 + i] for i in test]) + '\\n')\n"
        ),
    );
    let manifest = std::fs::read_to_string(d.join("two.kdl")).unwrap();
    let predict = "predict \"new\" {\n    needs \"train\"\n    source \"new-x.npy\"\n    output \"new.csv\"\n    input \"meta\" \"new-meta.csv\"\n}\n";
    std::fs::write(d.join("two.kdl"), format!("{manifest}{predict}")).unwrap();
    let out = pipeline(d, &["run", "two.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let hits = py(
        d,
        "import csv, numpy as np\n\
         rows = list(csv.DictReader(open('new.csv')))\n\
         y = np.load('new-y.npy')\n\
         print(np.mean([int(r['class']) == t for r, t in zip(rows, y)]))\n",
    );
    let predicted: f64 = hits.trim().parse().unwrap();
    assert!(
        (predicted - accuracy).abs() < 1e-12,
        "the test split's accuracy {accuracy}, the predictions' {predicted}"
    );

    // Another file for the input is another prediction: in the stage's key.
    let meta = d.join("new-meta.csv");
    let rows = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, rows.replacen(",", ",1", 2)).unwrap();
    let status = text(&pipeline(d, &["status", "two.kdl"]).stdout);
    assert!(status.contains("new-meta.csv changed"), "{status}");

    // No file for `meta`; a file for an input the model does not read.
    std::fs::write(
        d.join("two.kdl"),
        format!(
            "{manifest}{}",
            predict.replace("input \"meta\"", "input \"metadata\"")
        ),
    )
    .unwrap();
    let stderr = refused(d, &["check", "two.kdl"], 1);
    assert_fixture("predict-input-missing.check.stderr", &stderr);
}

#[test]
fn inputs_of_another_length_or_name_or_shape_are_errors() {
    let dir = two_files();
    let manifest = std::fs::read_to_string(dir.path().join("two.kdl")).unwrap();
    // Check knows a CSV input's columns: a layer that cannot take them is located.
    std::fs::write(
        dir.path().join("shape.kdl"),
        manifest.replace(
            "branch input=\"meta\" { linear 8; }",
            "branch input=\"meta\" { reshape 3; }",
        ),
    )
    .unwrap();
    let out = pipeline(dir.path(), &["check", "shape.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_fixture("inputs-extra-shape.check.stderr", &text(&out.stderr));
    // A name the data gives already.
    std::fs::write(
        dir.path().join("name.kdl"),
        manifest.replace("meta \"meta.csv\"", "features \"meta.csv\""),
    )
    .unwrap();
    let out = pipeline(dir.path(), &["check", "name.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_fixture("inputs-extra-name.check.stderr", &text(&out.stderr));
    // An input no branch reads: a warning where it is defined.
    std::fs::write(
        dir.path().join("unused.kdl"),
        manifest.replace(
            "        branch input=\"meta\" { linear 8; }\n",
            "        branch { linear 4; }\n",
        ),
    )
    .unwrap();
    let out = pipeline(dir.path(), &["check", "unused.kdl"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("pipeline::data::unused_input")
            && stderr.contains("the input `meta` is never read by the model"),
        "{stderr}"
    );
    // A row short.
    let meta = dir.path().join("meta.csv");
    let rows = std::fs::read_to_string(&meta).unwrap();
    let mut lines: Vec<&str> = rows.lines().collect();
    lines.pop();
    std::fs::write(&meta, lines.join("\n") + "\n").unwrap();
    let out = pipeline(dir.path(), &["run", "two.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_fixture("inputs-extra-length.run.stderr", &text(&out.stderr));
}

#[test]
fn an_input_read_as_a_mask_needs_a_real_step_in_every_sample() {
    let dir = two_files();
    py(
        dir.path(),
        "import numpy as np\nm = np.ones((800, 3), dtype=np.float32)\nm[5] = 0\nnp.save('m.npy', m)\n",
    );
    let manifest = std::fs::read_to_string(dir.path().join("two.kdl")).unwrap();
    let start = manifest.find("model {").unwrap();
    let end = start + manifest[start..].find("\n}\n").unwrap() + 3;
    let masked = format!(
        "{}model {{\n    reshape 3 1\n    sequence-pool mask=\"m\"\n    linear 2\n}}\n{}",
        &manifest[..start],
        &manifest[end..]
    )
    .replace("inputs {\n", "inputs {\n        m \"m.npy\"\n");
    std::fs::write(dir.path().join("mask.kdl"), masked).unwrap();
    let out = pipeline(dir.path(), &["run", "mask.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("pipeline::data::bad_mask")
            && stderr.contains("the input `m`, sample 5: every step is padding"),
        "{stderr}"
    );
}

#[test]
fn every_embedding_gets_ids_below_its_count_from_the_input_it_reads() {
    let dir = two_files();
    py(
        dir.path(),
        "import numpy as np\nnp.save('ids.npy', np.arange(800 * 4).reshape(800, 4) % 9)\n",
    );
    let manifest = std::fs::read_to_string(dir.path().join("two.kdl")).unwrap();
    let bad = manifest
        .replace("inputs {\n", "inputs {\n        ids \"ids.npy\"\n")
        .replace(
            "branch input=\"meta\" { linear 8; }",
            "branch input=\"meta\" { linear 8; }\n        branch input=\"ids\" { embedding 5 2; flatten; }",
        );
    std::fs::write(dir.path().join("ids.kdl"), bad).unwrap();
    let out = pipeline(dir.path(), &["run", "ids.kdl"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_fixture("inputs-embedding-ids.run.stderr", &text(&out.stderr));
}
