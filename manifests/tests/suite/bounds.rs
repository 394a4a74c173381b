//! Span-exact tests of the bounds `check` keeps whatever the text: every integer key has a
//! maximum (no wrapping, no overflow later), nesting and size are limited before the
//! recursive KDL parser runs.

use manifests::*;
use std::path::Path;

const BASE: &str = r#"
data { source "d.csv" }
model { linear 10 }
loss "cross-entropy"
optimizer "adam"
train
"#;

/// (code, message, the text under the primary label, the primary label's text).
fn diags(src: &str, overrides: &[&str]) -> Vec<(&'static str, String, String, String)> {
    let overrides: Vec<Override> = overrides
        .iter()
        .map(|o| Override::parse(o).unwrap())
        .collect();
    lower(src, "test", Path::new(""), &overrides)
        .diagnostics
        .into_iter()
        .map(|d| {
            let (text, label) = d
                .labels
                .first()
                .map_or((String::new(), String::new()), |l| {
                    (
                        src[l.span.offset()..l.span.offset() + l.span.len()].to_string(),
                        l.text.clone(),
                    )
                });
            (d.code, d.message, text, label)
        })
        .collect()
}

fn one(src: &str, overrides: &[&str]) -> (&'static str, String, String, String) {
    let all = diags(src, overrides);
    assert_eq!(all.len(), 1, "expected one diagnostic, got {all:#?}");
    all.into_iter().next().unwrap()
}

fn out_of_range(message: &str, text: &str, label: &str) -> (&'static str, String, String, String) {
    (
        "pipeline::manifest::out_of_range",
        message.into(),
        text.into(),
        label.into(),
    )
}

#[test]
fn integers_above_i64_do_not_wrap() {
    let src = BASE.replace("linear 10", "linear 18446744073709551619");
    assert_eq!(
        one(&src, &[]),
        out_of_range(
            "`model.linear.out` is out of range: 18446744073709551619",
            "18446744073709551619",
            "must be an integer from 1 to 1048576"
        )
    );
    let src = format!("{BASE}seed 18446744073709551616\n");
    assert_eq!(
        one(&src, &[]),
        out_of_range(
            "`seed.value` is out of range: 18446744073709551616",
            "18446744073709551616",
            "must be an integer from 0 to 9223372036854775807"
        )
    );
}

#[test]
fn layer_sizes_that_would_panic_in_a_run_stop_at_check() {
    let src = BASE.replace("linear 10", "linear 100000000000");
    assert_eq!(
        one(&src, &[]).1,
        "`model.linear.out` is out of range: 100000000000"
    );
    let src = BASE.replace("linear 10", "conv2d 2000000000 kernel=3");
    assert_eq!(
        one(&src, &[]),
        out_of_range(
            "`model.conv2d.out` is out of range: 2000000000",
            "2000000000",
            "must be an integer from 1 to 65536"
        )
    );
    let src = BASE.replace("linear 10", "conv2d 8 kernel=5000");
    assert_eq!(one(&src, &[]).2, "kernel=5000");
    let src = BASE.replace("linear 10", "embedding 100000000 8");
    assert_eq!(one(&src, &[]).2, "100000000");
    let src = BASE.replace("linear 10", "reshape 1 8 2000000");
    assert_eq!(
        one(&src, &[]),
        out_of_range(
            "`model.reshape.shape` is out of range: 2000000",
            "2000000",
            "must be one or more integers from 1 to 1048576"
        )
    );
}

#[test]
fn threads_and_other_counts_are_bounded() {
    let src = format!("{BASE}accelerator {{ threads 100000 }}\n");
    assert_eq!(
        one(&src, &[]),
        out_of_range(
            "`accelerator.threads` is out of range: 100000",
            "100000",
            "must be an integer from 1 to 1024"
        )
    );
    assert_eq!(
        one(BASE, &["accelerator.threads=2000"]).1,
        "`accelerator.threads` is out of range: 2000 (from --set accelerator.threads=2000)"
    );
    for (key, value) in [
        ("train.epochs", "1000001"),
        ("train.batch-size", "16777217"),
        ("train.snapshot-every-steps", "1000000001"),
        ("accelerator.accumulate", "65537"),
        ("accelerator.buckets", "65537"),
        ("accelerator.bucket-by", "16777216"),
        ("accelerator.timeout", "604801"),
        ("schedule.warmup-epochs", "1000001"),
        ("data.split.seed", "9223372036854775808"),
        ("data.label", "16777216"),
    ] {
        let set = format!("{key}={value}");
        let all = diags(BASE, &[&set]);
        assert_eq!(all.len(), 1, "{set}: {all:#?}");
        assert_eq!(all[0].0, "pipeline::manifest::out_of_range", "{set}");
    }
    let all = diags(BASE, &["accelerator.device=cuda:99999"]);
    assert_eq!(all[0].0, "pipeline::manifest::unknown_value");
}

#[test]
fn nesting_too_deep_is_a_located_diagnostic_not_a_stack_overflow() {
    let depth = 1300;
    let src = format!("{BASE}x {}{}\n", "{ x ".repeat(depth), "}".repeat(depth));
    let (code, message, text, label) = one(&src, &[]);
    assert_eq!(code, "pipeline::manifest::too_deep");
    assert_eq!(message, "blocks are nested more than 32 deep");
    assert_eq!((text.as_str(), label.as_str()), ("{", "level 33"));
    let d = lower(&src, "test", Path::new(""), &[]).diagnostics;
    assert_eq!(
        d[0].labels[0].span.offset(),
        BASE.len() + 2 + 4 * 32,
        "on the 33rd brace"
    );
    let src = format!("{BASE}/*{}", "/*".repeat(2000));
    assert_eq!(one(&src, &[]).0, "pipeline::manifest::too_deep");
    let src = format!("{BASE}/*{}*/", "*".repeat(100_000));
    assert!(diags(&src, &[]).is_empty());
}

#[test]
fn a_manifest_over_the_size_limit_is_refused_at_once() {
    let src = format!("{BASE}{}", "// comment\n".repeat(1_000_000));
    let (code, message, _, _) = one(&src, &[]);
    assert_eq!(code, "pipeline::manifest::too_large");
    assert_eq!(
        message,
        format!(
            "the manifest is {} bytes; at most 131072 (128 KiB) are read",
            src.len()
        )
    );
}

#[test]
fn a_value_from_set_has_no_span_in_the_file_and_is_recorded() {
    let src = format!("{BASE}accelerator {{ device \"auto\"; precision \"32\"; }}\n");
    let overrides = [
        Override::parse("accelerator.device=cpu").unwrap(),
        Override::parse("accelerator.precision=16-mixed").unwrap(),
    ];
    let lowered = lower(&src, "test", Path::new(""), &overrides);
    let a = lowered.manifest.unwrap().accelerator;
    assert_eq!(a.span("device"), None);
    assert_eq!(a.span("precision"), None);
    assert_eq!(a.from_set("device"), Some("accelerator.device=cpu"));
    assert_eq!(
        a.from_set("precision"),
        Some("accelerator.precision=16-mixed")
    );
    assert_eq!(a.from_set("strategy"), None);
}
