//! Markdown tables for the report (comfy-table).

use comfy_table::{presets::ASCII_MARKDOWN, CellAlignment, Table as Grid};

/// A table being built: a title, a header, rows, and a note under it.
pub struct Table {
    /// Printed as a `###` heading.
    pub title: String,
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Printed under the table.
    pub note: String,
}

impl Table {
    /// A table with these column names.
    pub fn new(title: &str, head: &[&str]) -> Table {
        Table {
            title: title.into(),
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: vec![],
            note: String::new(),
        }
    }

    /// Adds a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.head.len(), "row width");
        self.rows.push(cells);
    }

    /// The table as markdown: the first column left-aligned, the others
    /// (figures) right-aligned.
    pub fn render(&self) -> String {
        let mut g = Grid::new();
        g.load_preset(ASCII_MARKDOWN);
        g.set_header(self.head.clone());
        for r in &self.rows {
            g.add_row(r.clone());
        }
        for (i, col) in g.column_iter_mut().enumerate() {
            col.set_cell_alignment(if i == 0 {
                CellAlignment::Left
            } else {
                CellAlignment::Right
            });
        }
        let mut out = format!("### {}\n\n{g}\n", self.title);
        if !self.note.is_empty() {
            out.push('\n');
            out.push_str(&self.note);
            out.push('\n');
        }
        out
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1 << 20) as f64)
}

/// A ratio with two decimals and an `x`.
pub fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}
