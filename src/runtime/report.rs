//! The allocator's counters and invariant checks, from the runtime's
//! parts.

use crate::slab;
use crate::stats_report::{self as stats, Parts, Stats};

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
    })
}

/// Prints the report to `fd`.
pub fn print_stats(fd: i32) {
    stats::print_to_fd(&stats(), fd);
}

/// Every invariant check that holds at any moment: the zone's free lists
/// and descriptors, and every pageset's lists (each under its lock).
/// Panics on a broken invariant; returns the zone walk.
pub fn check_invariants() -> crate::zone::ZoneWalk {
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
