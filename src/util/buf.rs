//! A fixed-capacity text buffer that implements `core::fmt::Write`.
//!
//! `write!` into it formats on the stack: no heap, so it is usable inside the
//! allocator (error lines, sysfs paths, the stats report). Text past the
//! capacity is dropped and `truncated` is set rather than failing.

use core::fmt;

/// Up to `N` bytes of text, plus room for a terminating NUL for C calls.
pub(crate) struct FixedBuf<const N: usize> {
    bytes: [u8; N],
    len: usize,
    /// Some text did not fit.
    pub truncated: bool,
}

impl<const N: usize> FixedBuf<N> {
    /// An empty buffer.
    pub(crate) const fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
            truncated: false,
        }
    }

    /// The text written so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Forgets the contents.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
    }

    /// Appends raw bytes (truncating at capacity, keeping one byte for NUL).
    pub(crate) fn push_bytes(&mut self, s: &[u8]) {
        let room = N.saturating_sub(1).saturating_sub(self.len);
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
        if n < s.len() {
            self.truncated = true;
        }
    }

    /// The contents as a C string (terminated in place), for C APIs; `None`
    /// if the text holds a NUL byte.
    pub(crate) fn as_cstr(&mut self) -> Option<&core::ffi::CStr> {
        self.bytes[self.len] = 0;
        core::ffi::CStr::from_bytes_with_nul(&self.bytes[..=self.len]).ok()
    }
}

impl<const N: usize> Default for FixedBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> fmt::Write for FixedBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_bytes(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn formats_and_truncates() {
        let mut b = FixedBuf::<16>::new();
        write!(b, "cpu{}/x", 12).unwrap();
        assert_eq!(b.as_bytes(), b"cpu12/x");
        b.write_str("0123456789abcdef").unwrap();
        assert_eq!(b.len(), 15);
        assert!(b.truncated);
    }
}
