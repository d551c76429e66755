//! Several runs of one figure, shown as the median with the range beside
//! it: `15552.0 (14900.1–15800.3)`. One run shows alone; none shows `-`.

/// The values of one figure over the runs of a measurement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Runs(pub Vec<f64>);

impl Runs {
    /// No runs yet.
    pub fn new() -> Runs {
        Runs(Vec::new())
    }

    /// Adds one run's value (NaN, a failed run, is left out).
    pub fn push(&mut self, v: f64) {
        if !v.is_nan() {
            self.0.push(v);
        }
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    }

    /// The median (NaN with no runs).
    pub fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// The smallest value (NaN with no runs).
    pub fn min(&self) -> f64 {
        self.0.iter().copied().fold(f64::NAN, f64::min)
    }

    /// The largest value (NaN with no runs).
    pub fn max(&self) -> f64 {
        self.0.iter().copied().fold(f64::NAN, f64::max)
    }

    /// Every value mapped by `f`.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Runs {
        Runs(self.0.iter().map(|&v| f(v)).collect())
    }

    /// The median, then the range in parentheses, each written by `f`.
    pub fn show_with(&self, f: impl Fn(f64) -> String) -> String {
        match self.0.len() {
            0 => "-".into(),
            1 => f(self.0[0]),
            _ => format!("{} ({}–{})", f(self.median()), f(self.min()), f(self.max())),
        }
    }

    /// [`show_with`](Self::show_with) with `decimals` decimals.
    pub fn show(&self, decimals: usize) -> String {
        self.show_with(|v| format!("{v:.decimals$}"))
    }
}

impl FromIterator<f64> for Runs {
    fn from_iter<I: IntoIterator<Item = f64>>(it: I) -> Runs {
        let mut r = Runs::new();
        for v in it {
            r.push(v);
        }
        r
    }
}
