//! The dirty limit: resident free memory bounded by the memory in use.
//!
//! Memory freed to the zone stays resident on the free lists until the
//! tick gives back what stayed free for a whole tick (`release.rs`). A
//! program that frees and allocates large blocks without pause never lets
//! a block stay free that long, and the zone's free memory stays resident:
//! the gaps between live blocks that the next request does not fit, and
//! the fresh blocks the zone grew by for want of a large enough gap. In
//! the page band's second half (16 KiB – 4 MiB blocks) the heap held
//! 300 MiB resident for 140 MiB in use.
//!
//! So, as the kernel's `balance_dirty_pages` makes a writer clean pages
//! once dirty page cache passes `dirty_ratio` percent of memory, a free
//! that leaves more resident free pages than `dirty_ratio` percent of the
//! pages in use (handed out, or cached in pagesets) gives back whole free
//! pageblocks at once, coldest first, until 7/8 of that limit remain.
//! Whole pageblocks only: one madvise gives back 2 MiB or more, and no
//! huge page is split. Smaller free blocks wait for the tick, as before.
//!
//! The use of the instant is not all the limit looks at: a producer
//! and a consumer of big blocks take the zone's use from its peak to
//! nearly nothing and back many times a second, and a limit on the use of
//! the instant gave back, at every low, the memory the next high faulted
//! back in (one thread allocating 8 B - 16 MiB blocks, another freeing
//! them: 5.5 GB madvised in 3 s, at a seventh of the throughput with the
//! limit off). So the free memory of the recent peak may stay too: the
//! limit is the larger of `dirty_ratio` percent of the pages in use and
//! what they are short of their peak — the most seen in this tick and the
//! last — plus [`DIRTY_MIN_PAGES`] for the gaps beside it. At a steady use
//! that is the ratio, as before; while the use swings, what the next high
//! uses again stays, and only what the zone holds past the peak's needs
//! goes back; two ticks after the peak, the use alone counts. (The
//! ratio's share of the peak instead of the floor kept the producer's
//! memory too, but took the page band's second half from 150 to 205 MiB
//! at peak; the floor leaves it as it was.)
//!
//! The limit is never under [`DIRTY_MIN_PAGES`] or the high watermark, so
//! a small heap is left to the tick — unless the memory cgroup's limit is
//! near (`budget.rs`, [`Budget::headroom`]): then the resident free pages
//! may be at most half the headroom left, down to none. A limit the zone
//! cannot meet (no resident free pageblock) is not tried again until
//! another pageblock's worth of free memory is resident, or the next tick.
//! One thread releases at a time; a free that finds another at it goes on.
//!
//! [`Budget::headroom`]: super::Budget::headroom

use core::sync::atomic::{
    AtomicBool, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::geometry::{
    MAX_ORDER_PAGES, PAGEBLOCK_NR_PAGES, PAGEBLOCK_ORDER, PAGE_SHIFT, PAGE_SIZE,
};

use super::watermark::WMARK_HIGH;
use super::Zone;

/// The least dirty limit, in pages (8 MiB): below it only the tick gives
/// memory back.
pub const DIRTY_MIN_PAGES: usize = 2 * MAX_ORDER_PAGES;
/// A release stops at `limit - limit >> DIRTY_KEEP_SHIFT`, so the frees
/// that follow need not release again at once.
const DIRTY_KEEP_SHIFT: u32 = 3;
/// The most one free releases for the limit (64 MiB: tens of
/// milliseconds of madvise at worst).
const DIRTY_STEP_BYTES: usize = 64 << 20;

impl super::DirtyLimit {
    /// Off (ratio 0), nothing seen.
    pub(super) const fn new() -> super::DirtyLimit {
        super::DirtyLimit {
            ratio: AtomicUsize::new(0),
            retry_at: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            peak: [const { AtomicUsize::new(0) }; 2],
        }
    }

    /// Notes `in_use` pages in use now.
    #[inline]
    pub(super) fn note_in_use(&self, in_use: usize) {
        if in_use > self.peak[0].load(Relaxed) {
            self.peak[0].store(in_use, Relaxed);
        }
    }

    /// The most pages in use seen in this tick and the last.
    #[inline]
    fn recent_peak(&self) -> usize {
        self.peak[0].load(Relaxed).max(self.peak[1].load(Relaxed))
    }
}

impl Zone {
    /// The dirty limit's ratio, in percent of the pages in use; 0: off.
    #[inline]
    pub fn dirty_ratio(&self) -> usize {
        self.dirty.ratio.load(Relaxed)
    }

    /// Pages in use now: handed out or on pagesets (racy: from the
    /// mirrors).
    #[inline]
    fn pages_in_use(&self) -> usize {
        self.managed_pages().saturating_sub(self.free_pages())
    }

    /// The most resident free pages the zone keeps before a free gives
    /// whole pageblocks back (racy: from the mirrors); `usize::MAX` when
    /// the ratio is 0. See the module docs.
    pub fn dirty_limit(&self) -> usize {
        let in_use = self.pages_in_use();
        // The free memory of the recent peak, and the floor's worth of
        // gaps beside it (see the module docs).
        let peak_free = self.dirty.recent_peak().saturating_sub(in_use) + DIRTY_MIN_PAGES;
        self.dirty_limit_now()
            .max(peak_free.min(self.cgroup_room()))
    }

    /// The dirty limit on the use of the instant alone, its recent peak
    /// left out: what may wait after a free that may be the program's
    /// last (`runtime/give_back.rs`), where the memory of a peak that is
    /// over would stay for good. `usize::MAX` when the ratio is 0.
    pub fn dirty_limit_now(&self) -> usize {
        let ratio = self.dirty_ratio();
        if ratio == 0 {
            return usize::MAX;
        }
        (self.pages_in_use().saturating_mul(ratio) / 100)
            .max(DIRTY_MIN_PAGES)
            .max(self.wmark(WMARK_HIGH))
            .min(self.cgroup_room())
    }

    /// Half the memory cgroup's headroom, in pages (see the module docs).
    fn cgroup_room(&self) -> usize {
        (self.budget.headroom() / 2) >> PAGE_SHIFT
    }

    /// Called after memory went back to the zone: past the dirty limit,
    /// gives whole free pageblocks back to the OS (see the module docs).
    /// Returns the bytes released.
    #[inline]
    pub fn balance_dirty(&self) -> usize {
        // Blocks isolated by a release or a shrink under way count as in
        // use in the mirrors: no peak is seen then.
        if self.release_gate.is_empty() {
            self.dirty.note_in_use(self.pages_in_use());
        }
        let dirty = self.dirty_free_pages();
        if dirty < self.dirty.retry_at.load(Relaxed) {
            return 0;
        }
        let limit = self.dirty_limit();
        if dirty <= limit {
            return 0;
        }
        self.balance_dirty_slow(dirty, limit)
    }

    #[cold]
    #[inline(never)]
    fn balance_dirty_slow(&self, dirty: usize, limit: usize) -> usize {
        if self.dirty.busy.swap(true, Acquire) {
            return 0;
        }
        let keep = limit - (limit >> DIRTY_KEEP_SHIFT);
        // One free gives back at most DIRTY_STEP_BYTES: the next free, or
        // the tick, goes on.
        let want = ((dirty - keep) * PAGE_SIZE).min(DIRTY_STEP_BYTES);
        let released = self.release(0, keep, want, PAGEBLOCK_ORDER);
        // Short of `want`: the resident free memory left is in pieces
        // smaller than a pageblock. Wait for another pageblock's worth
        // before looking again.
        let retry = if released < want {
            self.dirty_free_pages() + PAGEBLOCK_NR_PAGES
        } else {
            0
        };
        self.dirty.retry_at.store(retry, Relaxed);
        {
            let mut g = self.lock();
            g.inner.c.balance_dirty += 1;
            g.inner.c.balance_dirty_bytes += released as u64;
        }
        self.dirty.busy.store(false, Release);
        released
    }

    /// In a forked child: the thread that was releasing for the limit is
    /// not there, and neither are the other threads whose use made the
    /// recent peak.
    pub(super) fn reset_dirty_after_fork(&self) {
        self.dirty.busy.store(false, Relaxed);
        self.dirty.retry_at.store(0, Relaxed);
        for p in &self.dirty.peak {
            p.store(0, Relaxed);
        }
    }

    /// The tick: a limit that could not be met is tried again, and the
    /// peak of the tick before is forgotten.
    pub(super) fn dirty_tick(&self) {
        self.dirty.retry_at.store(0, Relaxed);
        let d = &self.dirty;
        d.peak[1].store(d.peak[0].load(Relaxed), Relaxed);
        d.peak[0].store(self.pages_in_use(), Relaxed);
    }
}
