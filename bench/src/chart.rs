//! Line charts as SVG documents (plotters).

use plotters::prelude::*;

/// One line of a chart.
pub struct Series {
    /// Its legend.
    pub name: String,
    /// Its colour, `#rrggbb`.
    pub color: &'static str,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

/// Colours for series, in order.
pub const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

fn rgb(hex: &str) -> RGBColor {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap_or(0);
    RGBColor((v >> 16) as u8, (v >> 8) as u8, v as u8)
}

/// A line chart of `series`, with dashed vertical lines at `marks`, as an
/// SVG document.
pub fn line_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    marks: &[(f64, &str)],
) -> String {
    let xmax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1e-9, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1e-9, f64::max)
        * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 420)).into_drawing_area();
        root.fill(&WHITE).expect("fill");
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .expect("axes");
        chart
            .configure_mesh()
            .x_desc(xlabel)
            .y_desc(ylabel)
            .light_line_style(RGBColor(238, 238, 238))
            .draw()
            .expect("mesh");
        for (at, label) in marks {
            let style = ShapeStyle::from(RGBColor(150, 150, 150)).stroke_width(1);
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(*at, 0.0), (*at, ymax)],
                    4,
                    3,
                    style,
                ))
                .expect("mark")
                .label(*label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        for s in series {
            let color = rgb(s.color);
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .expect("series")
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .expect("legend");
        root.present().expect("svg");
    }
    svg
}
