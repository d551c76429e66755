//! The protocol buffer encoding of pprof's `profile.proto` (the format of
//! Go's and tcmalloc's heap profiles, which `pprof` reads and symbolises),
//! written through fixed buffers: a message small enough for a stack
//! buffer ([`Msg`]) is built whole, then copied with its length into a
//! [`Sink`] that goes to a file descriptor with write(2) when full. The
//! top-level message (`Profile`) is never length-prefixed, so it streams.
//!
//! Field numbers are those of `profile.proto`
//! (github.com/google/pprof, proto/profile.proto).

/// `Profile` fields.
pub(crate) mod profile {
    /// repeated ValueType sample_type
    pub(crate) const SAMPLE_TYPE: u32 = 1;
    /// repeated Sample sample
    pub(crate) const SAMPLE: u32 = 2;
    /// repeated Mapping mapping
    pub(crate) const MAPPING: u32 = 3;
    /// repeated Location location
    pub(crate) const LOCATION: u32 = 4;
    /// repeated string string_table
    pub(crate) const STRING_TABLE: u32 = 6;
    /// int64 time_nanos
    pub(crate) const TIME_NANOS: u32 = 9;
    /// ValueType period_type
    pub(crate) const PERIOD_TYPE: u32 = 11;
    /// int64 period
    pub(crate) const PERIOD: u32 = 12;
    /// repeated int64 comment (string table indices)
    pub(crate) const COMMENT: u32 = 13;
    /// int64 default_sample_type
    pub(crate) const DEFAULT_SAMPLE_TYPE: u32 = 14;
}

/// `ValueType` fields: type, unit (string table indices).
pub(crate) mod value_type {
    /// int64 type
    pub(crate) const TYPE: u32 = 1;
    /// int64 unit
    pub(crate) const UNIT: u32 = 2;
}

/// `Sample` fields.
pub(crate) mod sample {
    /// repeated uint64 location_id (packed)
    pub(crate) const LOCATION_ID: u32 = 1;
    /// repeated int64 value (packed)
    pub(crate) const VALUE: u32 = 2;
}

/// `Mapping` fields.
pub(crate) mod mapping {
    /// uint64 id
    pub(crate) const ID: u32 = 1;
    /// uint64 memory_start
    pub(crate) const MEMORY_START: u32 = 2;
    /// uint64 memory_limit
    pub(crate) const MEMORY_LIMIT: u32 = 3;
    /// uint64 file_offset
    pub(crate) const FILE_OFFSET: u32 = 4;
    /// int64 filename
    pub(crate) const FILENAME: u32 = 5;
}

/// `Location` fields.
pub(crate) mod location {
    /// uint64 id
    pub(crate) const ID: u32 = 1;
    /// uint64 mapping_id
    pub(crate) const MAPPING_ID: u32 = 2;
    /// uint64 address
    pub(crate) const ADDRESS: u32 = 3;
}

const WIRE_VARINT: u32 = 0;
const WIRE_LEN: u32 = 2;

/// Writes `v` as a varint into `out`; returns the bytes used (≤ 10).
fn varint(mut v: u64, out: &mut [u8; 10]) -> usize {
    let mut n = 0;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[n] = byte;
            return n + 1;
        }
        out[n] = byte | 0x80;
        n += 1;
    }
}

/// Something fields can be written to.
pub(crate) trait Encode {
    /// Appends raw bytes.
    fn put(&mut self, b: &[u8]);

    /// Appends a varint.
    fn varint(&mut self, v: u64) {
        let mut b = [0u8; 10];
        let n = varint(v, &mut b);
        self.put(&b[..n]);
    }

    /// A varint field (skipped when 0, as proto3 does).
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint(u64::from(field << 3 | WIRE_VARINT));
            self.varint(v);
        }
    }

    /// A length-delimited field: bytes, a string or a message's encoding.
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.varint(u64::from(field << 3 | WIRE_LEN));
        self.varint(b.len() as u64);
        self.put(b);
    }

    /// A packed repeated varint field.
    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut len = 0;
        let mut scratch = [0u8; 10];
        for &v in values {
            len += varint(v, &mut scratch);
        }
        self.varint(u64::from(field << 3 | WIRE_LEN));
        self.varint(len as u64);
        for &v in values {
            self.varint(v);
        }
    }
}

/// A message being built, of at most `N` bytes (past that it is marked
/// truncated and must not be used).
pub(crate) struct Msg<const N: usize> {
    buf: [u8; N],
    len: usize,
    /// Some bytes did not fit.
    pub truncated: bool,
}

impl<const N: usize> Msg<N> {
    /// An empty message.
    pub(crate) fn new() -> Self {
        Msg {
            buf: [0; N],
            len: 0,
            truncated: false,
        }
    }

    /// The encoding so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> Default for Msg<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Encode for Msg<N> {
    fn put(&mut self, b: &[u8]) {
        if self.len + b.len() > N {
            self.truncated = true;
            return;
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
}

/// Bytes a [`Sink`] buffers before a write(2).
pub(crate) const SINK_BYTES: usize = 16 << 10;

/// A stream to a file descriptor through a fixed buffer.
pub(crate) struct Sink {
    fd: i32,
    buf: [u8; SINK_BYTES],
    len: usize,
    /// Whether every write so far succeeded.
    pub ok: bool,
}

impl Sink {
    /// A sink with nothing to write to yet.
    pub(crate) const fn new() -> Sink {
        Sink {
            fd: -1,
            buf: [0; SINK_BYTES],
            len: 0,
            ok: true,
        }
    }

    /// Starts a stream to `fd`.
    pub(crate) fn start(&mut self, fd: i32) {
        self.fd = fd;
        self.len = 0;
        self.ok = true;
    }

    /// Writes out what is buffered.
    pub(crate) fn flush(&mut self) {
        let mut rest = &self.buf[..self.len];
        while self.ok && !rest.is_empty() {
            // SAFETY: rest is a valid byte slice.
            let n = unsafe { libc::write(self.fd, rest.as_ptr().cast(), rest.len()) };
            if n > 0 {
                rest = &rest[n as usize..];
            // SAFETY: errno's location is valid for this thread.
            } else if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            } else {
                self.ok = false;
            }
        }
        self.len = 0;
    }
}

impl Default for Sink {
    fn default() -> Self {
        Self::new()
    }
}

impl Encode for Sink {
    fn put(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.len == SINK_BYTES {
                self.flush();
            }
            let n = b.len().min(SINK_BYTES - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
            self.len += n;
            b = &b[n..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_varints_and_fields() {
        let mut m = Msg::<64>::new();
        m.uint(1, 150);
        assert_eq!(m.as_bytes(), &[0x08, 0x96, 0x01]);
        let mut m = Msg::<64>::new();
        m.bytes(2, b"testing");
        assert_eq!(m.as_bytes(), b"\x12\x07testing");
        let mut m = Msg::<64>::new();
        m.packed(4, &[3, 270, 86942]);
        assert_eq!(
            m.as_bytes(),
            &[0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]
        );
        let mut m = Msg::<2>::new();
        m.uint(1, 150);
        assert!(m.truncated);
    }
}
