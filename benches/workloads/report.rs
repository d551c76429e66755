//! Tables (markdown) and plots (hand-written SVG).

use std::fmt::Write;

/// A markdown table being built.
pub struct Table {
    pub title: String,
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub note: String,
}

impl Table {
    pub fn new(title: &str, head: &[&str]) -> Table {
        Table {
            title: title.into(),
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: vec![],
            note: String::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut w = vec![0; self.head.len()];
        for r in std::iter::once(&self.head).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let mut s = String::from("|");
            for (i, c) in r.iter().enumerate() {
                let pad = w[i] - c.chars().count();
                if i == 0 {
                    let _ = write!(s, " {c}{} |", " ".repeat(pad));
                } else {
                    let _ = write!(s, " {}{c} |", " ".repeat(pad));
                }
            }
            s
        };
        let mut out = format!("### {}\n\n{}\n|", self.title, line(&self.head));
        for (i, wi) in w.iter().enumerate() {
            out.push(' ');
            out.push_str(&"-".repeat(*wi));
            out.push_str(if i == 0 { " |" } else { ":|" });
        }
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        if !self.note.is_empty() {
            out.push('\n');
            out.push_str(&self.note);
            out.push('\n');
        }
        out
    }
}

pub fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1 << 20) as f64)
}

pub fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// A line chart as a standalone SVG document.
pub fn line_chart(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[Series],
    marks: &[(f64, &str)],
) -> String {
    let (w, h, ml, mr, mt, mb) = (900.0, 420.0, 80.0, 180.0, 40.0, 50.0);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let xmax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1e-9, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1e-9, f64::max)
        * 1.05;
    let x = |v: f64| ml + v / xmax * pw;
    let y = |v: f64| mt + ph - v / ymax * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{title}</text>"#,
        ml + pw / 2.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
    );
    for i in 0..=5 {
        let yv = ymax * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" x2="{}" y1="{}" y2="{}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{:.0}</text>"##,
            ml + pw,
            y(yv),
            y(yv),
            ml - 6.0,
            y(yv) + 4.0,
            yv
        );
        let xv = xmax * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{:.1}</text>"#,
            x(xv),
            mt + ph + 18.0,
            xv
        );
    }
    for (at, label) in marks {
        let _ = writeln!(
            s,
            r##"<line x1="{0}" x2="{0}" y1="{mt}" y2="{1}" stroke="#999" stroke-dasharray="4 3"/><text x="{2}" y="{3}">{label}</text>"##,
            x(*at),
            mt + ph,
            x(*at) + 4.0,
            mt + 14.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{xlabel}</text>"#,
        ml + pw / 2.0,
        h - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">{ylabel}</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0
    );
    for (i, se) in series.iter().enumerate() {
        let mut pts = String::new();
        for &(a, b) in &se.points {
            let _ = write!(pts, "{:.1},{:.1} ", x(a), y(b));
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.8" points="{pts}"/>"#,
            se.color
        );
        let ly = mt + 10.0 + i as f64 * 18.0;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            ml + pw + 10.0,
            ml + pw + 30.0,
            se.color,
            ml + pw + 36.0,
            ly + 4.0,
            se.name
        );
    }
    s.push_str("</svg>\n");
    s
}
