//! `pipeline plot`: two runs of the digits example drawn as an SVG with a curve per run
//! (a point per epoch) and a legend naming them, and as a PNG; the latest run by default;
//! a killed run's records up to its last whole line; bad input (a run that does not
//! exist, a run directory without records, a metric never recorded, an output directory
//! that does not exist, an unknown format) refused with the thing named, nothing written.

use crate::common;

use crate::common::{pipeline, run_digits, text};

/// The curves drawn in `svg`: each line of width 2 by its colour, with its points.
fn curves(svg: &str) -> Vec<(String, usize)> {
    svg.split("<polyline")
        .skip(1)
        .filter(|p| p.contains("stroke-width=\"2\""))
        .map(|p| {
            let attr = |name: &str| {
                let start = p.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                p[start..start + p[start..].find('"').unwrap()].to_string()
            };
            (attr("stroke"), attr("points").split_whitespace().count())
        })
        .collect()
}

#[test]
fn two_runs_are_two_curves_with_a_legend() {
    let dir = common::digits_project();
    let d = dir.path();
    let a = run_digits(d, 3, &[]);
    let b = run_digits(d, 3, &["optimizer.lr=0.01"]);
    let out = pipeline(
        d,
        &[
            "plot",
            "digits.kdl",
            &a,
            &b,
            "--metric",
            "loss",
            "--out",
            "c.svg",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!("wrote c.svg (loss of {a}, {b})\n")
    );
    let svg = std::fs::read_to_string(d.join("c.svg")).unwrap();
    // A line of 3 points (an epoch each) per run, and its sample in the legend.
    let drawn = curves(&svg);
    let lines: Vec<&(String, usize)> = drawn.iter().filter(|c| c.1 == 3).collect();
    assert_eq!(lines.len(), 2, "{drawn:?}");
    assert_ne!(lines[0].0, lines[1].0, "a colour per run");
    assert!(
        svg.contains(&format!(">\n{a}\n</text>")),
        "{a} in the legend"
    );
    assert!(
        svg.contains(&format!(">\n{b}\n</text>")),
        "{b} in the legend"
    );
    assert!(svg.contains(">\noptimizer step\n</text>"));
    // The same as a PNG (an image of the chart's size), and by default the latest run.
    let out = pipeline(d, &["plot", "digits.kdl", "--out", "c.png", "--log-y"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("loss of {b})")));
    let png = std::fs::read(d.join("c.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // Width and height in the IHDR chunk: 900 × 300, one panel.
    assert_eq!(&png[16..24], &[0, 0, 3, 132, 0, 0, 1, 44]);
}

#[test]
fn a_killed_runs_records_are_drawn_up_to_its_last_whole_line() {
    let dir = common::digits_project();
    let d = dir.path();
    let id = run_digits(d, 3, &[]);
    let run_dir = d.join(".pipeline/runs").join(&id);
    // As a run killed while writing its third line would leave it.
    let log = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let third = log.match_indices('\n').nth(1).unwrap().0 + 1;
    std::fs::write(run_dir.join("metrics.jsonl"), &log[..third + 20]).unwrap();
    std::fs::remove_file(run_dir.join("run.json")).unwrap();
    let run_path = format!(".pipeline/runs/{id}");
    let out = pipeline(d, &["plot", &run_path, "--out", "k.svg"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "warning: run {id} was stopped while writing .pipeline/runs/{id}/metrics.jsonl: its last, unfinished line is left out\n\
             warning: run {id} did not end (it has no run.json): showing what it recorded before it stopped\n\
             wrote k.svg (loss of {id})\n"
        )
    );
    let drawn = curves(&std::fs::read_to_string(d.join("k.svg")).unwrap());
    assert!(drawn.iter().any(|c| c.1 == 2), "two epochs: {drawn:?}");
}

#[test]
fn bad_input_is_named_and_nothing_is_written() {
    let dir = common::digits_project();
    let d = dir.path();
    let refused = |args: &[&str]| common::refused(d, args, 1);
    assert_eq!(
        refused(&["plot", "digits.kdl"]),
        "error: no recorded runs of digits.kdl yet\n  help: `pipeline run digits.kdl` records one; `pipeline runs digits.kdl` lists those there are\n"
    );
    let id = run_digits(d, 3, &[]);
    assert_eq!(
        refused(&["plot", "digits.kdl", "--metric", "loss,val.f1"]),
        format!("error: no run shown ({id}) recorded `val.f1`\n  help: they recorded: accuracy, loss, lr, samples_per_second, seconds, step.accuracy, step.loss, step.lr, step.samples_per_second, eval.accuracy, eval.loss\n")
    );
    assert_eq!(
        refused(&["plot", "digits.kdl", "20991231"]),
        "error: no recorded run is `20991231`\n  help: `pipeline runs digits.kdl` lists them\n"
    );
    assert_eq!(
        refused(&["plot", "runs/nothing-here"]),
        "error: run directory runs/nothing-here does not exist\n  help: `pipeline runs pipeline.kdl` lists them\n"
    );
    std::fs::create_dir(d.join("empty")).unwrap();
    assert_eq!(
        refused(&["plot", "empty"]),
        "error: run empty has no metrics.jsonl: it was killed before it recorded anything, or empty is not a run directory\n"
    );
    assert_eq!(
        refused(&["plot", "digits.kdl", "--out", "plots/c.svg"]),
        "error: cannot write plots/c.svg: the directory plots does not exist\n  help: create it first, or choose another --out\n"
    );
    assert_eq!(
        refused(&["plot", "digits.kdl", "--out", "c.pdf"]),
        "error: --out c.pdf: a plot is written as .svg or .png\n"
    );
    let written: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains('.') && !n.starts_with('.') && n != "digits.kdl")
        .collect();
    assert!(written.is_empty(), "{written:?}");
}
