//! Models beyond a plain stack, end to end through the binary: the residual example
//! trains to its target, its checkpoint loads into the PyTorch twin `docs/models.md`
//! gives for it, and a block used in a model caches like the same layers written inline.

use crate::common::{pipeline, root, small_project, text, SMALL};
use serde_json::Value;

fn run_json(dir: &std::path::Path, manifest: &str) -> Value {
    let out = pipeline(dir, &["run", manifest, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_residual_digits_example_reaches_97_percent_and_loads_into_its_torch_twin() {
    let example = std::fs::read_to_string(root().join("examples/resnet-digits.kdl")).unwrap();
    let dir = small_project(&example);
    std::fs::rename(dir.path().join("small.kdl"), dir.path().join("resnet.kdl")).unwrap();
    let report = run_json(dir.path(), "resnet.kdl");
    let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.97, "test accuracy {accuracy}");

    // The exported weights, by name, in the network docs/models.md writes for it.
    let export = report["stages"][2]["outputs"][0].as_str().unwrap();
    let venv = std::env::var_os("PIPELINE_VENV").expect("PIPELINE_VENV: run scripts/test.sh");
    let script = r#"
import sys
import torch
from torch import nn
from safetensors.torch import load_file
exec(sys.stdin.read())  # the twins block of docs/models.md
def basic(c_in, channels, stride=1):
    projection = None
    if c_in != channels or stride != 1:
        projection = nn.Conv2d(c_in, channels, 1, stride=stride, bias=False)
    return nn.Sequential(
        Residual(
            nn.Conv2d(c_in, channels, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            projection=projection,
        ),
        nn.ReLU(),
    )
model = nn.Sequential(
    nn.Unflatten(1, (1, 8, 8)),
    nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
    basic(16, 16), basic(16, 32, stride=2), basic(32, 32),
    nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()),
    nn.Linear(32, 10),
)
model.load_state_dict(load_file(sys.argv[1]), strict=True)
model.eval()
print("loaded", sum(p.numel() for p in model.parameters()))
"#;
    let docs = std::fs::read_to_string(root().join("docs/models.md")).unwrap();
    let twins = docs
        .split("```python\n# twins")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .map(|body| format!("# twins{body}"))
        .expect("docs/models.md has the twins block");
    let mut child = std::process::Command::new(std::path::Path::new(&venv).join("bin/python"))
        .args(["-c", script, export])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(twins.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("loaded "),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_block_use_caches_like_the_same_layers_written_inline() {
    let inline = SMALL;
    let with_block = SMALL.replace(
        "model {\n    linear 32\n    relu\n    linear 10\n}",
        "block \"hidden\" \"width\" {\n    linear $width\n    relu\n}\nmodel {\n    hidden 32\n    linear 10\n}",
    );
    assert_ne!(with_block, inline);
    let dir = small_project(inline);
    let first = run_json(dir.path(), "small.kdl");
    assert_eq!(first["stages"][0]["status"], "ran");
    std::fs::write(dir.path().join("small.kdl"), &with_block).unwrap();
    let out = pipeline(dir.path(), &["status", "small.kdl", "--json"]);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The layer names differ (`0.0.weight` against `0.weight`), so the weights do too:
    // the key must see the structure, not only the layers.
    assert_eq!(status["stages"][0]["status"], "stale", "{status}");
    // A block renamed, or its parameter renamed, is the same model.
    let renamed = with_block
        .replace("hidden", "wide")
        .replace("$width", "$w")
        .replace("\"width\"", "\"w\"");
    run_json(dir.path(), "small.kdl");
    std::fs::write(dir.path().join("small.kdl"), &renamed).unwrap();
    let again = run_json(dir.path(), "small.kdl");
    assert_eq!(again["stages"][0]["status"], "cached", "{again}");
}

/// The project with the order data (written by scripts/setup.sh) and `manifest`.
fn order_project(name: &str, manifest: &str) -> tempfile::TempDir {
    let data = root().join("examples/data/order.csv");
    assert!(
        data.is_file(),
        "{} is missing: run scripts/setup.sh (scripts/test.sh does)",
        data.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::copy(&data, dir.path().join("data/order.csv")).unwrap();
    std::fs::write(dir.path().join(name), manifest).unwrap();
    dir
}

/// Test accuracy of `manifest` on one thread (several libtorch threads on a loaded
/// two-core machine spin against each other: 20× slower).
fn order_accuracy(manifest: &str) -> f64 {
    let dir = order_project("m.kdl", manifest);
    let out = pipeline(
        dir.path(),
        &["run", "m.kdl", "--json", "--set", "accelerator.threads=1"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap()
}

#[test]
fn the_sequence_examples_read_the_order_that_a_bag_of_tokens_cannot() {
    let gru = std::fs::read_to_string(root().join("examples/sequence-gru.kdl")).unwrap();
    let transformer =
        std::fs::read_to_string(root().join("examples/sequence-transformer.kdl")).unwrap();
    let bag = gru.replace("gru 64 output=\"last\"", "sequence-pool \"mean\"");
    assert_ne!(bag, gru);
    let (g, t, b) = (
        order_accuracy(&gru),
        order_accuracy(&transformer),
        order_accuracy(&bag),
    );
    println!("test accuracy: gru {g:.3}, transformer {t:.3}, bag of tokens {b:.3} (chance 0.167)");
    assert!(g >= 0.9, "gru: {g}");
    assert!(t >= 0.9, "transformer: {t}");
    assert!(
        b < 0.3,
        "a bag of tokens should stay near chance (1/6), got {b}"
    );
}

/// `pipeline check` on `manifest` in a directory holding a 4-feature CSV (`data/tiny.csv`).
fn check_tiny(manifest: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/data/tiny.csv"),
        dir.path().join("data/tiny.csv"),
    )
    .unwrap();
    std::fs::write(dir.path().join("m.kdl"), manifest).unwrap();
    let out = pipeline(dir.path(), &["check", "m.kdl"]);
    (out.status.code(), text(&out.stderr))
}

const TAIL: &str =
    "loss \"cross-entropy\"\noptimizer \"adam\"\ntrain\ndata { source \"data/tiny.csv\"; }\n";

#[test]
fn models_that_would_explode_are_refused_by_check_in_bounded_time() {
    // Blocks using blocks ten times, nine deep: 10^9 layers if expanded.
    let mut text = String::from("block \"b0\" { identity; }\n");
    for level in 1..=9 {
        let uses = vec![format!("b{}", level - 1); 10].join("; ");
        text += &format!("block \"b{level}\" {{ {uses}; }}\n");
    }
    text += &format!("model {{ b9; linear 2; }}\n{TAIL}");
    let (code, stderr) = check_tiny(&text);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("pipeline::model::too_many_layers"),
        "{stderr}"
    );

    // A chain of blocks deeper than braces may nest.
    let mut text = String::from("block \"c0\" { identity; }\n");
    for level in 1..=40 {
        text += &format!("block \"c{level}\" {{ c{}; }}\n", level - 1);
    }
    text += &format!("model {{ c40; linear 2; }}\n{TAIL}");
    let (code, stderr) = check_tiny(&text);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("pipeline::block::too_deep"), "{stderr}");

    // A width that doubles 64 times overflows no integer: it is refused past 2^40 values.
    let text = format!(
        "model {{ repeat 64 {{ parallel {{ branch {{ identity; }}; branch {{ identity; }}; }}; }}; linear 2; }}\n{TAIL}"
    );
    let (code, stderr) = check_tiny(&text);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("more than 2^40 values"), "{stderr}");
}

#[test]
fn a_truncated_gzip_is_named_by_check_as_by_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let whole = std::fs::read(root().join("examples/data/digits.csv.gz")).unwrap();
    // Cut inside the first line's compressed bytes: no whole line can be read.
    std::fs::write(dir.path().join("data/cut.csv.gz"), &whole[..40]).unwrap();
    std::fs::write(
        dir.path().join("m.kdl"),
        "data { source \"data/cut.csv.gz\"; }\nmodel { linear 10; }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\n",
    )
    .unwrap();
    // Check reads the first rows as the run does: it ends (a cut gzip once hung it) and
    // names the damage, with the line, as the run would.
    let check = pipeline(dir.path(), &["check", "m.kdl"]);
    let run = pipeline(dir.path(), &["run", "m.kdl"]);
    for out in [&check, &run] {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("data/cut.csv.gz:1: cannot read: the gzip data is damaged"),
            "{stderr}"
        );
    }
}
