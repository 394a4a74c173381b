//! End-to-end tests of text data with the real binary: the text example (synthetic
//! reviews and a BPE tokenizer, both written by scripts/setup.sh) trained through its
//! tokenizer; the token ids against the Hugging Face `tokenizers` Python package's own
//! (the same release, in the project's torch venv); the tokenizer in the cache key; and
//! every way a tokenizer or a text can be wrong, named before training.

use crate::common::{assert_fixture, checkpoint_metadata, pipeline, py, root, text};
use manifests::{Column, PaddingSide, Spanned, TextSpec};
use pipeline_core::text::TextTokenizer;
use serde_json::Value;
use std::path::Path;

/// A directory with the reviews, their tokenizer and the text example.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    for file in ["reviews.csv", "reviews-tokenizer.json"] {
        let from = root().join("examples/data").join(file);
        std::fs::copy(&from, dir.path().join("data").join(file))
            .unwrap_or_else(|_| panic!("{}: run scripts/setup.sh", from.display()));
    }
    std::fs::copy(
        root().join("examples/text-classification.kdl"),
        dir.path().join("text.kdl"),
    )
    .unwrap();
    dir
}

#[test]
fn the_text_example_trains_through_its_tokenizer() {
    let dir = project();
    let out = pipeline(dir.path(), &["run", "text.kdl", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let accuracy = report["stages"][1]["metrics"]["accuracy"].as_f64().unwrap();
    assert!(accuracy >= 0.95, "{report}");
    let metadata = checkpoint_metadata(dir.path(), &report, 2);
    assert_eq!(
        metadata["classes"],
        serde_json::json!(["negative", "neutral", "positive"])
    );
    assert_eq!(metadata["input_shape"], serde_json::json!([48]));
    assert_eq!(metadata["inputs"], serde_json::json!(["tokens", "mask"]));

    // Another tokenizer file (the same vocabulary, its padding set in the file): the
    // training is stale, and `status` says why.
    let tokenizer = dir.path().join("data/reviews-tokenizer.json");
    let mut json: Value = serde_json::from_slice(&std::fs::read(&tokenizer).unwrap()).unwrap();
    json["padding"] = serde_json::json!({"strategy": "BatchLongest", "direction": "Right",
        "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"});
    std::fs::write(&tokenizer, serde_json::to_vec(&json).unwrap()).unwrap();
    let status = text(&pipeline(dir.path(), &["status", "text.kdl"]).stdout);
    assert!(
        status.contains("tokenizer file reviews-tokenizer.json changed"),
        "{status}"
    );
}

/// `data.text` for `max_length` ids padded on `side`.
fn spec(max_length: u64, side: PaddingSide, special: bool) -> TextSpec {
    TextSpec {
        column: Column::First,
        tokenizer: Spanned {
            value: "t.json".into(),
            span: None,
        },
        max_length,
        padding_side: side,
        add_special_tokens: special,
        span: None,
    }
}

#[test]
fn token_ids_are_the_tokenizers_packages_own() {
    let dir = project();
    let tokenizer = dir.path().join("data/reviews-tokenizer.json");
    let csv = std::fs::read_to_string(dir.path().join("data/reviews.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let mut texts: Vec<String> = reader
        .records()
        .take(300)
        .map(|r| r.unwrap()[0].to_string())
        .collect();
    // Beyond the reviews: accents, an unknown character, an empty text, a long one.
    texts.extend([
        "Café — naïve ✓".to_string(),
        String::new(),
        "and the music ".repeat(40),
    ]);
    std::fs::write(
        dir.path().join("texts.json"),
        serde_json::to_vec(&texts).unwrap(),
    )
    .unwrap();
    for (length, side, special) in [
        (48, PaddingSide::Left, true),
        (16, PaddingSide::Right, true),
        (24, PaddingSide::Right, false),
    ] {
        let (ours, our_mask) = TextTokenizer::open(&tokenizer, &spec(length, side, special))
            .unwrap()
            .encode(texts.iter().map(String::as_str).collect())
            .unwrap();
        let theirs = py(
            dir.path(),
            &format!(
                "import json\nfrom tokenizers import Tokenizer\n\
                 t = Tokenizer.from_file('data/reviews-tokenizer.json')\n\
                 t.enable_truncation(max_length={length})\n\
                 t.enable_padding(length={length}, pad_id=0, pad_token='[PAD]', direction={:?})\n\
                 texts = json.load(open('texts.json'))\n\
                 es = t.encode_batch(texts, add_special_tokens={})\n\
                 print(json.dumps([[i for e in es for i in e.ids], [m for e in es for m in e.attention_mask]]))\n",
                match side {
                    PaddingSide::Left => "left",
                    PaddingSide::Right => "right",
                },
                if special { "True" } else { "False" },
            ),
        );
        let (theirs, their_mask): (Vec<u32>, Vec<u32>) = serde_json::from_str(&theirs).unwrap();
        assert_eq!(ours.len(), texts.len() * length as usize);
        assert!(
            ours == theirs,
            "{length} {side:?} {special}: the ids differ"
        );
        assert!(
            our_mask == their_mask,
            "{length} {side:?} {special}: the attention masks differ"
        );
    }
}

/// `pipeline ARGS` in `dir`, which must fail with exit code 1: its stderr.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = pipeline(dir, args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stderr)
}

#[test]
fn bad_tokenizers_and_texts_are_named_before_training() {
    // Not a tokenizer: a JSON of something else.
    let dir = project();
    std::fs::write(
        dir.path().join("data/reviews-tokenizer.json"),
        "{\"vocab\": 3}",
    )
    .unwrap();
    assert_fixture(
        "text-not-a-tokenizer.run.stderr",
        &fails(dir.path(), &["run", "text.kdl"]),
    );
    // Missing.
    std::fs::remove_file(dir.path().join("data/reviews-tokenizer.json")).unwrap();
    assert_fixture(
        "text-missing-tokenizer.run.stderr",
        &fails(dir.path(), &["run", "text.kdl"]),
    );
    // No room for the text beside `[CLS]` and `[SEP]`.
    let dir = project();
    assert_fixture(
        "text-max-length.run.stderr",
        &fails(
            dir.path(),
            &["run", "text.kdl", "--set", "data.text.max-length=2"],
        ),
    );
    // Token ids beyond the embedding's.
    let manifest = std::fs::read_to_string(dir.path().join("text.kdl")).unwrap();
    let small = manifest.replace("embedding 300 64", "embedding 50 64");
    std::fs::write(dir.path().join("small.kdl"), small).unwrap();
    assert_fixture(
        "text-embedding-too-small.run.stderr",
        &fails(dir.path(), &["run", "small.kdl"]),
    );
    // A text that says `null` is a text; a row without one is missing.
    let csv = dir.path().join("data/reviews.csv");
    let mut rows = std::fs::read_to_string(&csv).unwrap();
    rows.push_str("null,neutral\n,positive\n");
    std::fs::write(&csv, rows).unwrap();
    let stderr = fails(dir.path(), &["run", "text.kdl"]);
    assert!(
        stderr.contains("data/reviews.csv:4003: the text `text` is empty"),
        "{stderr}"
    );
    let out = pipeline(
        dir.path(),
        &[
            "run",
            "text.kdl",
            "--set",
            "data.missing=drop-row",
            "--set",
            "train.epochs=1",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_tokenizer_without_its_unknown_token_is_named_at_the_run() {
    // A tokenizer whose `unk_token` is not in its vocabulary loads, and fails on the
    // first word it does not know: the run names the file and the tokenizer's reason.
    let dir = project();
    let path = dir.path().join("data/reviews-tokenizer.json");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vocab = tokenizer["model"]["vocab"].as_object_mut().unwrap();
    assert!(vocab.remove("[UNK]").is_some());
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let csv = dir.path().join("data/reviews.csv");
    let mut rows = std::fs::read_to_string(&csv).unwrap();
    rows.push_str("a snowman \u{2603} of a film,positive\n");
    std::fs::write(&csv, rows).unwrap();
    assert_fixture(
        "text-unknown-token.run.stderr",
        &fails(dir.path(), &["run", "text.kdl"]),
    );
}

#[test]
fn check_refuses_keys_that_do_not_go_with_text() {
    let dir = project();
    let manifest = std::fs::read_to_string(dir.path().join("text.kdl")).unwrap();
    let bad = manifest.replace(
        "    label \"label\"",
        "    label \"label\"\n    features \"text\"\n    scale \"standard\"",
    );
    std::fs::write(dir.path().join("bad.kdl"), bad).unwrap();
    assert_fixture(
        "text-keys.check.stderr",
        &fails(dir.path(), &["check", "bad.kdl"]),
    );
}

/// A `predict` stage reads new texts through the training's tokenizer: its
/// probabilities for the test split's reviews, written to a file of their texts alone,
/// are those the `eval` stage's forward pass gave the same reviews.
#[test]
fn new_texts_are_predicted_through_the_training_tokenizer() {
    let dir = project();
    let d = dir.path();
    let manifest = std::fs::read_to_string(d.join("text.kdl")).unwrap()
        + "eval \"rows\" {\n    needs \"train\"\n    split \"test\"\n    output \"eval.csv\"\n}\n";
    std::fs::write(d.join("text.kdl"), &manifest).unwrap();
    let quick = ["run", "text.kdl", "--set", "train.epochs=1", "--json"];
    let out = pipeline(d, &quick);
    assert!(out.status.success(), "{}", text(&out.stderr));
    py(
        d,
        "import csv\n\
         texts = [r['text'] for r in csv.DictReader(open('data/reviews.csv'))]\n\
         rows = [int(r['row']) for r in csv.DictReader(open('eval.csv'))]\n\
         with open('new.csv', 'w', newline='') as f:\n\
         \x20   w = csv.writer(f)\n\
         \x20   w.writerow(['text'])\n\
         \x20   w.writerows([texts[r]] for r in rows)\n",
    );
    let with_predict = manifest
        + "predict \"again\" {\n    needs \"train\"\n    source \"new.csv\"\n    output \"new-predictions.csv\"\n}\n";
    std::fs::write(d.join("text.kdl"), with_predict).unwrap();
    let out = pipeline(d, &quick);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["stages"][0]["status"], "cached", "{report}");
    let worst = py(
        d,
        "import csv\n\
         ev = list(csv.DictReader(open('eval.csv')))\n\
         new = list(csv.DictReader(open('new-predictions.csv')))\n\
         assert len(ev) == len(new) == 800, (len(ev), len(new))\n\
         assert [r['label'] for r in ev] == [r['label'] for r in new]\n\
         probs = [k for k in ev[0] if k.startswith('prob_')]\n\
         print(max(abs(float(a[k]) - float(b[k])) for a, b in zip(ev, new) for k in probs))\n",
    );
    let worst: f64 = worst.trim().parse().unwrap();
    assert!(worst < 1e-6, "{worst}");
}
