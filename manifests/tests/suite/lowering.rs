//! Span-exact tests of every diagnostic lowering reports, and of what lowering builds.

use manifests::*;
use std::path::Path;

const BASE: &str = r#"
data { source "d.csv" }
model { linear 10 }
loss "cross-entropy"
optimizer "adam"
train
"#;

/// (code, message, the text under the primary label) of every diagnostic.
fn diags_with(src: &str, overrides: &[&str]) -> Vec<(&'static str, String, String)> {
    let overrides: Vec<Override> = overrides
        .iter()
        .map(|o| Override::parse(o).unwrap())
        .collect();
    let lowered = lower(src, "test", Path::new(""), &overrides);
    lowered
        .diagnostics
        .into_iter()
        .map(|d| {
            let text = d.labels.first().map_or(String::new(), |l| {
                src[l.span.offset()..l.span.offset() + l.span.len()].to_string()
            });
            (d.code, d.message, text)
        })
        .collect()
}

fn diags(src: &str) -> Vec<(&'static str, String, String)> {
    diags_with(src, &[])
}

fn one(src: &str) -> (&'static str, String, String) {
    let all = diags(src);
    assert_eq!(all.len(), 1, "expected one diagnostic, got {all:#?}");
    all.into_iter().next().unwrap()
}

fn manifest(src: &str, overrides: &[&str]) -> Manifest {
    let overrides: Vec<Override> = overrides
        .iter()
        .map(|o| Override::parse(o).unwrap())
        .collect();
    let lowered = lower(src, "test", Path::new("/m"), &overrides);
    assert!(lowered.diagnostics.is_empty(), "{:#?}", lowered.diagnostics);
    lowered.manifest.unwrap()
}

#[test]
fn the_base_manifest_is_clean_and_defaults_are_applied() {
    let m = manifest(BASE, &[]);
    assert_eq!(m.name, "test");
    assert_eq!(m.seed, 0);
    assert_eq!(m.data.format.as_str(), "csv");
    assert_eq!(m.data.label, [Column::Last]);
    assert_eq!(m.data.features, []);
    assert_eq!(m.data.missing, Missing::Error);
    assert_eq!(m.data.dialect.delimiter, Delimiter::Auto);
    assert_eq!(
        m.data.split,
        SplitSpec {
            train: 0.8,
            val: 0.0,
            test: 0.2,
            seed: 0,
            shuffle: true,
            stratify: false,
            folds: None,
        }
    );
    assert_eq!(m.optimizer.lr, 1e-3);
    assert_eq!(m.stages.len(), 1);
    assert_eq!(m.stages[0].name.value, "train");
    assert_eq!(
        m.stages[0].config,
        StageConfig::Train(TrainSpec {
            epochs: 10,
            batch_size: 32,
            shuffle: true,
            drop_last: false,
            snapshot_every_epochs: 1,
            snapshot_every_steps: 0,
            init: None,
            strict: true,
            freeze: Vec::new(),
            early_stop: None,
            keep_best: None,
            validate: ValidateSpec::default(),
            max_steps: None,
            max_time: None,
            callbacks: Vec::new(),
            fold: None,
        })
    );
    assert_eq!(m.resolve(&m.data.source.value), Path::new("/m/d.csv"));
}

#[test]
fn properties_and_child_nodes_mean_the_same_and_defaults_written_out_change_nothing() {
    let a = manifest(BASE, &[]);
    let b = manifest(
        &BASE
            .replace(
                r#"optimizer "adam""#,
                "optimizer {\n kind \"adam\"\n lr 0.001\n}",
            )
            .replace("train\n", "train \"train\" epochs=10 batch-size=32\n"),
        &[],
    );
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

#[test]
fn syntax_errors_point_at_the_text() {
    let all = diags("data {\n");
    assert_eq!(
        all[0],
        (
            "pipeline::manifest::syntax",
            "syntax error: No closing '}' for child block".into(),
            "{".into()
        )
    );
}

#[test]
fn unknown_nodes_and_keys_suggest_the_closest_name() {
    let src = format!("{BASE}optimiser \"sgd\"\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::unknown_node",
            "unknown node `optimiser`".into(),
            "optimiser".into()
        )
    );
    let src = BASE.replace("train\n", "train {\n    epocs 3\n}\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::unknown_key",
            "unknown key `epocs` in `train`".into(),
            "epocs".into()
        )
    );
    let lowered = lower(&src, "t", Path::new(""), &[]);
    assert_eq!(
        lowered.diagnostics[0].help.as_deref(),
        Some("did you mean `epochs`?")
    );
    let src = BASE.replace("model { linear 10 }", "model { lineer 10 }");
    let (code, message, text) = one(&src);
    assert_eq!(
        (code, message.as_str(), text.as_str()),
        (
            "pipeline::model::unknown_layer",
            "unknown layer `lineer`",
            "lineer"
        )
    );
}

#[test]
fn out_of_range_values_are_errors_on_the_value() {
    let src = BASE.replace(r#"optimizer "adam""#, r#"optimizer "adam" lr=-0.1"#);
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::out_of_range",
            "`optimizer.lr` is out of range: -0.1".into(),
            "lr=-0.1".into()
        )
    );
    let src = BASE.replace(
        "model { linear 10 }",
        "model {\n    dropout 1.5\n    linear 10\n}",
    );
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::out_of_range",
            "`model.dropout.p` is out of range: 1.5".into(),
            "1.5".into()
        )
    );
    let src = BASE.replace("train\n", "train batch-size=0\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::out_of_range",
            "`train.batch-size` is out of range: 0".into(),
            "batch-size=0".into()
        )
    );
}

#[test]
fn wrong_types_name_what_was_expected() {
    let src = BASE.replace("train\n", "train epochs=\"ten\"\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::wrong_type",
            "`train.epochs` must be an integer from 1 to 1000000, found \"ten\"".into(),
            "epochs=\"ten\"".into()
        )
    );
    let src = BASE.replace("train\n", "train epochs=2.5\n");
    assert_eq!(one(&src).0, "pipeline::manifest::wrong_type");
    let src = BASE.replace("train\n", "train shuffle=1\n");
    assert_eq!(
        one(&src).1,
        "`train.shuffle` must be #true or #false, found 1"
    );
}

#[test]
fn unknown_choices_suggest_the_closest_value() {
    let src = BASE.replace(r#"optimizer "adam""#, r#"optimizer "adamm""#);
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::unknown_value",
            "`adamm` is not a valid `optimizer.kind`".into(),
            "\"adamm\"".into()
        )
    );
    let src = format!("{BASE}accelerator {{\n    device \"gpu\"\n}}\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::unknown_value",
            "`gpu` is not a device".into(),
            "\"gpu\"".into()
        )
    );
}

#[test]
fn duplicates_and_missing_pieces() {
    let src = BASE.replace(r#"optimizer "adam""#, "optimizer \"adam\" lr=0.1 lr=0.2");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::duplicate_key",
            "`optimizer.lr` is given twice".into(),
            "lr=0.2".into()
        )
    );
    let src = format!("{BASE}loss \"mse\"\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::duplicate_section",
            "`loss` is given twice".into(),
            "loss".into()
        )
    );
    let src = BASE.replace(r#"data { source "d.csv" }"#, "data { scale \"standard\" }");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::missing_key",
            "`data` needs `source`".into(),
            "data".into()
        )
    );
    let src = BASE.replace("loss \"cross-entropy\"\n", "");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::missing_section",
            "the manifest has no `loss`".into(),
            String::new()
        )
    );
    let src = BASE.replace("model { linear 10 }", "model");
    assert_eq!(
        one(&src),
        (
            "pipeline::model::empty",
            "the model has no layers".into(),
            "model".into()
        )
    );
    let src = BASE.replace("model { linear 10 }", "model { linear 10 20 }");
    assert_eq!(
        one(&src),
        (
            "pipeline::manifest::too_many_arguments",
            "too many arguments for `model.linear`".into(),
            "20".into()
        )
    );
}

#[test]
fn cross_field_rules_label_every_entry_involved() {
    let src = BASE.replace(
        r#"data { source "d.csv" }"#,
        "data {\n    source \"d.csv\"\n    split train=0.8 test=0.3\n}",
    );
    assert_eq!(
        one(&src),
        (
            "pipeline::data::bad_split",
            "the split fractions add up to 1.1, not 1".into(),
            "split train=0.8 test=0.3".into()
        )
    );
    let src = BASE.replace(r#"optimizer "adam""#, r#"optimizer "sgd" nesterov=#true"#);
    let lowered = lower(&src, "t", Path::new(""), &[]);
    let d = &lowered.diagnostics[0];
    assert_eq!(d.code, "pipeline::optimizer::nesterov_without_momentum");
    assert_eq!(
        d.labels.len(),
        1,
        "momentum was not written, so only nesterov is labelled"
    );
    let src = BASE.replace(
        r#"data { source "d.csv" }"#,
        r#"data { source "d.feather" }"#,
    );
    assert_eq!(
        one(&src),
        (
            "pipeline::data::unknown_format",
            "cannot tell the format of `d.feather` from its name".into(),
            "source \"d.feather\"".into()
        )
    );
}

#[test]
fn keys_for_another_kind_are_warnings() {
    let src = BASE.replace(r#"optimizer "adam""#, r#"optimizer "adam" momentum=0.9"#);
    let lowered = lower(&src, "t", Path::new(""), &[]);
    let d = &lowered.diagnostics[0];
    assert_eq!(
        (d.code, d.severity),
        ("pipeline::manifest::ignored_key", Severity::Warning)
    );
    assert_eq!(d.message, "`optimizer.momentum` has no effect with `adam`");
    assert!(!has_errors(&lowered.diagnostics));
}

#[test]
fn every_problem_is_reported_not_only_the_first() {
    let src = "data { source \"d.csv\"; scale \"x\" }\nmodel { relu 1 }\nloss \"l0\"\noptimizer \"adam\" lr=0\ntrain epochs=0\n";
    let codes: Vec<_> = diags(src).into_iter().map(|d| d.0).collect();
    assert_eq!(
        codes,
        [
            "pipeline::manifest::unknown_value",
            "pipeline::manifest::unknown_value",
            "pipeline::manifest::out_of_range",
            "pipeline::manifest::too_many_arguments",
            "pipeline::manifest::out_of_range",
        ]
    );
}

#[test]
fn overrides_replace_values_and_are_checked_like_the_file() {
    let m = manifest(
        BASE,
        &[
            "optimizer.lr=3e-4",
            "train.epochs=2",
            "seed=7",
            "data.split.val=0.1",
            "data.split.test=0.1",
            "optimizer=sgd",
        ],
    );
    assert_eq!(m.optimizer.lr, 3e-4);
    assert_eq!(m.optimizer.kind.as_str(), "sgd");
    assert_eq!(m.seed, 7);
    assert_eq!(m.data.split.val, 0.1);
    assert_eq!(m.data.split.seed, 7);
    let StageConfig::Train(t) = &m.stages[0].config else {
        panic!()
    };
    assert_eq!(t.epochs, 2);

    let src = BASE.replace(r#"optimizer "adam""#, r#"optimizer "adam" lr=0.1"#);
    assert_eq!(
        diags_with(&src, &["optimizer.lr=-1"]),
        [(
            "pipeline::manifest::out_of_range",
            "`optimizer.lr` is out of range: -1 (from --set optimizer.lr=-1)".into(),
            // No label: the value is not in the file, and `lr=0.1` is not what is wrong.
            String::new()
        )]
    );
    assert_eq!(
        diags_with(BASE, &["optimizer.lrr=1"])[0].1,
        "--set optimizer.lrr=1: `optimizer` has no key `lrr`"
    );
    assert_eq!(
        diags_with(BASE, &["trian.epochs=1"])[0].1,
        "--set trian.epochs=1: there is no section or stage `trian`"
    );
    assert_eq!(
        diags_with(BASE, &["model.linear=1"])[0].0,
        "pipeline::manifest::unknown_override"
    );
}

#[test]
fn fine_tuning_keys_lower_with_their_spans_and_bad_patterns_are_located() {
    let src = BASE.replace(
        "train\n",
        "train init=\"w.safetensors\" strict=#false {\n    freeze \"0.*\" \"*.bias\"\n}\n",
    );
    let m = manifest(&src, &[]);
    let StageConfig::Train(t) = &m.stages[0].config else {
        panic!("a train stage")
    };
    assert!(!t.strict);
    let patterns: Vec<(&str, &str)> = t
        .freeze
        .iter()
        .map(|p| {
            let s = p.span.unwrap();
            (p.value.as_str(), &src[s.offset()..s.offset() + s.len()])
        })
        .collect();
    assert_eq!(patterns, [("0.*", "\"0.*\""), ("*.bias", "\"*.bias\"")]);
    // From the command line, as a comma-separated list.
    let m = manifest(BASE, &["train.freeze=0.*,1.*"]);
    let StageConfig::Train(t) = &m.stages[0].config else {
        panic!("a train stage")
    };
    let set: Vec<&str> = t.freeze.iter().map(|p| p.value.as_str()).collect();
    assert_eq!(set, ["0.*", "1.*"]);
    assert!(t.strict, "the default");

    assert_eq!(
        one(&BASE.replace("train\n", "train freeze=\"0.[*\"\n")),
        (
            "pipeline::train::bad_pattern",
            "`0.[*` is not a glob pattern: invalid range pattern".into(),
            "freeze=\"0.[*\"".into()
        )
    );
    // `strict` without `init` does nothing: a warning, and the key of the default.
    let src = BASE.replace("train\n", "train strict=#false\n");
    let lowered = lower(&src, "t", Path::new(""), &[]);
    let d = &lowered.diagnostics[0];
    assert_eq!(
        (d.code, d.severity, d.message.as_str()),
        (
            "pipeline::train::strict_without_init",
            Severity::Warning,
            "`train.strict` has no effect without `init`"
        )
    );
    let StageConfig::Train(t) = &lowered.manifest.unwrap().stages[0].config else {
        panic!("a train stage")
    };
    assert!(t.strict);
}

#[test]
fn a_callback_no_program_registered_is_refused_at_its_name() {
    let src = BASE.replace("train\n", "train { callbacks \"epochs-csv\"; }\n");
    assert_eq!(
        one(&src),
        (
            "pipeline::train::unknown_callback",
            "no callback is registered as `epochs-csv`".into(),
            "\"epochs-csv\"".into()
        )
    );
    let d = &lower(&src, "t", Path::new(""), &[]).diagnostics[0];
    assert!(d
        .help
        .as_deref()
        .unwrap()
        .starts_with("this program registers no callback"));
}

#[test]
fn a_group_sets_only_what_its_optimizer_takes_and_patterns_are_globs() {
    // Reported in the file's order.
    let src = BASE.replace(
        "optimizer \"adam\"",
        "optimizer \"sgd\" momentum=0.9 {\n    group \"*.bias\" beta1=0.5\n    group \"[\" lr=0\n}",
    );
    assert_eq!(
        diags(&src),
        [
            (
                "pipeline::optimizer::group_key_not_for_kind",
                "`sgd` has no `beta1` for a group to set".into(),
                "beta1=0.5".into()
            ),
            (
                "pipeline::train::bad_pattern",
                "`[` is not a glob pattern: invalid range pattern".into(),
                "\"[\"".into()
            ),
        ]
    );
    let ok = BASE.replace(
        "optimizer \"adam\"",
        "optimizer \"adamw\" weight-decay=0.1 {\n    group \"*.bias\" \"*norm*\" weight-decay=0\n    group \"0.*\" lr=0\n}",
    );
    let m = manifest(&ok, &[]);
    let groups = &m.optimizer.groups;
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].params.len(), 2);
    assert_eq!(groups[0].weight_decay, Some(0.0));
    assert_eq!((groups[1].lr, groups[1].weight_decay), (Some(0.0), None));
    assert_eq!(m.optimizer.in_group(&groups[1]).weight_decay, 0.1);
}

/// Each mistake in a `block` definition or use, and in a key's value, is reported at the
/// text: (what is added to or replaced in the base manifest, the code, the message, the
/// text under the label).
#[test]
fn every_mistake_in_blocks_and_values_is_located() {
    let with_block = |block: &str, model: &str| {
        format!("{block}\n{}", BASE.replace("model { linear 10 }", model))
    };
    let cases: Vec<(String, &str, &str, &str)> = vec![
        (
            with_block("block {\n    linear 4\n}", "model { linear 10 }"),
            "pipeline::block::no_name",
            "a `block` needs a name",
            "block",
        ),
        (
            with_block("block 3 {\n    linear 4\n}", "model { linear 10 }"),
            "pipeline::block::no_name",
            "a block's name is a string",
            "3",
        ),
        (
            with_block("block \"a b\" {\n    linear 4\n}", "model { linear 10 }"),
            "pipeline::block::bad_name",
            "`a b` is not a valid block name",
            "\"a b\"",
        ),
        (
            with_block("block \"b\" 3 {\n    linear 4\n}", "model { b }"),
            "pipeline::block::bad_parameter",
            "block `b`: a parameter is a name (a string), or `name=default`",
            "3",
        ),
        (
            with_block("block \"b\" {\n}", "model { b }"),
            "pipeline::block::empty",
            "the block `b` has no layers",
            "block \"b\" {\n}",
        ),
        (
            with_block("block \"b\" \"n\" {\n    linear n\n}", "model { b 4 5 }"),
            "pipeline::block::too_many_arguments",
            "too many arguments for the block `b`",
            "5",
        ),
        (
            with_block("block \"b\" \"n\" {\n    linear n\n}", "model { b 4 n=5 }"),
            "pipeline::block::duplicate_parameter",
            "`n` is given twice to the block `b`",
            "n=5",
        ),
        (
            BASE.replace(
                "loss \"cross-entropy\"",
                "loss \"cross-entropy\" {\n    class-weights \"balanced\" 1.0\n}",
            ),
            "pipeline::manifest::bad_value",
            "`loss.class-weights` is \"balanced\" or numbers, not both",
            "class-weights \"balanced\" 1.0",
        ),
        (
            BASE.replace("train\n", "train {\n    epochs 3 4\n}\n"),
            "pipeline::manifest::too_many_values",
            "`train.epochs` takes one value",
            "4",
        ),
        (
            BASE.replace("train\n", "train {\n    epochs\n}\n"),
            "pipeline::manifest::missing_value",
            "`train.epochs` has no value",
            "epochs",
        ),
        (
            BASE.replace("train\n", "train {\n    epochs 3 {\n        x\n    }\n}\n"),
            "pipeline::manifest::unexpected_block",
            "`train.epochs` is a value, not a block",
            "epochs 3 {\n        x\n    }",
        ),
        (
            BASE.replace("train\n", "train {\n    epochs x=3\n}\n"),
            "pipeline::manifest::unexpected_property",
            "`train.epochs` takes a value, not properties",
            "x=3",
        ),
    ];
    for (src, code, message, text) in cases {
        let all = diags(&src);
        assert!(
            all.iter()
                .any(|d| d == &(code, message.to_string(), text.to_string())),
            "{src}\n{all:#?}"
        );
    }
}

/// Each mistake in a `sweep` block's swept keys is reported at the text, and `--set
/// sweep.…` without a block says there is none.
#[test]
fn every_mistake_in_a_sweep_block_is_located() {
    let swept = |grid: &str| format!("{BASE}sweep {{\n    grid {{\n        {grid}\n    }}\n}}\n");
    let cases = [
        (
            swept("optimizer.lr { x }"),
            "pipeline::sweep::unexpected_block",
            "`sweep.grid.optimizer.lr` takes values, not a block",
            "optimizer.lr { x }",
        ),
        (
            swept("optimizer.lr 0.1 x=0.2"),
            "pipeline::sweep::unexpected_property",
            "`sweep.grid.optimizer.lr` takes values, not properties",
            "x=0.2",
        ),
        (
            swept("optimizer.lr 0.1 #null"),
            "pipeline::sweep::bad_value",
            "`sweep.grid.optimizer.lr`: #null is not a value to sweep",
            "#null",
        ),
        (
            swept("optimizer.lr 0.1 0.2 0.1"),
            "pipeline::sweep::duplicate_value",
            "`sweep.grid.optimizer.lr`: `0.1` is there twice",
            "0.1",
        ),
        (
            swept("optimizer.lr"),
            "pipeline::sweep::bad_values",
            "`sweep.grid.optimizer.lr` has no values",
            "optimizer.lr",
        ),
    ];
    for (src, code, message, text) in cases {
        let all = diags(&src);
        assert!(
            all.iter()
                .any(|d| d.0 == code && d.1 == message && d.2.trim() == text),
            "{src}\n{all:#?}"
        );
    }
    assert_eq!(
        diags_with(BASE, &["sweep.jobs=2"])[0].0,
        "pipeline::sweep::no_block"
    );
}

/// Mistakes in image transforms, text data, metric names and models, located.
#[test]
fn mistakes_in_transforms_texts_metrics_and_models_are_located() {
    let cases = [
        (
            BASE.replace(
                "data { source \"d.csv\" }",
                "data {\n    source \"images/\"\n    format \"image-folder\"\n    images {\n        normalize mean=0.5\n        normalize std=0.2\n    }\n}",
            ),
            "pipeline::data::normalize_twice",
            "`normalize` is written twice",
        ),
        (
            BASE.replace(
                "data { source \"d.csv\" }",
                "data {\n    source \"t.csv\"\n    text \"a\" \"b\" tokenizer=\"tok.json\" max-length=8\n}",
            ),
            "pipeline::data::text_columns",
            "`data.text` reads one column of texts",
        ),
        (
            format!("{BASE}metric \"a b\" torchscript=\"m.pt\" mode=\"min\"\n"),
            "pipeline::metric::bad_name",
            "`a b` is not a valid metric name",
        ),
        (
            BASE.replace(
                "model { linear 10 }",
                "model {\n    residual {\n        torchscript \"m.pt\"\n    }\n}",
            ),
            "pipeline::model::torchscript_nested",
            "a `torchscript` module is a whole model, not a part of one",
        ),
    ];
    for (src, code, message) in cases {
        let all = diags(&src);
        assert!(
            all.iter().any(|d| d.0 == code && d.1 == message),
            "{src}\n{all:#?}"
        );
    }
}
