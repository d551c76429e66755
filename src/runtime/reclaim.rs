//! Reclaim: what the allocator does before it lets a request fail, as the
//! kernel reclaims before it declares out-of-memory.
//!
//! A request fails when the zone cannot hand out a block (the budget's
//! wall, or the OS refusing to map more) or a huge block cannot be mapped.
//! Before that is final, what is cached is given back in three stages, as
//! the kernel's direct reclaim escalates (and, like it, aims at what the
//! request needs, not at everything); the request is retried after each:
//!
//! 1. **Local** (a zone request only): the calling heap collects its remote
//!    frees and gives back its empty slabs; every pageset is drained to the
//!    zone (`drain_all_pages`), so free pages merge. No system call.
//! 2. **What the request needs**, and two MAX_ORDER blocks more, counted
//!    as what the budget gets back: cached huge blocks are unmapped; if
//!    that is not enough, the pagesets are drained so free pages merge,
//!    whole free MAX_ORDER blocks go offline, and resident free memory is
//!    released with madvise, largest blocks first. Skipped for a request
//!    larger than the limit itself.
//! 3. **Everything**: every owner is asked to collect its remote frees and
//!    give back its empty slabs and cached blocks on its next slow path;
//!    the heaps of exited threads are swept; every heap's parked slabs go
//!    back; every pageset is drained; the huge-block cache is emptied; the
//!    zone gives all its free memory back to the OS (whole blocks offline,
//!    the rest released with madvise) and so to the budget.
//!
//! Only if the retry after stage 3 fails does the caller see NULL and
//! ENOMEM. Each step's yield is counted (the `reclaim_*` counters of the
//! report). Giving everything back on every failure made a program that
//! lives near its limit pay for it on every miss: 4 threads replacing
//! blocks of 8 B – 8 MiB under a 512 MiB limit ran 6.4x slower than
//! without one (`tests/c/budget_replace.c`).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::geometry::MAX_ORDER_BYTES;
use crate::heap::Heap;
use crate::page_alloc::zone::Shrink;
use crate::stats_report::ReclaimCounters;

use super::process::{pages_of, HEAPS, HUGE, PAGES};

/// Bumped by every reclaim: a heap whose owner sees it change collects
/// everything it can on its next slow path (see `Owned::alloc_slow`).
static RECLAIM_EPOCH: AtomicU32 = AtomicU32::new(0);

/// The zone's tick epoch at the last reclaim, plus one (0: never).
static RECLAIMED_AT: AtomicU32 = AtomicU32::new(0);

/// Whether a reclaim ran in this tick or the one before: the budget is
/// tight, memory given back comes back soon, and a huge block advised for
/// huge pages would fault its sparse touches in 2 MiB at a time (4 threads
/// replacing 8 B – 8 MiB blocks under a 512 MiB limit spent 59% of their
/// time zeroing huge pages).
pub(crate) fn under_pressure() -> bool {
    let at = RECLAIMED_AT.load(Relaxed);
    at != 0 && PAGES.zone.epoch().wrapping_sub(at.wrapping_sub(1)) < 2
}

struct Counters {
    runs: AtomicU64,
    full_runs: AtomicU64,
    retry_ok: AtomicU64,
    slabs: AtomicU64,
    pcp_pages: AtomicU64,
    huge_bytes: AtomicU64,
    offline_bytes: AtomicU64,
    released_bytes: AtomicU64,
}

static COUNTERS: Counters = Counters {
    runs: AtomicU64::new(0),
    full_runs: AtomicU64::new(0),
    retry_ok: AtomicU64::new(0),
    slabs: AtomicU64::new(0),
    pcp_pages: AtomicU64::new(0),
    huge_bytes: AtomicU64::new(0),
    offline_bytes: AtomicU64::new(0),
    released_bytes: AtomicU64::new(0),
};

/// The reclaim epoch heaps compare against.
#[inline]
pub(crate) fn epoch() -> u32 {
    RECLAIM_EPOCH.load(Relaxed)
}

/// The counters so far.
pub(crate) fn counters() -> ReclaimCounters {
    let c = &COUNTERS;
    let [memcg_limit, memcg_usage, memcg_reads, memcg_give_backs] =
        super::memcg::counters(&PAGES.zone.budget);
    ReclaimCounters {
        memcg_limit,
        memcg_usage,
        memcg_reads,
        memcg_give_backs,
        runs: c.runs.load(Relaxed),
        full_runs: c.full_runs.load(Relaxed),
        retry_ok: c.retry_ok.load(Relaxed),
        slabs: c.slabs.load(Relaxed),
        pcp_pages: c.pcp_pages.load(Relaxed),
        huge_bytes: c.huge_bytes.load(Relaxed),
        offline_bytes: c.offline_bytes.load(Relaxed),
        released_bytes: c.released_bytes.load(Relaxed),
    }
}

/// How far a reclaim goes (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stage {
    /// The calling heap and the pagesets: no system call.
    Local,
    /// Cached huge blocks, whole free blocks and resident free memory
    /// back to the OS, until `need` bytes (and a margin) went back.
    Need(usize),
    /// Everything cached, everywhere.
    All,
}

/// Gives back what `stage` covers (see the module docs). `h` is the
/// calling thread's heap, or null. Call with no lock of the allocator held.
pub(crate) fn reclaim(h: *mut Heap, stage: Stage) {
    let c = &COUNTERS;
    match stage {
        Stage::Local => {
            c.slabs.fetch_add(collect_own(h) as u64, Relaxed);
            c.pcp_pages.fetch_add(PAGES.drain_all() as u64, Relaxed);
        }
        Stage::Need(need) => {
            // Room for the request and a margin of two whole blocks, counted
            // as what the budget got back (an offline block that was
            // already released gives back only its descriptors): cached
            // huge blocks are unmapped; then free pages merge (pagesets
            // drained), whole free blocks go offline, and resident free
            // memory is released, largest first — each step only while
            // the budget has not got enough back.
            let budget = &PAGES.zone.budget;
            let want = need.saturating_add(2 * MAX_ORDER_BYTES);
            let start = budget.used();
            let short = || want.saturating_sub(start.saturating_sub(budget.used()));
            c.huge_bytes
                .fetch_add(HUGE.trim_some(budget, want) as u64, Relaxed);
            if short() == 0 {
                return;
            }
            c.pcp_pages.fetch_add(PAGES.drain_all() as u64, Relaxed);
            while short() > 0 {
                let blocks = short().div_ceil(MAX_ORDER_BYTES);
                let offline = PAGES.zone.shrink(Shrink::All, blocks);
                c.offline_bytes.fetch_add(offline as u64, Relaxed);
                if offline == 0 {
                    break;
                }
            }
            while short() > 0 {
                let released = PAGES.zone.release_free(0, 0, short());
                c.released_bytes.fetch_add(released as u64, Relaxed);
                if released == 0 {
                    break;
                }
            }
        }
        Stage::All => {
            c.full_runs.fetch_add(1, Relaxed);
            RECLAIM_EPOCH.fetch_add(1, Relaxed);
            let everywhere = PAGES.through(core::ptr::null(), false);
            let slabs = collect_own(h)
                + HEAPS.collect_abandoned(&everywhere)
                + HEAPS.collect_emptied_everywhere(h, &everywhere)
                + HEAPS.release_parked_everywhere(&everywhere);
            c.slabs.fetch_add(slabs as u64, Relaxed);
            HEAPS.drain_all_block_bins(&everywhere);
            c.pcp_pages.fetch_add(PAGES.drain_all() as u64, Relaxed);
            let budget = &PAGES.zone.budget;
            c.huge_bytes.fetch_add(HUGE.trim(budget) as u64, Relaxed);
            c.offline_bytes
                .fetch_add(PAGES.zone.shrink(Shrink::All, usize::MAX) as u64, Relaxed);
            c.released_bytes
                .fetch_add(PAGES.zone.release_idle(0, 0) as u64, Relaxed);
        }
    }
}

/// The calling heap collects its remote frees and gives back its empty
/// slabs and cached blocks. Returns the slabs given back.
fn collect_own(h: *mut Heap) -> usize {
    // SAFETY: h is the calling thread's heap (or null or the empty heap,
    // left alone).
    unsafe {
        if h.is_null() || (*h).is_empty_heap() {
            return 0;
        }
        let pages = pages_of(&*h);
        (*h).owned().collect(&pages)
    }
}

/// `alloc` once; if it fails, reclaim in stages and retry after each.
/// `h` is the calling thread's heap, or null; `need` the bytes the request
/// takes from the zone or the budget; `zone` whether it is served by the
/// zone (stage 1 helps only such a request).
#[inline]
pub(crate) fn or_reclaim(
    h: *mut Heap,
    need: usize,
    zone: bool,
    mut alloc: impl FnMut() -> *mut u8,
) -> *mut u8 {
    let p = alloc();
    if !p.is_null() {
        super::tick::after_growth();
        return p;
    }
    reclaim_and_retry(h, need, zone, &mut alloc)
}

#[cold]
#[inline(never)]
fn reclaim_and_retry(
    h: *mut Heap,
    need: usize,
    zone: bool,
    alloc: &mut dyn FnMut() -> *mut u8,
) -> *mut u8 {
    COUNTERS.runs.fetch_add(1, Relaxed);
    RECLAIMED_AT.store(PAGES.zone.epoch().wrapping_add(1), Relaxed);
    let stages = [Stage::Local, Stage::Need(need), Stage::All];
    // A request past the limit itself can never fit: no use giving back
    // for it twice.
    let hopeless = need > PAGES.zone.budget.limit();
    for stage in stages.into_iter().skip(usize::from(!zone)) {
        if hopeless && matches!(stage, Stage::Need(_)) {
            continue;
        }
        reclaim(h, stage);
        let p = alloc();
        if !p.is_null() {
            COUNTERS.retry_ok.fetch_add(1, Relaxed);
            return p;
        }
    }
    core::ptr::null_mut()
}
