//! The allocator's counters and invariant checks, from the runtime's
//! parts.

use core::fmt::{self, Write};
use core::ptr::NonNull;
use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::PAGE_SIZE;
use crate::heap;
use crate::settings::SETTINGS;
use crate::stats_report::{Parts, Stats, Summary};
use crate::sys;
use crate::util::text::{write_bytes, write_ratio, ChunkWriter};
use crate::util::write_json_string;

use super::process::{HEAPS, HUGE, PAGES};
use super::tick;

fn parts() -> Parts<'static> {
    Parts {
        pages: &PAGES,
        heaps: &HEAPS,
        huge: &HUGE,
        ticks: tick::ticks(),
        background: tick::background_running(),
        reclaim: super::reclaim::counters(),
    }
}

/// A snapshot of the allocator's counters, taken without allocating, on
/// the caller's stack (about 20 KiB: the Rust API's, for callers with
/// stack to spare; the report builds its own in memory mapped for it).
pub fn stats() -> Stats {
    Stats::collect(&parts())
}

/// The figures that cost only counter reads (see [`Summary`]): what
/// `mallinfo` answers from, in microseconds.
pub fn summary() -> Summary {
    Summary::collect(&parts())
}

/// A snapshot built in place in memory mapped for it, and unmapped when
/// dropped. [`Stats`] is about 20 KiB: more than a thread of
/// `PTHREAD_STACK_MIN` (16 KiB, less its TLS) or a signal handler's 8 KiB
/// alternate stack has, and every C entry point that reports —
/// `malloc_stats`, `malloc_info`, `pcpalloc_stat`, `pcpalloc_report`, the
/// report at exit — must run there. A mapping of its own per report, not
/// a static under a lock: a signal handler that reports while the code it
/// interrupted was reporting gets its own too, instead of waiting forever
/// on a lock its own thread holds.
struct MappedStats {
    s: NonNull<Stats>,
}

/// Bytes mapped for a [`MappedStats`].
const MAPPED_LEN: usize = core::mem::size_of::<Stats>().next_multiple_of(PAGE_SIZE);

impl MappedStats {
    /// Takes a snapshot; `None` if the OS refuses the memory.
    fn take() -> Option<MappedStats> {
        let p = NonNull::new(sys::map(MAPPED_LEN)?.cast::<Stats>())?;
        // SAFETY: a fresh private mapping of MAPPED_LEN zero bytes, aligned
        // to a page, ours alone: all-zero bytes are a valid Stats (every
        // field is an integer or a bool: see its docs).
        let s = unsafe { &mut *p.as_ptr() };
        s.fill(&parts());
        Some(MappedStats { s: p })
    }
}

impl core::ops::Deref for MappedStats {
    type Target = Stats;

    fn deref(&self) -> &Stats {
        // SAFETY: the mapping holds a valid Stats until drop.
        unsafe { self.s.as_ref() }
    }
}

impl Drop for MappedStats {
    fn drop(&mut self) {
        sys::unmap(self.s.as_ptr().cast(), MAPPED_LEN);
    }
}

/// Writes the report: a two-line summary (lines starting with `#`), then
/// the version, the process, every setting in force (`NAME value`, as the
/// environment would give it), then the counters (`name value`). The
/// snapshot is taken in memory of its own (see [`MappedStats`]); fails
/// with nothing written if the OS refuses that memory.
pub fn write_report(w: &mut dyn Write) -> fmt::Result {
    let s = MappedStats::take().ok_or(fmt::Error)?;
    let pid = process_id();
    write!(w, "# pcpalloc {VERSION} report: pid {pid}, program ")?;
    sys::program_name(|p| write_lossy(w, p))?;
    w.write_str("\n# live ")?;
    write_bytes(w, s.bytes.allocated)?;
    w.write_str(", resident ")?;
    write_bytes(w, s.bytes.resident)?;
    w.write_str(", mapped ")?;
    write_bytes(w, s.bytes.mapped)?;
    w.write_str(", peak ")?;
    write_bytes(w, s.bytes.peak_charged)?;
    w.write_str("; pageset hit rate ")?;
    match s.pageset_hits() {
        Some((hits, served)) => {
            write_ratio(w, hits.saturating_mul(100), served, 1)?;
            w.write_str("%\n")?;
        }
        None => w.write_str("-\n")?,
    }
    writeln!(w, "pcpalloc_version {VERSION}")?;
    writeln!(w, "pid {pid}")?;
    w.write_str("program ")?;
    sys::program_name(|p| write_lossy(w, p))?;
    w.write_str("\n")?;
    crate::settings::write_settings(w, &PAGES.knobs())?;
    write_pcp_entry(w, &s, false)?;
    s.write_text(w)
}

/// Writes the report as one JSON object on one line: version, process,
/// summary (bytes, and the pageset hit rate as a fraction, or null), the
/// settings, then the counters under their text names.
pub fn write_report_json(w: &mut dyn Write) -> fmt::Result {
    let s = MappedStats::take().ok_or(fmt::Error)?;
    write!(
        w,
        "{{\"pcpalloc_version\":\"{VERSION}\",\"pid\":{},\"program\":",
        process_id()
    )?;
    sys::program_name(|p| write_json_string(w, p))?;
    let b = &s.bytes;
    write!(
        w,
        ",\"summary\":{{\"live_bytes\":{},\"resident_bytes\":{},\"mapped_bytes\":{},\"peak_bytes\":{},\"pageset_hit_rate\":",
        b.allocated, b.resident, b.mapped, b.peak_charged
    )?;
    match s.pageset_hits() {
        Some((hits, served)) => write_ratio(w, hits, served, 4)?,
        None => w.write_str("null")?,
    }
    write_pcp_entry(w, &s, true)?;
    w.write_str("},\"settings\":{")?;
    crate::settings::write_settings_json(w, &PAGES.knobs())?;
    w.write_str("},\"counters\":{")?;
    s.write_json_members(w)?;
    w.write_str("}}\n")
}

/// How threads enter their CPU's pageset, and by which index: `pcp_entry
/// rseq-glibc` and `pcp_index cpu` lines (or JSON members of the summary).
fn write_pcp_entry(w: &mut dyn Write, s: &Stats, json: bool) -> fmt::Result {
    let entry = match s.pcp_entry {
        1 => "rseq-glibc",
        2 => "rseq-own",
        _ => "getcpu",
    };
    let index = match (s.pcp_entry, s.pcp_index_mm_cid) {
        (0, _) => "cpu",
        (_, true) => "mm_cid",
        _ => "cpu",
    };
    if json {
        write!(w, ",\"pcp_entry\":\"{entry}\",\"pcp_index\":\"{index}\"")
    } else {
        writeln!(w, "pcp_entry {entry}\npcp_index {index}")
    }
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn process_id() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Writes `s`, with bytes that are not UTF-8 as U+FFFD.
fn write_lossy(w: &mut dyn Write, s: &[u8]) -> fmt::Result {
    for chunk in s.utf8_chunks() {
        w.write_str(chunk.valid())?;
        if !chunk.invalid().is_empty() {
            w.write_str("\u{fffd}")?;
        }
    }
    Ok(())
}

/// Writes the report in chunks to `sink`, through a stack buffer.
pub fn report_to(sink: impl FnMut(&[u8])) {
    let mut w = ChunkWriter::new(sink);
    let _ = write_report(&mut w);
    w.finish();
}

/// Writes the JSON report in chunks to `sink`, through a stack buffer.
pub fn report_json_to(sink: impl FnMut(&[u8])) {
    let mut w = ChunkWriter::new(sink);
    let _ = write_report_json(&mut w);
    w.finish();
}

/// Prints the report to `fd`: as JSON when `PCPALLOC_STATS=json`.
pub fn print_stats(fd: i32) {
    if SETTINGS.stats_json.load(Relaxed) {
        report_json_to(|b| sys::write_fd(fd, b));
    } else {
        report_to(|b| sys::write_fd(fd, b));
    }
}

/// Every invariant check that holds at any moment: the zone's free lists
/// and descriptors, and every pageset's lists (each under its lock).
/// Panics on a broken invariant; returns the zone walk.
// Called by the tests, through `internals`.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn check_invariants() -> crate::page_alloc::zone::ZoneWalk {
    PAGES.pagesets.for_each(|ps| {
        ps.check();
    });
    PAGES.pagesets.check_depot();
    PAGES.zone.check_invariants()
}

/// Every check, including those that only hold while no thread allocates
/// or frees: pages cached in pagesets match their counts, and every slab's
/// objects are accounted for. Returns (slabs, objects in use).
// Called by the tests, through `internals`.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn check_invariants_quiescent() -> (usize, usize) {
    let mut cached = PAGES.pagesets.check_depot();
    PAGES.pagesets.for_each(|ps| cached += ps.check());
    let walk = PAGES.zone.check_invariants();
    assert_eq!(
        walk.pcp, cached,
        "pages on pageset lists disagree with pageset counts"
    );
    heap::check_quiescent(&HEAPS, &PAGES.zone)
}
