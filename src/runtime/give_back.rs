//! What a free gives back to the OS at once, so that idle memory goes back
//! with no thread.
//!
//! pcpalloc starts no thread unless asked (`PCPALLOC_BACKGROUND=1`): the
//! maintenance tick runs from the program's own calls into the allocator
//! when it is due (`tick.rs`). A program that frees a burst and then only
//! sleeps, or waits on a socket, makes no further call: what a tick would
//! give back a tick later has to go when it is freed. So every call that
//! leaves memory where only a tick would give it back — a large block into
//! the zone, a huge block into its cache, an emptied slab, a thread's exit
//! — compares what waits with what may: the zone's charged free pages with
//! its `keep`, the cached huge blocks with theirs (a few loads). Past a
//! `keep` and a step, it gives back what waits beyond it there and then:
//! cached huge blocks are unmapped; the zone's free pages are first
//! brought to what is resident (mincore: a block handed out whole and
//! touched in part waits as what was touched), then released with
//! madvise, largest and coldest first. glibc's free() does the same in its
//! way: it trims the top of its heap once more than `M_TRIM_THRESHOLD` is
//! free there, and unmaps a mapped chunk at once.
//!
//! How much may wait is tuned on refaults, as a pageset's `high` is on
//! refills (seed 000): what a give-back released that the program then
//! charges again before the next one — a thread pool's next wave, a loop
//! that frees and allocates its buffers — grows the `keep` by as much, up
//! to a cap: the zone's dirty limit (at least [`KEEP_MAX`]), and for huge
//! blocks what they took at their recent peak (at least
//! [`HUGE_KEEP_MAX`]) — the memory of the use's recent peak, which a
//! producer and a consumer use again at the next high; at a thread's
//! exit, where a program's work winds down, only the ratio of the use of
//! the instant; under a memory cgroup's limit, at most half the headroom
//! left (`memcg.rs`). Each tick takes an eighth off, down to [`KEEP_MIN`]
//! and 0. jemalloc's decay and mimalloc's purge delay keep what is reused
//! and let the rest go the same way, but purge only from later calls.
//! While the zone's `keep` is at its least — nothing given back was needed
//! again — a give-back also takes what the tick would from the freeing
//! thread's caches (as at a tick it sees), the other threads' parked slabs
//! and large bins, the exited threads' heaps and the pagesets (at a
//! thread's exit, what the pagesets hold counts as waiting too), and takes
//! whole released blocks offline. So a program that frees what it had and
//! stops keeps at most `KEEP_MIN` and a step waiting; one that stops right
//! after churning, at most the `keep`s it reached and a step.
//!
//! At a thread's exit a cache of a thread pool's next wave counts as
//! waiting too, against the zone's `keep`: the pagesets' large lists, by
//! what their blocks hold resident (measured with mincore,
//! `page_alloc/pcp/class_lists_resident.rs`). The exiting thread measures
//! the blocks freed since the lists last looked before it decides
//! ([`measure_at_exit`]), without the tick lock, so that exits measure
//! side by side and only those that leave more than the `keep` and a step
//! resident give back: a block handed out whole counts for all its pages
//! until measured, and a storm's blocks of up to 1 MiB written in their
//! first 16 KiB made every exit's give-back due (3,500 give-backs a storm
//! of 5,000 threads, each measuring under the tick lock what the exits
//! before it left; 2,100 now). It is kept first — what it holds
//! is what the next wave writes again — and the zone keeps what is left;
//! past the `keep` the cached blocks' pages past their first ones go back
//! before whole blocks do; the zone's free pages go back 4 KiB at a time,
//! as the lists' blocks are a cache and do not make the heap dense
//! (`zone/thp.rs`). The end of a storm of short threads looks like the
//! end of each of its waves, so every wave's end leaves at most the
//! `keep` and a step — the last exit's give-back too, which another's
//! under way may not skip (`tick.rs` runs it when that one is done).
//!
//! With the background thread running, the tick gives memory back a tick
//! after it went idle, and nothing here runs but what the memory cgroup's
//! limit calls for (`memcg.rs`).

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::geometry::PAGE_SIZE;
use crate::sync::ForkGate;
use crate::sys;

use crate::page_alloc::zone::Shrink;

use super::process::{pages_of, HEAPS, HUGE, PAGES};
use super::tls;

/// The least `keep` of the zone: what may wait there after a burst that
/// was not reused.
pub(crate) const KEEP_MIN: usize = 2 << 20;
/// The most `keep` of the zone while the program uses little (the dirty
/// limit's floor): what may wait there after a burst that was reused.
pub(crate) const KEEP_MAX: usize = 8 << 20;
/// The most `keep` of the huge-block cache while the program's huge
/// blocks are few (glibc's largest trim threshold). Its least is 0: a
/// huge block freed and not reused is unmapped at once, as glibc unmaps a
/// mapped chunk.
pub(crate) const HUGE_KEEP_MAX: usize = 64 << 20;

/// What may wait in the zone, and in the huge-block cache (see the module
/// docs).
static KEEP: AtomicUsize = AtomicUsize::new(KEEP_MIN);
static HUGE_KEEP: AtomicUsize = AtomicUsize::new(0);
/// What the last give-back released from the zone, and unmapped.
static GAVE: AtomicUsize = AtomicUsize::new(0);
static GAVE_HUGE: AtomicUsize = AtomicUsize::new(0);
/// The zone's charged bytes and the huge blocks' bytes right after it.
static ZONE_AFTER: AtomicUsize = AtomicUsize::new(0);
static HUGE_AFTER: AtomicUsize = AtomicUsize::new(0);
/// The most bytes of huge blocks, in use and cached, seen at a give-back
/// in this tick, and in the last one.
static HUGE_PEAK: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];

/// Free pages of the zone still charged: resident, or may be (a racy
/// read of the zone's mirror).
#[inline]
fn zone_waiting() -> usize {
    PAGES.zone.dirty_free_pages() * PAGE_SIZE
}

/// Memory waiting for a tick that two loads can tell: the zone's free
/// pages still charged and the cached huge blocks. Pages on pagesets are
/// left out (adding them up takes every pageset's lock); so are the
/// heaps' caches.
#[inline]
pub(crate) fn waiting_bytes() -> usize {
    zone_waiting() + HUGE.cached_bytes()
}

/// What a thread's exit leaves waiting besides: what the pagesets' large
/// lists may hold resident (their mirrors) — a thread pool's cache for its
/// next wave.
#[inline]
fn exit_waiting() -> usize {
    PAGES.pagesets.large_waiting() * PAGE_SIZE
}

/// How far past a `keep` memory may wait before a free gives it back: one
/// give-back per eighth of `keep` (at least 1 MiB) freed, not one per
/// free.
#[inline]
fn step(keep: usize) -> usize {
    (keep / 8).max(1 << 20)
}

/// The zone's step past its `keep`: [`step`], doubled for each give-back
/// in a row that released less than a quarter of what waited past the
/// `keep` ([`STEP_SHIFT`]), up to half the dirty limit of the use of the
/// instant (so a program that frees what it used and sleeps still keeps
/// at most `keep` and 4 MiB more). The zone counts a block's pages as charged from the
/// moment it is handed out whole; a program that touches only part of its
/// blocks (buffers written at their ends) leaves its frees charged with
/// pages that were never resident, which the give-back finds with mincore
/// and uncharges, releasing little: a give-back at every free of such a
/// block took 29% of the page band's instructions (16 KiB - 4 MiB blocks,
/// 332 give-backs of 32,000 instructions each in 40,000 operations).
#[inline]
fn zone_step(keep: usize) -> usize {
    let s = step(keep);
    let shift = STEP_SHIFT.load(Relaxed);
    if shift == 0 {
        return s;
    }
    let z = &PAGES.zone;
    (s << shift).min(s.max(z.dirty_limit_now().min(usize::MAX / PAGE_SIZE) * PAGE_SIZE / 2))
}

/// How many times the zone's step is doubled (see [`zone_step`]); back to
/// 0 at a give-back that releases what waited, one less each tick.
static STEP_SHIFT: AtomicUsize = AtomicUsize::new(0);
/// The most [`STEP_SHIFT`] may be.
const STEP_SHIFT_MAX: usize = 6;

/// Whether more than a `keep` (as far as the memory in use still allows
/// it) and a step waits, in the zone or in the huge-block cache: a few
/// loads and compares.
#[inline]
pub(crate) fn due() -> bool {
    let at_exit = tls::exited();
    let keep = KEEP.load(Relaxed).min(keep_max(at_exit));
    let huge_keep = HUGE_KEEP.load(Relaxed).min(huge_keep_max(at_exit));
    zone_waiting() > keep + zone_step(keep) || HUGE.cached_bytes() > huge_keep + step(huge_keep)
}

/// Kept closed by a fork while it runs: an exit's measurement takes the
/// lists' blocks off them to measure them without the pageset lock, and
/// the child must find them back on the lists ([`measure_at_exit`]).
static MEASURE_GATE: ForkGate = ForkGate::new();

/// At a thread's exit, before [`due_at_exit`] decides: the pagesets' large
/// lists measure the blocks freed since they last looked (mincore), so
/// what they hold counts as what is resident, not as every page of each
/// block. Without the tick lock: exits measure side by side, and a
/// give-back under way is not waited for. Skipped while a fork runs.
pub(crate) fn measure_at_exit() {
    if let Some(_inside) = MEASURE_GATE.enter() {
        PAGES.pagesets.measure_large(&PAGES.zone);
    }
}

/// Before fork (`fork.rs`): waits for the exits' measurements under way
/// and keeps new ones out until [`open_measure_gate`].
pub(crate) fn close_measure_gate() {
    MEASURE_GATE.close_for_fork();
}

/// After fork: exits measure again.
pub(crate) fn open_measure_gate(child: bool) {
    MEASURE_GATE.open_after_fork(child);
}

/// [`due`] counting what a thread's exit leaves waiting too
/// (`exit_waiting`), or, while nothing given back was needed again, more
/// than `KEEP_MIN` and a step on the pagesets, where the exiting thread's
/// caches went (adding them up takes every pageset's lock: fine once a
/// thread).
pub(crate) fn due_at_exit() -> bool {
    let keep = KEEP.load(Relaxed).min(keep_max(true));
    due()
        || zone_waiting() + exit_waiting() > keep + step(keep)
        || (KEEP.load(Relaxed) == KEEP_MIN
            && PAGES.pagesets.waiting_pages() * PAGE_SIZE > KEEP_MIN + step(KEEP_MIN))
}

/// The most the zone's `keep` may be now: the dirty limit (what the
/// zone's resident free memory may reach: a ratio of the pages in use, or
/// what they are short of their recent peak, at least 8 MiB), or
/// [`KEEP_MAX`] with the dirty limit off; under the memory cgroup's share.
/// A program that frees what it used keeps little; one that still holds
/// much, or uses again what it frees, may keep it waiting, as between
/// ticks. At a thread's exit (`at_exit`), where a program's work winds
/// down — a pool's worker, a storm's last wave — the use of the instant
/// alone counts: the memory of a peak that is over would stay for good
/// (5,000 short threads left 66-86 MiB resident, not 12).
fn keep_max(at_exit: bool) -> usize {
    let z = &PAGES.zone;
    // Blocks cached on the pagesets' large lists are not in use: counted
    // as such, a thread pool's cache between two waves would let the
    // `keep` grow past the memory the program uses.
    let cached = PAGES.pagesets.large_pages() * z.dirty_ratio() / 100;
    let most = if z.dirty_ratio() == 0 {
        KEEP_MAX
    } else if at_exit {
        (z.dirty_limit_now().saturating_sub(cached) * PAGE_SIZE).max(KEEP_MAX)
    } else {
        (z.dirty_limit().saturating_sub(cached) * PAGE_SIZE).max(KEEP_MAX)
    };
    most.min(cgroup_share())
}

/// What the caches may hold under the memory cgroup's limit: half the
/// headroom left (`usize::MAX` without a limit; `memcg.rs`).
#[inline]
fn cgroup_share() -> usize {
    PAGES.zone.budget.headroom() / 2
}

/// The most the huge blocks' `keep` may be now: [`HUGE_KEEP_MAX`], or
/// what the huge blocks took at their recent peak (the most seen at a
/// give-back in this tick and the last, in use and cached) if that is
/// more; under the memory cgroup's share. A loop of big buffers reuses
/// cached ones of every size it asks for; a producer hands them to a
/// consumer, and between the two the blocks in use swing from many to
/// none. A cached block serves a request only if it is as large (or grows
/// in place), so the cache that spares a producer new mappings is about as
/// large as what is in use: with the keep at 80% of the blocks in use at
/// the instant of the free, a producer of 8 B - 64 MiB blocks mapped most
/// huge blocks anew. At a thread's exit, 80% of the blocks in use now
/// (see [`keep_max`]).
fn huge_keep_max(at_exit: bool) -> usize {
    let most = if at_exit {
        let live = HUGE.bytes().saturating_sub(HUGE.cached_bytes());
        live / 100 * PAGES.zone.dirty_ratio()
    } else {
        HUGE_PEAK[0]
            .load(Relaxed)
            .max(HUGE_PEAK[1].load(Relaxed))
            .max(HUGE.bytes())
    };
    most.max(HUGE_KEEP_MAX).min(cgroup_share())
}

/// Notes the bytes of huge blocks now, in use and cached (their peak in
/// this tick).
fn note_huge_bytes() {
    let bytes = HUGE.bytes();
    if bytes > HUGE_PEAK[0].load(Relaxed) {
        HUGE_PEAK[0].store(bytes, Relaxed);
    }
}

/// The zone's charged pages, in bytes.
fn zone_charged() -> usize {
    PAGES.zone.charged_pages() * PAGE_SIZE
}

/// Gives back what waits beyond the `keep`s (see the module docs). The
/// caller holds the tick lock (`tick.rs`): one give-back at a time, none
/// while a tick runs or the allocator is held still. Never changes errno.
pub(crate) fn give_back() {
    give_back_with(false, tls::exited());
}

/// [`give_back`] as at a thread's exit, whichever thread runs it: the
/// exit's give-back that found the tick lock taken is run by its holder
/// (`tick.rs`), so the last thread of a storm never leaves its wave's
/// memory waiting.
pub(crate) fn give_back_at_exit() {
    give_back_with(false, true);
}

/// [`give_back`], and everything the caches hold goes too, as when
/// nothing given back was needed again: the memory cgroup's limit is near
/// (`memcg.rs`).
pub(crate) fn give_back_everything() {
    give_back_with(true, tls::exited());
}

/// Whether the caches hold more than the memory cgroup's headroom allows
/// them: what waits for a tick and what the pagesets hold, past half the
/// headroom (adding up the pagesets takes every pageset's lock: for the
/// occasional look at the cgroup, not for a free).
pub(crate) fn over_cgroup_share() -> bool {
    let share = cgroup_share();
    share < usize::MAX / 2 && waiting_bytes() + PAGES.pagesets.total_count() * PAGE_SIZE > share
}

fn give_back_with(everything: bool, at_exit: bool) {
    let saved = sys::errno();
    note_huge_bytes();
    // What the last give-back released and the program has charged again
    // since (charges only grow by what is handed out: a refault, or
    // growth), for each.
    let refault = zone_charged()
        .saturating_sub(ZONE_AFTER.load(Relaxed))
        .min(GAVE.load(Relaxed));
    let keep = (KEEP.load(Relaxed) + refault).min(keep_max(at_exit));
    KEEP.store(keep, Relaxed);
    let remapped = HUGE
        .bytes()
        .saturating_sub(HUGE_AFTER.load(Relaxed))
        .min(GAVE_HUGE.load(Relaxed));
    let huge_keep = (HUGE_KEEP.load(Relaxed) + remapped).min(huge_keep_max(at_exit));
    HUGE_KEEP.store(huge_keep, Relaxed);
    // Nothing given back was needed again: the program is not reusing
    // what it frees, so what the tick would take goes now too — the
    // calling thread's caches (as at a tick it sees), the other threads'
    // parked slabs and large bins, the exited threads' heaps, the
    // pagesets. (A program that reuses what it frees keeps them: they
    // are what it reuses first.) So too near the memory cgroup's limit.
    let quiet = everything || keep <= KEEP_MIN;
    if quiet {
        flush_own_heap();
        let everywhere = PAGES.through(core::ptr::null(), false);
        HEAPS.collect_abandoned(&everywhere);
        HEAPS.release_parked_everywhere(&everywhere);
        HEAPS.drain_all_block_bins(&everywhere);
        PAGES.drain_all();
    }
    let budget = &PAGES.zone.budget;
    // The blocks in the cache: the lock-free figure counts the pages past
    // the length of the blocks in use too (`huge.rs` keeps them), and a
    // trim by it emptied the cache of the blocks a producer was about to
    // reuse (8 B - 64 MiB blocks from one thread to another: 80 page
    // faults per MiB allocated, as many as glibc's, at 0.9x its
    // throughput).
    let cached = HUGE.usage().cached_bytes;
    let unmapped = if cached > huge_keep + step(huge_keep) {
        HUGE.trim_some(budget, cached - huge_keep)
    } else {
        0
    };
    // At an exit, the pagesets' large lists first: they serve the next
    // wave's requests as they are. The zone keeps what is left of `keep`.
    let (kept, pcp_released) = if at_exit {
        PAGES
            .pagesets
            .release_large_down_to(&PAGES.zone, keep / PAGE_SIZE)
    } else {
        (0, 0)
    };
    let zone_keep = keep.saturating_sub(kept * PAGE_SIZE);
    // The blocks on the lists are a cache, not use: the zone's free pages
    // go back 4 KiB at a time unless what is in use makes the heap dense.
    // At an exit, where a program's work may wind down, the plain step:
    // what a storm's last wave leaves is one `keep` and a step.
    let zone_step = if at_exit { step(keep) } else { zone_step(keep) };
    let waiting = zone_waiting();
    let zone_released = if waiting > zone_keep + zone_step {
        let released = PAGES
            .zone
            .release_down_to(zone_keep / PAGE_SIZE, PAGES.pagesets.large_pages());
        let shift = STEP_SHIFT.load(Relaxed);
        if released < (waiting - zone_keep) / 4 {
            STEP_SHIFT.store((shift + 1).min(STEP_SHIFT_MAX), Relaxed);
        } else if shift != 0 {
            STEP_SHIFT.store(0, Relaxed);
        }
        released
    } else {
        0
    };
    let released = pcp_released * PAGE_SIZE + zone_released;
    if quiet {
        // Whole blocks already given back go offline (their descriptors
        // and address space), as after idle ticks.
        PAGES.zone.shrink(Shrink::Idle(0), usize::MAX);
    }
    GAVE.store(released, Relaxed);
    GAVE_HUGE.store(unmapped, Relaxed);
    ZONE_AFTER.store(zone_charged(), Relaxed);
    HUGE_AFTER.store(HUGE.bytes(), Relaxed);
    sys::set_errno(saved);
}

/// The calling thread's heap collects its remote frees and gives back its
/// bins, parked slabs and large bins (`thread_flush`).
fn flush_own_heap() {
    let h = tls::current_heap();
    // SAFETY: h is this thread's heap (or the empty heap, left alone).
    unsafe {
        if !(*h).is_empty_heap() {
            let pages = pages_of(&*h);
            (*h).owned().collect(&pages);
        }
    }
}

/// The tick: each `keep` loses an eighth, down to its least, and the
/// huge blocks' peak of the tick before is forgotten.
pub(crate) fn on_tick() {
    let shift = STEP_SHIFT.load(Relaxed);
    STEP_SHIFT.store(shift.saturating_sub(1), Relaxed);
    HUGE_PEAK[1].store(HUGE_PEAK[0].load(Relaxed), Relaxed);
    HUGE_PEAK[0].store(HUGE.bytes(), Relaxed);
    let keep = KEEP.load(Relaxed);
    KEEP.store((keep - keep / 8).max(KEEP_MIN), Relaxed);
    let huge_keep = HUGE_KEEP.load(Relaxed);
    HUGE_KEEP.store(huge_keep - huge_keep / 8, Relaxed);
}
