//! glibc's malloc introspection, answered with pcpalloc's figures:
//! `mallinfo`, `mallinfo2`, `mallopt`, `malloc_info`, `malloc_stats`,
//! `malloc_trim`.

use core::ffi::{c_int, c_void};
use core::fmt::Write as _;

use pcpalloc_core::stats::Stats;

use crate::lines::{name_value, Lines};

/// glibc's `struct mallinfo2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MallInfo2 {
    /// Bytes of the zone's online memory (huge blocks excluded).
    pub arena: usize,
    /// Free blocks in the zone's buddy lists.
    pub ordblks: usize,
    /// Always 0 (glibc: fastbin blocks).
    pub smblks: usize,
    /// Live huge blocks (each its own mapping, as glibc's mmapped chunks).
    pub hblks: usize,
    /// Usable bytes of live huge blocks.
    pub hblkhd: usize,
    /// The most bytes ever charged to the budget at once.
    pub usmblks: usize,
    /// Bytes of free small objects waiting on thread bins (glibc: fastbin
    /// bytes).
    pub fsmblks: usize,
    /// Bytes allocated, huge blocks excluded (they are in `hblkhd`, as
    /// glibc counts mmapped chunks there).
    pub uordblks: usize,
    /// `arena - uordblks`: free memory in the zone, pagesets, slabs and
    /// bins.
    pub fordblks: usize,
    /// Free zone memory `malloc_trim` could give back to the OS.
    pub keepcost: usize,
}

/// glibc's old `struct mallinfo` (int fields; figures saturate).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MallInfo {
    arena: c_int,
    ordblks: c_int,
    smblks: c_int,
    hblks: c_int,
    hblkhd: c_int,
    usmblks: c_int,
    fsmblks: c_int,
    uordblks: c_int,
    fordblks: c_int,
    keepcost: c_int,
}

fn mallinfo_of(s: &Stats) -> MallInfo2 {
    let page = pcpalloc_core::internals::PAGE_SIZE as u64;
    let b = &s.bytes;
    let huge = s.huge.live_bytes as u64;
    let arena = s.zone.managed as u64 * page;
    let uord = b.allocated.saturating_sub(huge);
    let dirty_free = (s.zone.free - s.zone.clean_free.min(s.zone.free)) as u64 * page;
    MallInfo2 {
        arena: arena as usize,
        ordblks: s.zone.nr_free.iter().sum(),
        smblks: 0,
        hblks: s.huge.live,
        hblkhd: huge as usize,
        usmblks: b.peak_charged as usize,
        fsmblks: b.binned as usize,
        uordblks: uord as usize,
        fordblks: arena.saturating_sub(uord) as usize,
        keepcost: dirty_free as usize,
    }
}

/// glibc `mallinfo2`: see [`MallInfo2`] for what each field holds.
#[no_mangle]
pub extern "C" fn mallinfo2() -> MallInfo2 {
    mallinfo_of(&pcpalloc_core::stats())
}

/// glibc's deprecated `mallinfo`: [`mallinfo2`] in ints.
#[no_mangle]
pub extern "C" fn mallinfo() -> MallInfo {
    let m = mallinfo2();
    let c = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    MallInfo {
        arena: c(m.arena),
        ordblks: c(m.ordblks),
        smblks: c(m.smblks),
        hblks: c(m.hblks),
        hblkhd: c(m.hblkhd),
        usmblks: c(m.usmblks),
        fsmblks: c(m.fsmblks),
        uordblks: c(m.uordblks),
        fordblks: c(m.fordblks),
        keepcost: c(m.keepcost),
    }
}

/// glibc `mallopt`: returns 0 ("not done") for every parameter. None of
/// glibc's (M_MXFAST, M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD,
/// M_MMAP_MAX, M_ARENA_MAX, ...) has a counterpart here: pcpalloc is
/// tuned by its `PCPALLOC_*` variables and tunes its caches itself.
#[no_mangle]
pub extern "C" fn mallopt(_param: c_int, _value: c_int) -> c_int {
    0
}

/// glibc `malloc_trim`: gives cached and free memory back; 1 if any was
/// released.
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    c_int::from(pcpalloc_core::trim() > 0)
}

/// glibc `malloc_stats`: the report on stderr.
#[no_mangle]
pub extern "C" fn malloc_stats() {
    pcpalloc_core::internals::print_stats(2);
}

/// glibc `malloc_info`: the report as XML on `fp` — `<system>` totals as
/// glibc's, then every report line as `<stat name=".." value=".."/>`.
/// `options` must be 0 (else -1 with EINVAL, as glibc).
///
/// # Safety
/// `fp` is an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    if options != 0 || fp.is_null() {
        // SAFETY: errno's location is valid for the calling thread.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    let put = |b: &[u8]| {
        // SAFETY: fp is an open FILE (contract); b is readable.
        unsafe { libc::fwrite(b.as_ptr().cast::<c_void>(), 1, b.len(), fp) };
    };
    let s = pcpalloc_core::stats();
    let mut head = Buf::new();
    let _ = write!(
        head,
        "<malloc version=\"pcpalloc-{}\">\n<system type=\"current\" size=\"{}\"/>\n\
         <system type=\"max\" size=\"{}\"/>\n",
        env!("CARGO_PKG_VERSION"),
        s.bytes.charged,
        s.bytes.peak_charged
    );
    put(head.bytes());
    let mut w = Lines::new(|line| {
        let (name, value) = name_value(line);
        let mut out = Buf::new();
        out.push(b"<stat name=\"");
        out.push_escaped(name);
        out.push(b"\" value=\"");
        out.push_escaped(value);
        out.push(b"\"/>\n");
        put(out.bytes());
    });
    let _ = pcpalloc_core::write_report(&mut w);
    w.finish();
    put(b"</malloc>\n");
    0
}

/// A line of XML on the stack.
struct Buf {
    b: [u8; 1200],
    len: usize,
}

impl Buf {
    fn new() -> Buf {
        Buf {
            b: [0; 1200],
            len: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.b[..self.len]
    }

    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.b.len() - self.len);
        self.b[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    /// Pushes `s` with XML's special characters escaped.
    fn push_escaped(&mut self, s: &[u8]) {
        for &c in s {
            match c {
                b'&' => self.push(b"&amp;"),
                b'<' => self.push(b"&lt;"),
                b'>' => self.push(b"&gt;"),
                b'"' => self.push(b"&quot;"),
                _ => self.push(&[c]),
            }
        }
    }
}

impl core::fmt::Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}
