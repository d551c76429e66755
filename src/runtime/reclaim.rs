//! Reclaim: what the allocator does before it lets a request fail, as the
//! kernel reclaims before it declares out-of-memory.
//!
//! A request fails when the zone cannot hand out a block (the budget's
//! wall, or the OS refusing to map more) or a huge block cannot be mapped.
//! Before that is final, everything cached is given back, in this order,
//! each step feeding the next:
//!
//! 1. the thread heaps: every owner is asked to collect its remote frees
//!    and give back its empty slabs and cached blocks on its next slow
//!    path; the calling thread does so now; the heaps of exited threads
//!    are swept; every heap's parked slabs go back;
//! 2. every pageset is drained to the zone (`drain_all_pages`), so free
//!    pages merge;
//! 3. the huge-block cache is emptied;
//! 4. the zone gives its free memory back to the OS — whole free MAX_ORDER
//!    blocks go offline, the rest is released with madvise — and so to the
//!    budget.
//!
//! Then the request is retried once; only if it fails again does the
//! caller see NULL and ENOMEM. Each step's yield is counted (the
//! `reclaim_*` counters of the report).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::page_alloc::zone::Shrink;
use crate::slab::Heap;
use crate::stats_report::ReclaimCounters;

use super::process::{pages_of, HEAPS, HUGE, PAGES};

/// Bumped by every reclaim: a heap whose owner sees it change collects
/// everything it can on its next slow path (see `Owned::alloc_slow`).
static RECLAIM_EPOCH: AtomicU32 = AtomicU32::new(0);

struct Counters {
    runs: AtomicU64,
    retry_ok: AtomicU64,
    slabs: AtomicU64,
    pcp_pages: AtomicU64,
    huge_bytes: AtomicU64,
    offline_bytes: AtomicU64,
    released_bytes: AtomicU64,
}

static COUNTERS: Counters = Counters {
    runs: AtomicU64::new(0),
    retry_ok: AtomicU64::new(0),
    slabs: AtomicU64::new(0),
    pcp_pages: AtomicU64::new(0),
    huge_bytes: AtomicU64::new(0),
    offline_bytes: AtomicU64::new(0),
    released_bytes: AtomicU64::new(0),
};

/// The reclaim epoch heaps compare against.
#[inline]
pub fn epoch() -> u32 {
    RECLAIM_EPOCH.load(Relaxed)
}

/// The counters so far.
pub fn counters() -> ReclaimCounters {
    let c = &COUNTERS;
    ReclaimCounters {
        runs: c.runs.load(Relaxed),
        retry_ok: c.retry_ok.load(Relaxed),
        slabs: c.slabs.load(Relaxed),
        pcp_pages: c.pcp_pages.load(Relaxed),
        huge_bytes: c.huge_bytes.load(Relaxed),
        offline_bytes: c.offline_bytes.load(Relaxed),
        released_bytes: c.released_bytes.load(Relaxed),
    }
}

/// Gives back everything cached (see the module docs). `h` is the calling
/// thread's heap, or null. Call with no lock of the allocator held.
pub fn reclaim(h: *mut Heap) {
    let c = &COUNTERS;
    c.runs.fetch_add(1, Relaxed);
    RECLAIM_EPOCH.fetch_add(1, Relaxed);
    let everywhere = PAGES.through(core::ptr::null(), false);
    let mut slabs = 0;
    // SAFETY: h is the calling thread's heap (or null or the empty heap,
    // left alone).
    unsafe {
        if !h.is_null() && !(*h).is_empty_heap() {
            let pages = pages_of(&*h);
            slabs += (*h).owned().collect(&pages);
        }
    }
    slabs += HEAPS.collect_abandoned(&everywhere);
    slabs += HEAPS.release_parked_everywhere(&everywhere);
    c.slabs.fetch_add(slabs as u64, Relaxed);
    c.pcp_pages.fetch_add(PAGES.drain_all() as u64, Relaxed);
    let budget = &PAGES.zone.budget;
    c.huge_bytes.fetch_add(HUGE.trim(budget) as u64, Relaxed);
    c.offline_bytes
        .fetch_add(PAGES.zone.shrink(Shrink::All, usize::MAX) as u64, Relaxed);
    c.released_bytes
        .fetch_add(PAGES.zone.release_idle(0, 0) as u64, Relaxed);
}

/// `alloc` once; if it fails, reclaim and try once more. `h` is the
/// calling thread's heap, or null.
#[inline]
pub fn or_reclaim(h: *mut Heap, mut alloc: impl FnMut() -> *mut u8) -> *mut u8 {
    let p = alloc();
    if !p.is_null() {
        return p;
    }
    reclaim_and_retry(h, &mut alloc)
}

#[cold]
#[inline(never)]
fn reclaim_and_retry(h: *mut Heap, alloc: &mut dyn FnMut() -> *mut u8) -> *mut u8 {
    reclaim(h);
    let p = alloc();
    if !p.is_null() {
        COUNTERS.retry_ok.fetch_add(1, Relaxed);
    }
    p
}
