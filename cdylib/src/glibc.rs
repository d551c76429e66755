//! glibc's malloc introspection, answered with pcpalloc's figures:
//! `mallinfo`, `mallinfo2`, `mallopt`, `malloc_info`, `malloc_stats`,
//! `malloc_trim`.
//!
//! Every one runs in little stack — a thread of `PTHREAD_STACK_MIN`, a
//! signal handler on an 8 KiB alternate stack — as glibc's do: `mallinfo`
//! reads counters into a small value, and the reports stream through small
//! fixed buffers from a snapshot in memory mapped for it.

use core::ffi::{c_int, c_void};
use core::fmt::Write as _;

use pcpalloc_core::stats::Summary;

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

fn mallinfo_of(s: &Summary) -> MallInfo2 {
    let page = pcpalloc_core::c::PAGE_SIZE as u64;
    let huge = s.huge_live_bytes as u64;
    let arena = s.managed_pages as u64 * page;
    let uord = s.allocated.saturating_sub(huge);
    let dirty_free = (s.free_pages - s.clean_free_pages.min(s.free_pages)) as u64 * page;
    MallInfo2 {
        arena: arena as usize,
        ordblks: s.free_blocks,
        smblks: 0,
        hblks: s.huge_blocks,
        hblkhd: huge as usize,
        usmblks: s.peak_charged as usize,
        fsmblks: s.binned as usize,
        uordblks: uord as usize,
        fordblks: arena.saturating_sub(uord) as usize,
        keepcost: dirty_free as usize,
    }
}

/// glibc `mallinfo2`: see [`MallInfo2`] for what each field holds. Reads
/// only the counters those fields need (no `mincore`, no `/proc`): a
/// microsecond or so whatever the heap's size.
#[no_mangle]
pub extern "C" fn mallinfo2() -> MallInfo2 {
    mallinfo_of(&pcpalloc_core::c::summary())
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

/// Android's (bionic, scudo) `M_DECAY_TIME`.
pub const M_DECAY_TIME: c_int = -100;
/// Android's `M_PURGE`.
pub const M_PURGE: c_int = -101;
/// Android's `M_PURGE_ALL`.
pub const M_PURGE_ALL: c_int = -104;

/// `mallopt`: 1 when the parameter is one pcpalloc has a counterpart for
/// and the value is taken, 0 when it is ignored — as glibc returns 1 for
/// done and 0 for not. What maps:
///
/// - `M_DECAY_TIME` (Android's, also scudo's): how soon idle memory goes
///   back, as `PCPALLOC_DECAY_MS`: 0 → the shortest tick (10 ms), 1 →
///   the default (1000 ms), -1 → the longest (60000 ms: pcpalloc always
///   gives idle memory back eventually), 10..=60000 → that many
///   milliseconds (scudo's reading); other values are refused (0).
/// - `M_PURGE`, `M_PURGE_ALL` (Android's): give cached and free memory
///   back now, as `malloc_trim(0)`; always 1.
///
/// Ignored (0), with why:
///
/// - `M_MMAP_THRESHOLD`, `M_MMAP_MAX`: blocks above 4 MiB always get a
///   mapping of their own, and there is no limit on how many;
/// - `M_TRIM_THRESHOLD`, `M_TOP_PAD`: memory does not sit at the top of
///   one heap; free memory idle for a tick goes back to the OS whatever
///   its size (tune it with `M_DECAY_TIME` or `PCPALLOC_DECAY_MS`), and the
///   heap grows in 4 MiB blocks;
/// - `M_ARENA_MAX`, `M_ARENA_TEST`: there are no arenas: every thread has
///   a heap of its own over per-CPU page caches (`PCPALLOC_PCP`);
/// - `M_MXFAST`, `M_CHECK_ACTION`, `M_PERTURB` and anything else: no
///   fastbins; a bad free always aborts with a line naming it; no
///   perturbation.
///
/// The rest of pcpalloc's run-time settings are `pcpalloc_set`'s.
#[no_mangle]
pub extern "C" fn mallopt(param: c_int, value: c_int) -> c_int {
    match param {
        M_DECAY_TIME => {
            let ms: u32 = match value {
                -1 => 60_000,
                0 => 10,
                1 => 1000,
                v if v >= 10 => v as u32,
                _ => return 0,
            };
            let mut text = [0u8; 16];
            let mut w = Digits {
                buf: &mut text,
                len: 0,
            };
            let _ = write!(w, "{ms}");
            let len = w.len;
            c_int::from(pcpalloc_core::c::set_bytes(b"PCPALLOC_DECAY_MS", &text[..len]).is_ok())
        }
        M_PURGE | M_PURGE_ALL => {
            pcpalloc_core::trim();
            1
        }
        _ => 0,
    }
}

/// A number's digits on the stack.
struct Digits<'a> {
    buf: &'a mut [u8; 16],
    len: usize,
}

impl core::fmt::Write for Digits<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// glibc `malloc_trim`: gives cached and free memory back; 1 if any was
/// released.
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    c_int::from(pcpalloc_core::trim() > 0)
}

/// glibc `malloc_stats`: the report on stderr, as text.
#[no_mangle]
pub extern "C" fn malloc_stats() {
    pcpalloc_core::c::report_to(|b| {
        // SAFETY: b is readable for b.len() bytes; fd 2 may be closed
        // (then the write fails, harmlessly).
        unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
    });
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
    let mut out = Xml { fp };
    let s = pcpalloc_core::c::summary();
    let _ = write!(
        out,
        "<malloc version=\"pcpalloc-{}\">\n<system type=\"current\" size=\"{}\"/>\n\
         <system type=\"max\" size=\"{}\"/>\n",
        env!("CARGO_PKG_VERSION"),
        s.charged,
        s.peak_charged
    );
    let mut w = Lines::new(|line| {
        if line.first() == Some(&b'#') {
            return; // the summary: the same figures are among the stats
        }
        let (name, value) = name_value(line);
        out.put(b"<stat name=\"");
        out.put_escaped(name);
        out.put(b"\" value=\"");
        out.put_escaped(value);
        out.put(b"\"/>\n");
    });
    let _ = pcpalloc_core::write_report(&mut w);
    w.finish();
    out.put(b"</malloc>\n");
    0
}

/// XML written straight to a `FILE` (which buffers it): no buffer of ours.
struct Xml {
    fp: *mut libc::FILE,
}

impl Xml {
    fn put(&mut self, b: &[u8]) {
        // SAFETY: fp is an open FILE (malloc_info's contract); b is
        // readable.
        unsafe { libc::fwrite(b.as_ptr().cast::<c_void>(), 1, b.len(), self.fp) };
    }

    /// Writes `s` with XML's special characters escaped.
    fn put_escaped(&mut self, mut s: &[u8]) {
        while let Some(i) = s.iter().position(|c| b"&<>\"".contains(c)) {
            self.put(&s[..i]);
            self.put(match s[i] {
                b'&' => b"&amp;",
                b'<' => b"&lt;",
                b'>' => b"&gt;",
                _ => b"&quot;",
            });
            s = &s[i + 1..];
        }
        self.put(s);
    }
}

impl core::fmt::Write for Xml {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.put(s.as_bytes());
        Ok(())
    }
}
