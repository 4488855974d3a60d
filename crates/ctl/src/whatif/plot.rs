//! The replica / metric picture (plotters): SVG, or PNG through the bitmap backend.
//!
//! Text is laid out (both formats) and rasterised (PNG) with a font compiled into the
//! binary, `src/whatif/font/DejaVuSans-subset.ttf` (DejaVu Sans, Bitstream Vera licence, see
//! `src/whatif/font/DejaVuSans-LICENSE.txt`; subset to Latin-1 and common punctuation, 41 KB),
//! registered with plotters' `ab_glyph` font loader: plotters' default `ttf` loader asks
//! fontconfig for a system font, and a container or CI machine often has none, where the
//! bitmap backend then fails with "font unavailable" (issue 13). Characters outside the
//! subset draw as the font's missing-glyph box.
//!
//! Left axis: replicas (current, stored desired, simulated desired, as step lines, with the
//! scale events of each run marked). Right axis: each metric, as a percentage of its target
//! (simulations) or its raw value (the report, whose log does not keep the targets), with the
//! 100 % target line when percentages are drawn.

use plotters::prelude::*;

use autoscaled_wire::pb::v1 as api;

// Colours of the series, public so that `tests/whatif.rs` finds each series in the SVG and PNG.
/// The replica count the target ran with (grey: the given, not a decision).
pub const CURRENT: RGBColor = RGBColor(140, 140, 140);
/// The decisions the server made and stored.
pub const STORED: RGBColor = RGBColor(31, 119, 180);
/// The decisions of the what-if replay, drawn over the stored ones to compare.
pub const SIMULATED: RGBColor = RGBColor(255, 127, 14);
/// The 100 % line when the metric axis is "% of target".
pub const TARGET: RGBColor = RGBColor(214, 39, 40);
const METRICS: [RGBColor; 4] = [
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
];

/// What is drawn: one value per step.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The caption above the chart (the target key, usually).
    pub title: String,
    /// Seconds since the Unix epoch of each step.
    pub times: Vec<i64>,
    /// The replica count at each step, as the request reported it.
    pub current: Vec<i32>,
    /// The stored decision of each step.
    pub stored: Vec<i32>,
    /// The replayed decision of each step; `None` for a report of history alone.
    pub simulated: Option<Vec<i32>>,
    /// (label, value per step).
    pub metrics: Vec<(String, Vec<Option<f64>>)>,
    /// The metric axis is "% of target": draw the 100 % line.
    pub percent_of_target: bool,
}

fn seconds(t: Option<&prost_types::Timestamp>) -> i64 {
    t.map_or(0, |t| t.seconds)
}

impl Timeline {
    /// The picture of a simulation.
    pub fn from_simulation(title: &str, r: &api::SimulateResponse) -> Self {
        let steps: Vec<_> = r.steps.iter().filter(|s| !s.dry_run).collect();
        let mut names: Vec<String> = Vec::new();
        for s in &steps {
            for m in &s.metrics {
                let label = metric_label(m);
                if !names.contains(&label) {
                    names.push(label);
                }
            }
        }
        names.truncate(METRICS.len());
        let metrics = names
            .iter()
            .map(|label| {
                let values = steps
                    .iter()
                    .map(|s| {
                        s.metrics
                            .iter()
                            .find(|m| &metric_label(m) == label)
                            .and_then(|m| match (m.current, m.target) {
                                #[allow(clippy::cast_precision_loss)]
                                (Some(c), Some(t)) if t > 0 => Some(c as f64 * 100.0 / t as f64),
                                _ => None,
                            })
                    })
                    .collect();
                (format!("{label} (% of target)"), values)
            })
            .collect();
        Timeline {
            title: title.to_owned(),
            times: steps
                .iter()
                .map(|s| seconds(s.evaluation_time.as_ref()))
                .collect(),
            current: steps.iter().map(|s| s.current_replicas).collect(),
            stored: steps.iter().map(|s| s.stored_desired_replicas).collect(),
            simulated: Some(steps.iter().map(|s| s.simulated_desired_replicas).collect()),
            metrics,
            percent_of_target: true,
        }
    }
}

fn metric_label(m: &api::SimulatedMetric) -> String {
    if m.container.is_empty() {
        m.name.clone()
    } else {
        format!("{}/{}", m.name, m.container)
    }
}

/// Points of a step line: each value held until the next step.
fn stairs(xs: &[f64], ys: &[f64]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(xs.len() * 2);
    for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
        if i > 0 {
            out.push((x, ys[i - 1]));
        }
        out.push((x, y));
    }
    out
}

/// Where a count changes (scale events): (x, new count).
fn changes(xs: &[f64], current: &[i32], ys: &[i32]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
        let before = if i == 0 { current[0] } else { ys[i - 1] };
        if y != before {
            out.push((x, f64::from(y)));
        }
    }
    out
}

/// The embedded font (see the module documentation).
const FONT: &[u8] = include_bytes!("font/DejaVuSans-subset.ttf");

/// Registers [`FONT`] as plotters' `sans-serif`, once per process (`register_font` keeps a
/// process-wide table).
fn register_font() -> Result<(), String> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the embedded font does not parse".to_owned())
        })
        .clone()
}

/// The picture formats `--plot` writes, chosen by the file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// `.svg`: a vector document (opens in any browser).
    Svg,
    /// `.png`: a bitmap, text drawn with the embedded font.
    Png,
}

impl Format {
    /// The format for `path`'s extension (case-insensitive), or the error to show.
    pub(crate) fn from_path(path: &std::path::Path) -> Result<Self, String> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        match ext.as_str() {
            "svg" => Ok(Self::Svg),
            "png" => Ok(Self::Png),
            "" => Err("has no extension: name the file .svg or .png".to_owned()),
            other => Err(format!(
                "unknown picture format .{other}: name the file .svg or .png"
            )),
        }
    }
}

/// Renders the timeline as a PNG image of `width` × `height` pixels (8-bit RGB).
pub fn png(t: &Timeline, width: u32, height: u32) -> Result<Vec<u8>, String> {
    register_font()?;
    let pixels = usize::try_from(u64::from(width) * u64::from(height) * 3)
        .map_err(|_| "the picture is too large".to_owned())?;
    let mut rgb = vec![0u8; pixels];
    draw(t, BitMapBackend::with_buffer(&mut rgb, (width, height))).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Renders the timeline as an SVG document of `width` × `height` pixels.
pub fn svg(t: &Timeline, width: u32, height: u32) -> Result<String, String> {
    register_font()?;
    let mut buf = String::new();
    draw(t, SVGBackend::with_string(&mut buf, (width, height))).map_err(|e| e.to_string())?;
    Ok(buf)
}

fn draw<DB: DrawingBackend>(
    t: &Timeline,
    backend: DB,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let root = backend.into_drawing_area();
    root.fill(&WHITE)?;
    let start = t.times.first().copied().unwrap_or(0);
    #[allow(clippy::cast_precision_loss)]
    let xs: Vec<f64> = t.times.iter().map(|s| (s - start) as f64 / 60.0).collect();
    let x_max = xs.last().copied().unwrap_or(0.0).max(1.0) * 1.02;
    let all_counts = t
        .current
        .iter()
        .chain(&t.stored)
        .chain(t.simulated.iter().flatten());
    let y_max = f64::from(all_counts.copied().max().unwrap_or(1).max(1)) * 1.15 + 0.5;
    let m_max = t
        .metrics
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .copied()
        .fold(if t.percent_of_target { 120.0 } else { 1.0 }, f64::max)
        * 1.1;
    let start_label = prost_types::Timestamp {
        seconds: start,
        nanos: 0,
    }
    .to_string();

    let mut chart = ChartBuilder::on(&root)
        .caption(&t.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(42)
        .y_label_area_size(52)
        .right_y_label_area_size(62)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?
        .set_secondary_coord(0f64..x_max, 0f64..m_max);
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(230, 230, 230))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .x_labels(12)
        .x_desc(format!("minutes since {start_label}"))
        .y_desc("replicas")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    chart
        .configure_secondary_axes()
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc(if t.percent_of_target {
            "metric, % of target"
        } else {
            "metric value"
        })
        .draw()?;

    if t.percent_of_target {
        chart
            .draw_secondary_series(LineSeries::new(
                vec![(0.0, 100.0), (x_max, 100.0)],
                TARGET.stroke_width(1),
            ))?
            .label("target (100 %)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], TARGET));
    }
    for (i, (label, values)) in t.metrics.iter().enumerate() {
        let color = METRICS[i % METRICS.len()];
        let points: Vec<(f64, f64)> = xs
            .iter()
            .zip(values)
            .filter_map(|(&x, v)| v.map(|v| (x, v)))
            .collect();
        chart
            .draw_secondary_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }

    let f = |v: &[i32]| v.iter().map(|&c| f64::from(c)).collect::<Vec<_>>();
    chart
        .draw_series(LineSeries::new(
            stairs(&xs, &f(&t.current)),
            CURRENT.stroke_width(2),
        ))?
        .label("current replicas")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], CURRENT));
    chart
        .draw_series(LineSeries::new(
            stairs(&xs, &f(&t.stored)),
            STORED.stroke_width(3),
        ))?
        .label(if t.simulated.is_some() {
            "stored desired"
        } else {
            "desired"
        })
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], STORED));
    chart.draw_series(
        changes(&xs, &t.current, &t.stored)
            .into_iter()
            .map(|p| Circle::new(p, 5, STORED.filled())),
    )?;
    if let Some(sim) = &t.simulated {
        chart
            .draw_series(LineSeries::new(
                stairs(&xs, &f(sim)),
                SIMULATED.stroke_width(2),
            ))?
            .label("simulated desired")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], SIMULATED));
        chart.draw_series(
            changes(&xs, &t.current, sim)
                .into_iter()
                .map(|p| TriangleMarker::new(p, 6, SIMULATED.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()?;
    root.present()?;
    Ok(())
}
