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
//! The limit is never under [`DIRTY_MIN_PAGES`] or the high watermark, so
//! a small heap is left to the tick. A limit the zone cannot meet (no
//! resident free pageblock) is not tried again until another pageblock's
//! worth of free memory is resident, or the next tick. One thread
//! releases at a time; a free that finds another at it goes on.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::geometry::{MAX_ORDER_PAGES, PAGEBLOCK_NR_PAGES, PAGEBLOCK_ORDER, PAGE_SIZE};

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

impl Zone {
    /// The dirty limit's ratio, in percent of the pages in use; 0: off.
    #[inline]
    pub fn dirty_ratio(&self) -> usize {
        self.dirty.ratio.load(Relaxed)
    }

    /// The most resident free pages the zone keeps before a free gives
    /// whole pageblocks back (racy: from the mirrors); `usize::MAX` when
    /// the ratio is 0.
    pub fn dirty_limit(&self) -> usize {
        let ratio = self.dirty_ratio();
        if ratio == 0 {
            return usize::MAX;
        }
        let in_use = self.managed_pages().saturating_sub(self.free_pages());
        (in_use.saturating_mul(ratio) / 100)
            .max(DIRTY_MIN_PAGES)
            .max(self.wmark(WMARK_HIGH))
    }

    /// Called after memory went back to the zone: past the dirty limit,
    /// gives whole free pageblocks back to the OS (see the module docs).
    /// Returns the bytes released.
    #[inline]
    pub fn balance_dirty(&self) -> usize {
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
    /// not there.
    pub(super) fn reset_dirty_after_fork(&self) {
        self.dirty.busy.store(false, Relaxed);
        self.dirty.retry_at.store(0, Relaxed);
    }

    /// The tick: a limit that could not be met is tried again.
    pub(super) fn reset_dirty_retry(&self) {
        self.dirty.retry_at.store(0, Relaxed);
    }
}
