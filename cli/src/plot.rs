//! `pipeline plot [RUN…|FILE] [--metric loss,val.accuracy] [--out curves.svg|.png]
//! [--log-y]`: the curves of one or several runs, a panel per metric, a line per run (and
//! stage, where a run has several), by optimizer step, drawn with the `plotters` crate. `pipeline report` embeds
//! the same charts.
//!
//! Text is laid out with DejaVu Sans (in `assets/`, under the Bitstream Vera licence), so
//! that a PNG needs no font installed; an SVG names `sans-serif` and the browser draws it.

use crate::cli::PlotArgs;
use crate::shown_runs::{self, Refused, Shown};
use pipeline_core::records::Metric;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The metrics drawn when none is asked for: those of these the runs have.
const DEFAULT_METRICS: &[&str] = &["loss", "val.loss", "val.accuracy"];

/// The colours of the curves, in turn: matplotlib's (Tableau's ten).
const COLORS: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Width of a chart, and height of each panel, in pixels.
const WIDTH: u32 = 900;
const PANEL: u32 = 300;

pub fn run(args: &PlotArgs) -> bool {
    match plot(args) {
        Ok(()) => true,
        Err(refused) => {
            refused.print();
            false
        }
    }
}

fn plot(args: &PlotArgs) -> Result<(), Refused> {
    let format = Output::of(&args.out)?;
    let (file, runs) = shown_runs::split(&args.targets);
    let shown = shown_runs::choose(&file, &runs, 1)?;
    let panels = panels(&shown, &args.metric)?;
    let bytes = match format {
        Output::Svg => svg(&panels, args.log_y)?.into_bytes(),
        Output::Png => png(&panels, args.log_y)?,
    };
    write_atomically(&args.out, &bytes)?;
    let names: Vec<&str> = panels.iter().map(|p| p.metric.as_str()).collect();
    let ids: Vec<&str> = shown.iter().map(|s| s.id.as_str()).collect();
    eprintln!(
        "wrote {} ({} of {})",
        args.out.display(),
        names.join(", "),
        ids.join(", ")
    );
    Ok(())
}

/// What `--out` asks for, by its extension.
#[derive(Clone, Copy)]
enum Output {
    Svg,
    Png,
}

impl Output {
    fn of(path: &Path) -> Result<Output, Refused> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let format = match ext.to_ascii_lowercase().as_str() {
            "svg" => Output::Svg,
            "png" => Output::Png,
            _ => {
                return Err(Refused::new(
                    format!(
                        "--out {}: a plot is written as .svg or .png",
                        path.display()
                    ),
                    None,
                ))
            }
        };
        check_directory(path)?;
        Ok(format)
    }
}

/// That `path`'s directory exists, before anything is drawn.
pub fn check_directory(path: &Path) -> Result<(), Refused> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match dir.is_dir() {
        true => Ok(()),
        false => Err(Refused::new(
            format!(
                "cannot write {}: the directory {} does not exist",
                path.display(),
                dir.display()
            ),
            Some("create it first, or choose another --out".into()),
        )),
    }
}

/// Writes `bytes` to `path` through a temporary file beside it (`cache::write_atomic`),
/// so that `path` is never half-written.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Refused> {
    cache::write_atomic(path, bytes).map_err(|e| {
        Refused::new(
            format!("cannot write {}: {e}", path.display()),
            Some("check that the directory is writable and the disk is not full".into()),
        )
    })
}

/// A line: a run's (and stage's) values of one metric.
pub struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A metric's curves.
pub struct Panel {
    pub metric: String,
    pub curves: Vec<Curve>,
}

/// A panel per metric of `asked` (or the defaults the runs have), a curve per run and
/// stage that has it; a metric no run has is refused, naming those they have.
pub fn panels(shown: &[Shown], asked: &[String]) -> Result<Vec<Panel>, Refused> {
    let has = |m: &str| {
        shown
            .iter()
            .any(|s| !s.records.series(&Metric(m.into())).is_empty())
    };
    let metrics: Vec<String> = match asked.is_empty() {
        true => DEFAULT_METRICS
            .iter()
            .filter(|m| has(m))
            .map(|m| m.to_string())
            .collect(),
        false => asked.iter().map(|m| m.trim().to_string()).collect(),
    };
    let ids = || {
        shown
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut available: Vec<String> = Vec::new();
    for s in shown {
        for m in s.records.metrics() {
            if !available.contains(&m) {
                available.push(m);
            }
        }
    }
    if let Some(missing) = metrics.iter().find(|m| !has(m)) {
        return Err(Refused::new(
            format!("no run shown ({}) recorded `{missing}`", ids()),
            Some(format!("they recorded: {}", available.join(", "))),
        ));
    }
    if metrics.is_empty() {
        return Err(Refused::new(
            format!("the runs shown ({}) recorded no training curve", ids()),
            Some(format!(
                "they recorded: {}; name one with --metric",
                available.join(", ")
            )),
        ));
    }
    Ok(metrics
        .into_iter()
        .map(|metric| {
            let mut curves = Vec::new();
            for s in shown {
                let series = s.records.series(&Metric(metric.clone()));
                let many_stages = series.len() > 1;
                for (stage, points) in series {
                    let label = match many_stages {
                        true => format!("{} · {stage}", s.id),
                        false => s.id.clone(),
                    };
                    let points = points.into_iter().filter(|p| p.1.is_finite()).collect();
                    curves.push(Curve { label, points });
                }
            }
            Panel { metric, curves }
        })
        .collect())
}

/// The charts as an SVG document.
pub fn svg(panels: &[Panel], log_y: bool) -> Result<String, Refused> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size(panels)).into_drawing_area();
        draw(root, panels, log_y)?;
    }
    Ok(text)
}

/// The charts as a PNG image.
fn png(panels: &[Panel], log_y: bool) -> Result<Vec<u8>, Refused> {
    let (w, h) = size(panels);
    let mut rgb = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(root, panels, log_y)?;
    }
    let mut png = Vec::new();
    let image = image::RgbImage::from_raw(w, h, rgb).expect("the buffer is the image's size");
    image
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .map_err(|e| Refused::new(format!("cannot encode the PNG: {e}"), None))?;
    Ok(png)
}

fn size(panels: &[Panel]) -> (u32, u32) {
    (WIDTH, PANEL * panels.len().max(1) as u32)
}

/// Registers the font every chart's text is measured (and in a PNG drawn) with.
fn font() -> Result<(), Refused> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok =
        *REGISTERED.get_or_init(|| register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    match ok {
        true => Ok(()),
        false => Err(Refused::new("the plot's font cannot be read", None)),
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    panels: &[Panel],
    log_y: bool,
) -> Result<(), Refused> {
    font()?;
    let failed = |e: String| Refused::new(format!("cannot draw the plot: {e}"), None);
    root.fill(&WHITE).map_err(|e| failed(e.to_string()))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, panel) in areas.iter().zip(panels) {
        panel_chart(area, panel, log_y).map_err(failed)?;
    }
    root.present().map_err(|e| failed(e.to_string()))
}

/// The range of `values`, widened a little (or to whole decades on a log scale).
fn range(values: impl Iterator<Item = f64>, log: bool) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold(None, |r: Option<(f64, f64)>, v| {
            Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        })?;
    if log {
        // Whole decades, so that the axis has labelled ticks (a hair wider: plotters
        // leaves out the label of an exact power of ten at the edge).
        let lo = 10f64.powf(lo.log10().floor()) * 0.999;
        let hi = 10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)) * 1.001;
        return Some((lo, hi));
    }
    let pad = match hi > lo {
        true => (hi - lo) * 0.05,
        false => lo.abs().max(1.0) * 0.05,
    };
    Some((lo - pad, hi + pad))
}

fn panel_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    log_y: bool,
) -> Result<(), String> {
    let points = || panel.curves.iter().flat_map(|c| c.points.iter());
    // Whole optimizer steps, at least two apart, so that the ticks fall on steps.
    let (x0, x1) = points()
        .map(|p| p.0)
        .fold(None, |r: Option<(f64, f64)>, x| {
            Some(r.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))))
        })
        .unwrap_or((0.0, 1.0));
    let (x0, x1) = match x1 - x0 < 2.0 {
        true => ((x0 - 1.0).max(0.0).floor(), x1.ceil() + 1.0),
        false => (x0.floor(), x1.ceil()),
    };
    let x_labels = ((x1 - x0) as usize + 1).min(10);
    let Some((y0, y1)) = range(points().map(|p| p.1), log_y) else {
        let style = ("sans-serif", 16).into_font().color(&BLACK);
        let why = match log_y {
            true => format!("{}: no value above 0 to draw on a log scale", panel.metric),
            false => format!("{}: no finite value", panel.metric),
        };
        return area
            .draw(&Text::new(why, (20, 20), style))
            .map_err(|e| e.to_string());
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.metric, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64);
    let y_label = |y: &f64| {
        let a = y.abs();
        match a != 0.0 && !(1e-3..1e4).contains(&a) {
            true => format!("{y:.1e}"),
            false => format!("{}", (y * 1e4).round() / 1e4),
        }
    };
    // The axes, then the curves and their legend, on a chart of either scale.
    macro_rules! curves {
        ($chart:expr) => {{
            let chart = &mut $chart;
            chart
                .configure_mesh()
                .x_desc("optimizer step")
                .x_labels(x_labels)
                .x_label_formatter(&|x| format!("{x:.0}"))
                .label_style(("sans-serif", 14))
                .axis_desc_style(("sans-serif", 15))
                .y_label_formatter(&y_label)
                .draw()
                .map_err(|e| e.to_string())?;
            for (i, curve) in panel.curves.iter().enumerate() {
                let color = COLORS[i % COLORS.len()].to_rgba();
                let points: Vec<(f64, f64)> = curve
                    .points
                    .iter()
                    .copied()
                    .filter(|p| !log_y || p.1 > 0.0)
                    .collect();
                let single = points.len() == 1;
                let drawn = chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
                drawn.label(curve.label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
                // A curve of one value is a dot.
                if single {
                    chart
                        .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                        .map_err(|e| e.to_string())?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(|e| e.to_string())?;
        }};
    }
    if log_y {
        let mut chart = builder
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(|e| e.to_string())?;
        curves!(chart);
    } else {
        let mut chart = builder
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        curves!(chart);
    }
    Ok(())
}
