//! `pipeline report`: on two runs of the digits example, one self-contained page (no
//! script, nothing fetched) with the runs, what changed between them, their curves, the
//! stages, the confusion matrix and the cache's state; rendered by a real browser
//! (headless Chromium, Debian's package, which scripts/test.sh installs) into a
//! screenshot that shows both curves. Bad input is refused with the thing named.

use crate::common;

use crate::common::{pipeline, run_digits, text};
use std::path::Path;
use std::process::Command;

/// Headless Chromium's screenshot of `page`, 1000 × 2400.
fn screenshot(page: &Path, png: &Path) {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .unwrap_or_else(|| {
            panic!(
                "Chromium is not installed, so the report cannot be rendered in a browser: \
                 scripts/test.sh installs Debian's `chromium` package with apt-get, and could not here"
            )
        });
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,2400",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(png.is_file(), "no screenshot: {}", text(&out.stderr));
}

/// How many pixels of `image` are within a small distance of `rgb`.
fn pixels_like(image: &image::RgbImage, rgb: [u8; 3]) -> usize {
    image
        .pixels()
        .filter(|p| (0..3).all(|i| p.0[i].abs_diff(rgb[i]) <= 12))
        .count()
}

#[test]
fn a_report_on_two_runs_shows_their_curves_in_a_browser() {
    let dir = common::digits_project();
    let d = dir.path();
    let manifest = std::fs::read_to_string(d.join("digits.kdl"))
        .unwrap()
        .replace(
            "    split \"test\"\n",
            "    split \"test\"\n    metrics \"accuracy\" \"confusion-matrix\"\n",
        );
    std::fs::write(d.join("digits.kdl"), manifest).unwrap();
    let a = run_digits(d, 4, &[]);
    let b = run_digits(d, 4, &["optimizer.lr=0.01"]);
    let out = pipeline(d, &["report", "digits.kdl", "--out", "report.html"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), format!("wrote report.html ({a}, {b})\n"));
    let html = std::fs::read_to_string(d.join("report.html")).unwrap();
    // Self-contained: no script, nothing fetched (the SVG's namespace is a name, not a
    // request).
    assert!(!html.contains("<script"), "{html}");
    let without_namespace = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for fetch in ["http:", "https:", "src=", "<link", "@import", "url("] {
        assert!(!without_namespace.contains(fetch), "{fetch} in the page");
    }
    for part in [
        "<h2>Runs</h2>",
        &format!("<h3>{a} → {b}</h3>"),
        "<h2>Curves</h2>",
        "<svg",
        &format!("<h2>Stages of run {b}</h2>"),
        &format!("<h2>Confusion matrix (run {b})</h2>"),
        "<h2>Cache</h2>",
        // The manifest as written (30 epochs, lr 0.003) was run by neither.
        "0 of 3 stages fresh in ./.pipeline/cache",
        "optimizer.lr changed 0.01 → 0.003; train.epochs changed 4 → 30",
    ] {
        assert!(html.contains(part), "no {part} in the page");
    }
    // What changed between the runs, in the words `pipeline runs diff` uses.
    let changed = html.split("<h3>").nth(1).unwrap();
    assert!(
        changed.contains("<li><b>train</b>: optimizer.lr changed 0.003 → 0.01</li>"),
        "{changed}"
    );
    // A browser shows the page with both curves: matplotlib's blue and orange.
    let png = d.join("report.png");
    screenshot(&d.join("report.html"), &png);
    let image = image::open(&png).unwrap().to_rgb8();
    let blue = pixels_like(&image, [0x1f, 0x77, 0xb4]);
    let orange = pixels_like(&image, [0xff, 0x7f, 0x0e]);
    assert!(blue > 200 && orange > 200, "blue {blue}, orange {orange}");
    let ink = image.pixels().filter(|p| p.0 != [255, 255, 255]).count();
    assert!(
        ink > image.pixels().count() / 50,
        "the page is nearly blank: {ink} pixels drawn"
    );
}

#[test]
fn report_bad_input_is_named_and_nothing_is_written() {
    let dir = common::digits_project();
    let d = dir.path();
    let refused = |args: &[&str]| common::refused(d, args, 1);
    assert_eq!(
        refused(&["report", "digits.kdl"]),
        "error: no recorded runs of digits.kdl yet\n  help: `pipeline run digits.kdl` records one; `pipeline runs digits.kdl` lists those there are\n"
    );
    assert_eq!(
        refused(&["report", "digits.kdl", "--out", "r.txt"]),
        "error: --out r.txt: a report is an .html file\n"
    );
    assert_eq!(
        refused(&["report", "digits.kdl", "--out", "site/r.html"]),
        "error: cannot write site/r.html: the directory site does not exist\n  help: create it first, or choose another --out\n"
    );
    assert!(!d.join("report.html").exists());
}
