//! Span-exact tests of the rules `check` applies across the manifest.

use pipeline_core::plan::{GraphFormat, Plan};
use std::path::Path;

const HEAD: &str =
    "data { source \"d.csv\" }\nmodel { linear 10 }\nloss \"cross-entropy\"\noptimizer \"adam\"\n";

fn check(stages: &str) -> Vec<(&'static str, String, Vec<String>)> {
    let src = format!("{HEAD}{stages}");
    let checked = pipeline_core::load(&src, Path::new("m.kdl"), &[]);
    checked
        .diagnostics
        .into_iter()
        .map(|d| {
            let spans = d
                .labels
                .iter()
                .map(|l| src[l.span.offset()..l.span.offset() + l.span.len()].to_string())
                .collect();
            (d.code, d.message, spans)
        })
        .collect()
}

#[test]
fn a_valid_graph_has_no_diagnostics_and_runs_in_dependency_order() {
    let stages = "eval \"test\" needs=\"fit\"\ncheckpoint needs=\"fit\"\ntrain \"fit\"\n";
    assert_eq!(check(stages), []);
    let src = format!("{HEAD}{stages}");
    let m = pipeline_core::load(&src, Path::new("m.kdl"), &[])
        .manifest
        .unwrap();
    let plan = Plan::new(&m);
    let names: Vec<&str> = plan.order.iter().map(|&i| m.stages[i].name()).collect();
    assert_eq!(names, ["fit", "test", "checkpoint"]);
    assert_eq!(
        plan.upto(0)
            .iter()
            .map(|&i| m.stages[i].name())
            .collect::<Vec<_>>(),
        ["fit", "test"]
    );
    assert_eq!(
        plan.render(&m, GraphFormat::Mermaid),
        "flowchart LR\n    s2[\"fit (train)\"]\n    s0([\"test (eval)\"])\n    s1[(\"checkpoint (checkpoint)\")]\n    s2 --> s0\n    s2 --> s1\n"
    );
    assert!(plan
        .render(&m, GraphFormat::Dot)
        .contains("\"fit\" -> \"test\";"));
}

#[test]
fn dangling_references_suggest_a_stage() {
    let d = check("train\neval needs=\"trian\"\n");
    assert_eq!(
        d,
        [(
            "pipeline::stage::unknown_dependency",
            "stage `eval` needs `trian`, which does not exist".into(),
            vec!["needs=\"trian\"".into()]
        )]
    );
}

#[test]
fn cycles_name_the_whole_cycle_and_label_each_edge() {
    let d = check("train \"a\" needs=\"c\"\ntrain \"b\" needs=\"a\"\ntrain \"c\" needs=\"b\"\n");
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].0, "pipeline::stage::cycle");
    assert_eq!(
        d[0].1,
        "stages depend on each other in a cycle: a → b → c → a"
    );
    assert_eq!(d[0].2, ["needs=\"c\"", "needs=\"a\"", "needs=\"b\""]);
    let d = check("train \"a\" needs=\"a\"\n");
    assert_eq!(d[0].1, "stages depend on each other in a cycle: a → a");
}

#[test]
fn stages_that_use_a_model_need_exactly_one_train_stage() {
    let d = check("train\neval \"test\"\n");
    assert_eq!(
        d,
        [(
            "pipeline::stage::no_model",
            "eval stage `test` has no model: it needs no `train` stage".into(),
            vec!["\"test\"".into()]
        )]
    );
    let d = check("train \"a\"\ntrain \"b\"\ncheckpoint needs=\"a\" needs=\"b\"\n");
    assert_eq!(d[0].0, "pipeline::manifest::duplicate_key");
    let d = check("train \"a\"\ntrain \"b\"\ncheckpoint {\n    needs \"a\" \"b\"\n}\n");
    assert_eq!(d, [("pipeline::stage::ambiguous_model", "checkpoint stage `checkpoint` needs 2 `train` stages; it can take its model from only one".into(), vec!["\"a\"".into(), "\"b\"".into()])]);
}

#[test]
fn duplicate_names_empty_splits_and_no_stages() {
    let d = check("train\ntrain\n");
    assert_eq!(
        d,
        [(
            "pipeline::stage::duplicate_name",
            "two stages are named `train`".into(),
            vec!["train".into(), "train".into()]
        )]
    );
    let d = check("train\neval needs=\"train\" split=\"val\"\n");
    assert_eq!(
        d,
        [(
            "pipeline::stage::empty_split",
            "eval stage `eval` evaluates on the `val` split, which is empty".into(),
            vec!["split=\"val\"".into()]
        )]
    );
    let d = check("");
    assert_eq!(d[0].0, "pipeline::stage::none");
    let d = check("train \"a b\"\n");
    assert_eq!(
        d,
        [(
            "pipeline::stage::bad_name",
            "`a b` is not a valid stage name".into(),
            vec!["\"a b\"".into()]
        )]
    );
}

#[test]
fn a_train_stage_starts_from_a_file_or_a_stage_not_both() {
    let d = check("train \"a\"\ntrain \"b\" needs=\"a\" init=\"w.safetensors\"\n");
    assert_eq!(
        d,
        [(
            "pipeline::stage::two_starts",
            "train stage `b` starts from two sets of weights".into(),
            vec!["init=\"w.safetensors\"".into(), "needs=\"a\"".into()]
        )]
    );
}

/// `check` over a whole manifest: each diagnostic's code and message.
fn check_all(src: &str) -> Vec<(&'static str, String)> {
    pipeline_core::load(src, Path::new("m.kdl"), &[])
        .diagnostics
        .into_iter()
        .map(|d| (d.code, d.message))
        .collect()
}

#[test]
fn a_stage_source_is_refused_where_the_data_could_not_give_it() {
    let images = "data {\n    source \"images/\"\n    format \"image-folder\"\n}\nmodel { linear 10 }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\npredict \"p\" needs=\"train\" source=\"new.csv\"\n";
    assert!(check_all(images).contains(&(
        "pipeline::stage::source_of_images",
        "predict stage `p`: a prediction of images reads a directory of them, not new.csv".into()
    )));
    let named = images.replace("source=\"new.csv\"", "source=\"new/\" id=\"name\"");
    assert!(check_all(&named).contains(&(
        "pipeline::stage::source_of_images",
        "predict stage `p`: `id` names a column, and images have none".into()
    )));
    let eval = images.replace(
        "predict \"p\" needs=\"train\"",
        "eval \"p\" needs=\"train\"",
    );
    assert!(check_all(&eval).contains(&(
        "pipeline::stage::source_of_images",
        "eval stage `p`: an evaluation of images reads a split of the data: a `source` of images to evaluate is not read yet".into()
    )));
    assert!(check_all(&images.replace("new.csv", "new/")).is_empty());
    let inputs = "data {\n    source \"d.csv\"\n    inputs {\n        meta \"m.csv\" features=\"a\"\n    }\n}\nmodel { linear 10 }\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\npredict \"p\" needs=\"train\" source=\"new.csv\"\n";
    assert!(check_all(inputs).contains(&(
        "pipeline::stage::source_and_inputs",
        "predict stage `p`: the model also reads `meta` (`data.inputs`), and no file of it is given for these samples".into()
    )));
}

#[test]
fn validation_metrics_need_a_validation_split() {
    let d = check("train {\n    validate { metrics \"accuracy\"; }\n}\n");
    assert_eq!(d[0].0, "pipeline::train::no_validation_split");
    assert_eq!(
        d[0].1,
        "stage `train` validates with metrics, but there is no validation split"
    );
}

#[test]
fn accumulation_that_does_not_divide_an_epoch_is_warned_of_once_the_data_is_known() {
    let src = format!("{HEAD}accelerator {{ accumulate 3; }}\ntrain batch-size=10\n");
    let m = pipeline_core::load(&src, Path::new("m.kdl"), &[])
        .manifest
        .unwrap();
    let facts = pipeline_core::compat::Facts {
        train_samples: Some(100),
        ..pipeline_core::compat::Facts::at_check()
    };
    let d = pipeline_core::compat::check(&m, &facts);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].code, "pipeline::accelerator::uneven_accumulation");
    assert_eq!(
        d[0].message,
        "stage `train`: 10 batches per epoch do not divide into steps of 3; the last step of each epoch sums 1"
    );
}
