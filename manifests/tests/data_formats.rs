//! A `data` key the format does not read is an error at `check`, never ignored.

use manifests::*;
use std::path::Path;

/// (code, message, the text under the primary label) of every diagnostic.
fn diags(src: &str) -> Vec<(&'static str, String, String)> {
    lower(src, "test", Path::new(""), &[])
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

fn manifest(data: &str) -> String {
    format!("data {{ {data} }}\nmodel {{ linear 10 }}\nloss \"cross-entropy\"\noptimizer \"adam\"\ntrain\n")
}

#[test]
fn a_labels_file_with_csv_data_is_refused_not_ignored() {
    let src = manifest(r#"source "x.csv"; labels "y.csv""#);
    assert_eq!(
        diags(&src),
        [(
            "pipeline::data::key_not_for_format",
            "`data.labels` does not apply to CSV data".to_string(),
            r#"labels "y.csv""#.to_string()
        )]
    );
    let src = manifest(r#"source "x.csv.gz"; features "x""#);
    assert_eq!(
        diags(&src)[0].1,
        "`data.features` does not apply to CSV data"
    );
}

#[test]
fn csv_keys_with_array_data_are_refused() {
    let src = manifest(r#"source "x.npy"; labels "y.npy"; header #true; label 3"#);
    let found: Vec<String> = diags(&src).into_iter().map(|d| d.1).collect();
    assert_eq!(
        found,
        [
            "`data.header` does not apply to NPY data",
            "`data.label` does not apply to NPY data"
        ]
    );
    let src = manifest(r#"source "x.npz"; features "a"; labels "b"; label "first""#);
    let found: Vec<String> = diags(&src).into_iter().map(|d| d.1).collect();
    assert_eq!(found, ["`data.label` does not apply to NPZ data"]);
    assert!(diags(&manifest(r#"source "x.csv"; label "y"; header #true"#)).is_empty());
}
