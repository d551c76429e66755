//! The allocator's counters and invariant checks, from the runtime's
//! parts.

use core::fmt::{self, Write};

use crate::slab;
use crate::stats_report::{ChunkWriter, Parts, Stats};
use crate::sys;

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

/// Writes the report: the version, every setting in force (`NAME value`,
/// as the environment would give it), then the counters (`name value`).
pub fn write_report(w: &mut dyn Write) -> fmt::Result {
    writeln!(w, "pcpalloc_version {}", env!("CARGO_PKG_VERSION"))?;
    super::settings::write_settings(w, &PAGES.knobs())?;
    stats().write_text(w)
}

/// Writes the report in chunks to `sink`, through a stack buffer.
pub fn report_to(sink: impl FnMut(&[u8])) {
    let mut w = ChunkWriter::new(sink);
    let _ = write_report(&mut w);
    w.finish();
}

/// Prints the report to `fd`.
pub fn print_stats(fd: i32) {
    report_to(|b| sys::write_fd(fd, b));
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
