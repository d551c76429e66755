//! Report text without allocating: a writer that streams text in chunks
//! of whole lines through a small stack buffer, and integer renderings of
//! sizes and ratios (formatting an `f64` takes 2 KiB of stack; the report
//! runs on small stacks too: a 16 KiB thread's, a signal handler's 8 KiB
//! alternate stack).

use core::fmt::{self, Write};

/// Writes `bytes` for a person: `512 B`, `12.3 KiB`, `4.0 MiB`, `1.2 GiB`
/// (rounded to the nearest tenth), in integers.
pub(crate) fn write_bytes(w: &mut dyn Write, bytes: u64) -> fmt::Result {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return write!(w, "{bytes} B");
    }
    let mut unit = 0;
    let mut div: u128 = 1024;
    while u128::from(bytes) >= div * 1024 && unit + 1 < UNITS.len() {
        div *= 1024;
        unit += 1;
    }
    let tenths = (u128::from(bytes) * 10 + div / 2) / div;
    write!(w, "{}.{} {}", tenths / 10, tenths % 10, UNITS[unit])
}

/// Writes `num / den` as a decimal with `places` digits after the point,
/// rounded to the nearest (`den` > 0): the report's ratios without
/// formatting an `f64`.
pub(crate) fn write_ratio(w: &mut dyn Write, num: u64, den: u64, places: u32) -> fmt::Result {
    let scale = 10u128.pow(places);
    let den = u128::from(den);
    let v = (u128::from(num) * scale + den / 2) / den;
    if places == 0 {
        return write!(w, "{v}");
    }
    write!(
        w,
        "{}.{:0width$}",
        v / scale,
        v % scale,
        width = places as usize
    )
}

/// A `fmt::Write` over a small stack buffer that hands its bytes to
/// `sink` whenever the buffer fills — up to its last whole line, so a line
/// is never split between two writes unless it is longer than the buffer
/// — and at [`finish`](Self::finish): the report goes out without
/// allocating, and in little stack.
pub(crate) struct ChunkWriter<F: FnMut(&[u8])> {
    sink: F,
    buf: [u8; CHUNK],
    len: usize,
}

/// The most bytes a [`ChunkWriter`] hands over at once: small, for small
/// stacks (a 16 KiB thread's, a signal handler's alternate stack), and
/// below a pipe's `PIPE_BUF`, so one write(2) of it is never interleaved
/// with another process's.
const CHUNK: usize = 512;

impl<F: FnMut(&[u8])> ChunkWriter<F> {
    /// A writer handing chunks to `sink`.
    pub(crate) fn new(sink: F) -> Self {
        ChunkWriter {
            sink,
            buf: [0; CHUNK],
            len: 0,
        }
    }

    /// Hands over what is left.
    pub fn finish(mut self) {
        if self.len > 0 {
            (self.sink)(&self.buf[..self.len]);
        }
    }

    /// Hands over the buffer's whole lines (all of it if it holds no line
    /// end) and moves the rest to its start.
    fn flush_lines(&mut self) {
        let bytes = &self.buf[..self.len];
        let end = bytes
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        (self.sink)(&bytes[..end]);
        self.buf.copy_within(end..self.len, 0);
        self.len -= end;
    }
}

impl<F: FnMut(&[u8])> Write for ChunkWriter<F> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut s = s.as_bytes();
        while !s.is_empty() {
            if self.len == CHUNK {
                self.flush_lines();
            }
            let n = s.len().min(CHUNK - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
            self.len += n;
            s = &s[n..];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::buf::FixedBuf;

    #[test]
    fn chunks_end_at_line_ends() {
        let mut chunks: [usize; 64] = [0; 64];
        let mut n = 0;
        let mut ends_ok = true;
        {
            let mut w = ChunkWriter::new(|b: &[u8]| {
                chunks[n] = b.len();
                n += 1;
                ends_ok &= b.last() == Some(&b'\n');
            });
            for i in 0..600 {
                let _ = writeln!(w, "counter_{i} {}", i * 1000);
            }
            w.finish();
        }
        assert!(n >= 3, "{n} chunks");
        assert!(ends_ok, "a chunk ended inside a line");
        assert!(chunks[..n].iter().all(|&c| c <= CHUNK));
    }

    #[test]
    fn bytes_read_for_a_person() {
        let mut b = FixedBuf::<128>::new();
        for v in [
            0u64,
            1023,
            1024,
            1536 << 10,
            3 << 30,
            12_595,
            1_048_575,
            u64::MAX,
        ] {
            write_bytes(&mut b, v).unwrap();
            b.push_bytes(b"|");
        }
        assert_eq!(
            b.as_bytes(),
            b"0 B|1023 B|1.0 KiB|1.5 MiB|3.0 GiB|12.3 KiB|1024.0 KiB|16777216.0 TiB|"
        );
    }

    #[test]
    fn ratios_are_rounded_decimals() {
        let mut b = FixedBuf::<128>::new();
        for (n, d, p) in [
            (1, 3, 4),
            (2, 3, 1),
            (1, 1, 4),
            (0, 7, 2),
            (999, 1000, 1),
            (5, 8, 0),
        ] {
            write_ratio(&mut b, n, d, p).unwrap();
            b.push_bytes(b"|");
        }
        assert_eq!(b.as_bytes(), b"0.3333|0.7|1.0000|0.00|1.0|1|");
    }
}
