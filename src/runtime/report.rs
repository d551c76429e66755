//! The allocator's counters and invariant checks, from the runtime's
//! parts.

use core::fmt::{self, Write};
use core::sync::atomic::Ordering::Relaxed;

use crate::runtime::settings::SETTINGS;
use crate::slab;
use crate::stats_report::{write_bytes, ChunkWriter, Parts, Stats};
use crate::sys;
use crate::util::{buf::FixedBuf, write_json_string};

use super::process::{HEAPS, HUGE, PAGES};
use super::tick;

/// A snapshot of the allocator's counters, taken without allocating.
pub fn stats() -> Stats {
    Stats::collect(&Parts {
        pages: &PAGES,
        heaps: &HEAPS,
        huge: &HUGE,
        ticks: tick::ticks(),
        background: tick::background_running(),
        reclaim: super::reclaim::counters(),
    })
}

/// Writes the report: a two-line summary (lines starting with `#`), then
/// the version, the process, every setting in force (`NAME value`, as the
/// environment would give it), then the counters (`name value`).
pub fn write_report(w: &mut dyn Write) -> fmt::Result {
    let s = stats();
    let mut program = FixedBuf::<{ PROGRAM_MAX }>::new();
    sys::program_name(&mut program);
    let program = program.as_bytes();
    let pid = process_id();
    write!(w, "# pcpalloc {VERSION} report: pid {pid}, program ")?;
    write_lossy(w, program)?;
    w.write_str("\n# live ")?;
    write_bytes(w, s.bytes.allocated)?;
    w.write_str(", resident ")?;
    write_bytes(w, s.bytes.resident)?;
    w.write_str(", mapped ")?;
    write_bytes(w, s.bytes.mapped)?;
    w.write_str(", peak ")?;
    write_bytes(w, s.bytes.peak_charged)?;
    match s.pageset_hit_rate() {
        Some(r) => writeln!(w, "; pageset hit rate {:.1}%", r * 100.0)?,
        None => writeln!(w, "; pageset hit rate -")?,
    }
    writeln!(w, "pcpalloc_version {VERSION}")?;
    writeln!(w, "pid {pid}")?;
    w.write_str("program ")?;
    write_lossy(w, program)?;
    w.write_str("\n")?;
    super::settings::write_settings(w, &PAGES.knobs())?;
    s.write_text(w)
}

/// Writes the report as one JSON object on one line: version, process,
/// summary (bytes, and the pageset hit rate as a fraction, or null), the
/// settings, then the counters under their text names.
pub fn write_report_json(w: &mut dyn Write) -> fmt::Result {
    let s = stats();
    let mut program = FixedBuf::<{ PROGRAM_MAX }>::new();
    sys::program_name(&mut program);
    write!(
        w,
        "{{\"pcpalloc_version\":\"{VERSION}\",\"pid\":{},\"program\":",
        process_id()
    )?;
    write_json_string(w, program.as_bytes())?;
    let b = &s.bytes;
    write!(
        w,
        ",\"summary\":{{\"live_bytes\":{},\"resident_bytes\":{},\"mapped_bytes\":{},\"peak_bytes\":{},\"pageset_hit_rate\":",
        b.allocated, b.resident, b.mapped, b.peak_charged
    )?;
    match s.pageset_hit_rate() {
        Some(r) => write!(w, "{r:.4}")?,
        None => w.write_str("null")?,
    }
    w.write_str("},\"settings\":{")?;
    super::settings::write_settings_json(w, &PAGES.knobs())?;
    w.write_str("},\"counters\":{")?;
    s.write_json_members(w)?;
    w.write_str("}}\n")
}

/// Longest program path the report keeps.
const PROGRAM_MAX: usize = 512;

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
pub fn check_invariants() -> crate::page_alloc::zone::ZoneWalk {
    PAGES.pagesets.for_each(|ps| {
        ps.check();
    });
    PAGES.zone.check_invariants()
}

/// Every check, including those that only hold while no thread allocates
/// or frees: pages cached in pagesets match their counts, and every slab's
/// objects are accounted for. Returns (slabs, objects in use).
pub fn check_invariants_quiescent() -> (usize, usize) {
    let mut cached = 0;
    PAGES.pagesets.for_each(|ps| cached += ps.check());
    let walk = PAGES.zone.check_invariants();
    assert_eq!(
        walk.pcp, cached,
        "pages on pageset lists disagree with pageset counts"
    );
    slab::check_quiescent(&HEAPS, &PAGES.zone)
}
