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
fn a_labels_file_works_for_every_format_and_never_beside_a_label_column() {
    for source in ["x.csv", "x.csv.gz", "x.npy", "x.npz", "x.safetensors"] {
        let src = manifest(&format!(r#"source "{source}"; labels "y.csv""#));
        assert_eq!(diags(&src), [], "{source}");
        let m = lower(&src, "t", Path::new("base"), &[]).manifest.unwrap();
        assert_eq!(
            m.data.labels_file.map(|l| l.value),
            Some(std::path::PathBuf::from("y.csv"))
        );
        assert_eq!(m.data.label, [], "{source}: no label column");
    }
    let src = manifest(r#"source "x.csv"; labels "y.csv"; label "y"; header #true"#);
    assert_eq!(
        diags(&src),
        [(
            "pipeline::data::label_and_labels",
            "the labels come either from a column (`label`) or from a file (`labels`), not both"
                .to_string(),
            "label \"y\"".to_string()
        )]
    );
    // Without an extension it would be an array's name, which CSV has not.
    let src = manifest(r#"source "x.csv"; labels "y""#);
    assert_eq!(diags(&src)[0].0, "pipeline::data::bad_labels_file");
    // NPY features need their labels from somewhere.
    assert_eq!(
        diags(&manifest(r#"source "x.npy""#))[0].0,
        "pipeline::data::no_labels"
    );
    // A CSV labels file is read with the dialect keys, whatever the data's format.
    let src = manifest(r#"source "x.npy"; labels "y.csv"; header #true; delimiter ";""#);
    assert_eq!(diags(&src), []);
    // NPZ: an array name.
    let m = lower(
        &manifest(r#"source "x.npz"; features "a"; labels "b""#),
        "t",
        Path::new(""),
        &[],
    )
    .manifest
    .unwrap();
    assert_eq!(
        (m.data.features_array(), m.data.labels_array.as_str()),
        ("a", "b")
    );
}

#[test]
fn csv_columns_are_names_indices_and_ranges() {
    let src = manifest(
        r##"source "x.csv"; header #true; label "y1" 7; features "0..3" "age" 5; delimiter ";"; skip-rows 1; comment "#"; missing "median""##,
    );
    assert_eq!(diags(&src), []);
    let m = lower(&src, "t", Path::new(""), &[]).manifest.unwrap();
    assert_eq!(m.data.label, [Column::Name("y1".into()), Column::Index(7)]);
    assert_eq!(
        m.data.features,
        [
            Column::Range { start: 0, end: 3 },
            Column::Name("age".into()),
            Column::Index(5)
        ]
    );
    assert_eq!(m.data.dialect.delimiter, Delimiter::Semicolon);
    assert_eq!(
        (m.data.dialect.skip_rows, m.data.dialect.comment),
        (1, Some(b'#'))
    );
    assert_eq!(m.data.missing, Missing::Median);
    let src = manifest(r#"source "x.csv"; features "5..2""#);
    assert_eq!(diags(&src)[0].0, "pipeline::manifest::out_of_range");
    let src = manifest(r#"source "x.csv"; comment "//""#);
    assert_eq!(diags(&src)[0].0, "pipeline::data::bad_comment");
    let src = manifest(r#"source "x.npy"; labels "y.npy"; delimiter ";"; skip-rows 2"#);
    let found: Vec<String> = diags(&src).into_iter().map(|d| d.1).collect();
    assert_eq!(
        found,
        [
            "`data.delimiter` does not apply to NPY data",
            "`data.skip-rows` does not apply to NPY data"
        ]
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
