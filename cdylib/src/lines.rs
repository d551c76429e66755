//! The report, a line at a time, without allocating: a `fmt::Write` that
//! hands each complete line (without its newline) to a closure.

use core::fmt;

/// Longest line kept whole; a longer one is cut.
const LINE_MAX: usize = 512;

/// See the module docs.
pub struct Lines<F: FnMut(&[u8])> {
    buf: [u8; LINE_MAX],
    len: usize,
    each: F,
}

impl<F: FnMut(&[u8])> Lines<F> {
    /// Calls `each` for every line written.
    pub fn new(each: F) -> Self {
        Lines {
            buf: [0; LINE_MAX],
            len: 0,
            each,
        }
    }

    /// Hands over a last line that had no newline.
    pub fn finish(mut self) {
        if self.len > 0 {
            (self.each)(&self.buf[..self.len]);
        }
    }
}

impl<F: FnMut(&[u8])> fmt::Write for Lines<F> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &c in s.as_bytes() {
            if c == b'\n' {
                (self.each)(&self.buf[..self.len]);
                self.len = 0;
            } else if self.len < LINE_MAX {
                self.buf[self.len] = c;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// Splits a report line into its name and value.
pub fn name_value(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&c| c == b' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &[]),
    }
}
