//! Giving idle free memory back to the OS.
//!
//! The kernel never has to do this; a userspace heap does, or a program
//! that freed a burst keeps its peak RSS forever. Each maintenance tick
//! takes free blocks that have stayed free for at least `idle_ticks` ticks
//! and are still resident, isolates them (off the free lists, under the
//! lock), calls madvise(MADV_DONTNEED) on them *without* the lock, and puts
//! them back marked CLEAN (they read as zero, which `calloc` uses). Whole
//! pageblocks go first — that is where keeping pageblocks pure pays off —
//! then smaller blocks, but only while more than `keep_dirty` free pages are
//! resident: a little warm memory saves page faults on the next burst.
//!
//! Free lists are LIFO, so the blocks idle longest are near the tail,
//! just before the clean ones, which each list keeps last from a block
//! the zone remembers (`ZoneInner::last_not_clean`): the scan starts
//! there, never walks a clean block, walks past blocks with no charged
//! page (nothing resident to give back) and looks at a bounded number of
//! blocks per list. A released block is uncharged (see `charge.rs`).
//!
//! A block is charged whole when it is handed out, whatever the program
//! then touches: a thread storm's blocks of up to 1 MiB written in their
//! first 16 KiB counted as 50 times what was resident. A release down to
//! a number of charged pages (`release_down_to`, the give-back at a free
//! when no thread runs) first asks mincore which pages of each block are
//! resident — one call for the blocks close together, one lock hold to
//! uncharge the others, with no madvise: what waits is then what is
//! resident, and only that is given back (and a block with nothing
//! resident, to be clean).

use super::thp::PAGEBLOCK_BYTES;
use crate::geometry::{MAX_PAGE_ORDER, PAGEBLOCK_ORDER, PAGE_SIZE};
use crate::page::{flags, Page, PageKind, MIGRATE_TYPES};
use crate::section::{self, page_addr};
use crate::sys;

use super::Zone;

/// Blocks isolated per lock hold.
const RELEASE_BATCH: usize = 16;
/// Resident blocks looked at per list per lock hold.
const SCAN_LIMIT: usize = 256;
/// Blocks with nothing to give back walked past per list per lock hold.
const SKIP_LIMIT: usize = 4096;
/// Lock holds per call (bounds one tick's work).
const MAX_ROUNDS: usize = 256;

impl Zone {
    /// Before fork (`runtime::fork::LOCKS`): waits for the releases and
    /// shrinks under way and keeps new ones out until [`Zone::open_release_gate`].
    pub fn close_release_gate(&self) {
        self.release_gate.close_for_fork();
    }

    /// After fork: releases may run again. In the child, the dirty limit's
    /// releaser (the flag it holds through its release) did not come along.
    pub fn open_release_gate(&self, child: bool) {
        if child {
            self.reset_dirty_after_fork();
        }
        self.release_gate.open_after_fork(child);
    }

    /// Returns idle, resident free memory to the OS; see the module docs.
    /// Returns the bytes released.
    pub fn release_idle(&self, idle_ticks: u32, keep_dirty: usize) -> usize {
        self.release_free(idle_ticks, keep_dirty, usize::MAX)
    }

    /// As [`Zone::release_idle`], but stops once `want` bytes are released
    /// (give or take the last block): a reclaim that needs room for one
    /// request releases that much, not everything.
    pub fn release_free(&self, idle_ticks: u32, keep_dirty: usize, want: usize) -> usize {
        self.release(idle_ticks, keep_dirty, want, 0)
    }

    /// Gives back free memory until at most `keep` free pages are charged,
    /// at every order (see the module docs): the free blocks' pages that
    /// are not resident are uncharged first, with no madvise; resident
    /// blocks are released, largest and coldest first, only while more is
    /// charged. `cached` of the pages handed out are a cache (the
    /// pagesets' large lists), not use: they do not make the heap dense
    /// enough that only whole pageblocks go (`thp.rs`). Returns the
    /// resident bytes given back.
    pub fn release_down_to(&self, keep: usize, cached: usize) -> usize {
        self.release_blocks(0, keep, usize::MAX, 0, Some(cached))
    }

    /// Gives back free blocks of at least `min_order` that stayed free for
    /// `idle_ticks` ticks and are resident, largest first and coldest first
    /// within an order: blocks below a pageblock only while more than
    /// `keep_dirty` free pages are resident, and no more than `want` bytes
    /// (give or take the last block), counting what was resident. Returns
    /// the resident bytes given back.
    pub(super) fn release(
        &self,
        idle_ticks: u32,
        keep_dirty: usize,
        want: usize,
        min_order: u32,
    ) -> usize {
        self.release_blocks(idle_ticks, keep_dirty, want, min_order, None)
    }

    /// [`Zone::release`]; with `settle` (the cached pages of
    /// [`Zone::release_down_to`]), `keep_dirty` bounds every order and what
    /// is charged is first brought to what is resident.
    fn release_blocks(
        &self,
        idle_ticks: u32,
        keep_dirty: usize,
        want: usize,
        min_order: u32,
        settle: Option<usize>,
    ) -> usize {
        let cached = settle.unwrap_or(0);
        let settle = settle.is_some();
        // Blocks are isolated across lock holds: a fork must not see them
        // so (the child would never put them back).
        let Some(_inside) = self.release_gate.enter() else {
            return 0;
        };
        let mut total = 0;
        for _ in 0..MAX_ROUNDS {
            if total >= want {
                break;
            }
            let mut batch_bytes = 0;
            // Each block with its charged (resident) pages: what it gives
            // back, and what counts towards `want`.
            let mut batch: [(*mut Page, u32, usize); RELEASE_BATCH] =
                [(core::ptr::null_mut(), 0, 0); RELEASE_BATCH];
            let mut n = 0;
            {
                let mut g = self.lock();
                let z = &mut *g.inner;
                let epoch = z.epoch;
                // With huge pages, 4 KiB of a pageblock given back would
                // split its huge page: only whole pageblocks go from a
                // pageblock that is one, unless everything must (trim,
                // reclaim: keep_dirty 0), the zone is under pressure, or
                // the heap is no longer dense.
                let whole_only =
                    keep_dirty > 0 && !self.below_high() && self.keep_huge_whole(z, cached);
                'orders: for order in (min_order..=MAX_PAGE_ORDER).rev() {
                    if (settle || order < PAGEBLOCK_ORDER) && z.dirty_free() <= keep_dirty {
                        break;
                    }
                    for mt in 0..MIGRATE_TYPES {
                        // Clean blocks sit at the tail (see add_free),
                        // never walked: from the last that is not clean.
                        let mut p = z.last_not_clean(order as usize, mt);
                        let (mut scanned, mut skipped) = (0, 0);
                        while !p.is_null() && scanned < SCAN_LIMIT && skipped < SKIP_LIMIT {
                            // SAFETY: p is on our free list; lock held.
                            let (prev, since) = unsafe { ((*p).prev, (*p).free_epoch) };
                            // SAFETY: a free block of ours; lock held.
                            let charged =
                                unsafe { super::charge::count_charged(page_addr(p), 1 << order) };
                            if charged == 0
                                || (whole_only
                                    && order < PAGEBLOCK_ORDER
                                    && self.huge_pageblock(page_addr(p)))
                            {
                                skipped += 1;
                                p = prev;
                                continue;
                            }
                            scanned += 1;
                            if epoch.wrapping_sub(since) >= idle_ticks {
                                // SAFETY: as above; the block leaves the
                                // free lists and is ours until put back.
                                unsafe {
                                    z.del_free(p);
                                    (*p).set_kind(PageKind::Isolated);
                                }
                                z.isolated += 1 << order;
                                batch[n] = (p, order, charged);
                                n += 1;
                                batch_bytes += charged * PAGE_SIZE;
                                if n == RELEASE_BATCH || total + batch_bytes >= want {
                                    break 'orders;
                                }
                            }
                            p = prev;
                        }
                    }
                }
            }
            if n == 0 {
                break;
            }
            let mut released = [false; RELEASE_BATCH];
            let mut give = [true; RELEASE_BATCH];
            if settle {
                self.settle(&mut batch[..n], &mut give[..n], keep_dirty);
            }
            // One system call for the batch where the kernel takes it
            // (`sys::release_many`): a madvise a block flushed the other
            // CPUs' TLBs once a block.
            let mut ranges = [(0usize, 0usize); RELEASE_BATCH];
            let mut which = [0usize; RELEASE_BATCH];
            let mut nr = 0;
            for (i, &(p, order, _)) in batch[..n].iter().enumerate() {
                if give[i] {
                    ranges[nr] = (page_addr(p), PAGE_SIZE << order);
                    which[nr] = i;
                    nr += 1;
                }
            }
            let ok = sys::release_many(&ranges[..nr]);
            for &i in &which[..ok] {
                released[i] = true;
            }
            // Huge-page advice taken back from pageblocks a release left
            // sparse, and given again to those released whole (`thp.rs`):
            // the madvise calls go after the lock is dropped.
            let mut advice = [(0usize, false); 2 * RELEASE_BATCH];
            let mut nr_advice = 0;
            let mut g = self.lock();
            for (i, &(p, order, charged)) in batch[..n].iter().enumerate() {
                if released[i] {
                    g.uncharge_range(page_addr(p), 1 << order);
                }
                let z = &mut *g.inner;
                // Back on the lists of its pageblock's type as it is now (a
                // steal may have changed it while the lock was dropped), as
                // every free does.
                let mt = section::pageblock_mt(page_addr(p));
                // SAFETY: p is the isolated block we took above.
                unsafe {
                    (*p).flags = if released[i] { flags::CLEAN } else { 0 };
                    z.isolated -= 1 << order;
                    z.free_one_page(p, order, mt);
                }
                // A block with nothing resident went back only to be
                // clean (see `settle`): no release to count, no advice.
                if released[i] && charged > 0 {
                    let bytes = PAGE_SIZE << order;
                    z.c.released_bytes += bytes as u64;
                    z.c.release_events += 1;
                    total += charged * PAGE_SIZE;
                    let addr = page_addr(p);
                    if self.huge_pageblock(addr) {
                        nr_advice +=
                            g.released_in_pageblocks(addr, order, &mut advice[nr_advice..]);
                    }
                }
            }
            drop(g);
            for &(pb, on) in &advice[..nr_advice] {
                sys::advise_huge(pb as *mut u8, PAGEBLOCK_BYTES, on);
            }
        }
        total
    }

    /// Brings the isolated blocks of `batch` to what is resident: a page
    /// that mincore says is not resident (a block handed out whole and
    /// touched in part, or never; or swapped out) is uncharged — nothing
    /// to give back there, and it is charged again when handed out — and
    /// each block's count becomes its resident pages. Then
    /// `give` says which to release: those with resident pages while the
    /// zone still has more than `keep` free pages charged, and those with
    /// none — a madvise that frees nothing, after which the block is
    /// clean, behind the resident ones where no release walks again (left
    /// as it was, each give-back would walk past it under the lock).
    fn settle(&self, batch: &mut [(*mut Page, u32, usize)], give: &mut [bool], keep: usize) {
        let mut ranges = [(0usize, 0usize); RELEASE_BATCH];
        for (r, &(p, order, _)) in ranges.iter_mut().zip(batch.iter()) {
            *r = (page_addr(p), 1 << order);
        }
        let ranges = &ranges[..batch.len()];
        let mut dirty = None;
        // One mincore call and one lock hold for each group of blocks
        // close together (`sys::measure_grouped`).
        sys::measure_grouped(ranges, |group| {
            let mut g = self.lock();
            for m in group {
                let Some(map) = m.map else {
                    continue;
                };
                let addr = ranges[m.index].0;
                // Each run of pages that are not resident.
                let mut j = 0;
                while j < map.len() {
                    if map[j] & 1 != 0 {
                        j += 1;
                        continue;
                    }
                    let start = j;
                    while j < map.len() && map[j] & 1 == 0 {
                        j += 1;
                    }
                    g.uncharge_range(addr + start * PAGE_SIZE, j - start);
                }
                batch[m.index].2 = map.iter().filter(|&&v| v & 1 != 0).count();
            }
            // Free pages still charged, the isolated blocks (ours and any
            // other release's) counted as free.
            let z = &*g.inner;
            dirty = Some((z.charged + z.free + z.isolated).saturating_sub(z.managed));
        });
        let Some(dirty) = dirty else {
            return;
        };
        // In the batch's order, largest and coldest first.
        let mut to_give = 0;
        for (i, &(_, _, resident)) in batch.iter().enumerate() {
            give[i] = resident == 0 || dirty.saturating_sub(to_give) > keep;
            to_give += resident * usize::from(give[i]);
        }
    }
}
