//! Exact-size blocks: `n` pages, not the power of two above (the kernel's
//! `alloc_pages_exact`, which splits a block and gives the tail back), and a
//! run of adjacent free blocks when no block of the needed order is free.
//!
//! A buddy allocator asked for page counts that are not powers of two
//! fragments: a 33-page block takes a 64-page block and gives 31 pages
//! back in pieces, and later a 64-page request finds only 32-page free
//! blocks whose buddies are in use — though two of them may lie side by
//! side. So a block whose size is not a power of two is first sought as a
//! *run*: free blocks of the next orders down that are adjacent in
//! address (the way `alloc_contig_range` takes a range rather than a
//! block) — the best fit up to 256 KiB, the lowest-addressed resident run
//! above — and only then carved from a block of its order, whose tail
//! goes back. Before the zone grows for want of a block, the run search
//! looks further (see [`RunScan`]).
//! A run is page-aligned only, and may span adjacent online MAX_ORDER
//! blocks of a section (a 3 MiB block from the second half of one and the
//! first of the next): the buddy blocks stay within their MAX_ORDER block,
//! an allocated exact block need not. It is freed as the aligned
//! power-of-two pieces that make it up (`ZoneGuard::free_range`), which
//! merge back with their buddies as any block does.

use crate::geometry::{MAX_ORDER_BYTES, PAGE_SIZE, SECTION_SIZE};
use crate::page::{flags, MigrateType, Page, PageKind, PageList};
use crate::section::{self, desc_of, page_addr};
use crate::util::order_for_pages;

use super::buddy::take_block;
use super::{Grow, Zone, ZoneGuard};

/// Free blocks looked at per order when searching for a run.
const RUN_SCAN: usize = 16;
/// How many orders below the needed one a run is assembled from.
const RUN_ORDERS: u32 = 2;
/// Free blocks looked at in all by the search before the zone grows.
/// Bounded because a request that fails at a memory limit repeats it on
/// each reclaim stage, under the zone lock.
const RUN_SCAN_BEFORE_GROWING: usize = 1024;
/// How many orders below the needed one that search starts runs from (a
/// run from blocks smaller than a sixteenth of the request is rare, and
/// they are the most numerous).
const RUN_ORDERS_BEFORE_GROWING: u32 = 4;

/// How far [`ZoneGuard::take_run`] looks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RunScan {
    /// Runs starting at the first [`RUN_SCAN`] blocks of each of the
    /// [`RUN_ORDERS`] orders below the request's: every exact request.
    Quick,
    /// Runs starting at any free block of the
    /// [`RUN_ORDERS_BEFORE_GROWING`] orders below the request's, up to
    /// [`RUN_SCAN_BEFORE_GROWING`] of them: the last look before the zone
    /// grows by 4 MiB or more for want of a block.
    BeforeGrowing,
}
/// Blocks up to this order (256 KiB, the thread bins' reach) take the
/// best-fitting run, larger ones the lowest-addressed resident one (see
/// `take_run`).
const BEST_FIT_MAX_ORDER: u32 = 6;

impl ZoneGuard<'_> {
    /// A block of exactly `npages` pages for `mt`, aligned to
    /// `2^align_order` pages: from a free block of the order that holds it
    /// (its tail given back), else (unaligned requests) a run of adjacent
    /// free blocks, else a fallback type's block, else — if `grow` says
    /// so — a run found by the wider search ([`RunScan::BeforeGrowing`]),
    /// else after growing. Charged to the budget; null when nothing is
    /// left (or nothing without growing). The head comes back with kind
    /// `None`, order 0 and CLEAN telling whether the whole block reads as
    /// zero.
    pub fn rmqueue_exact(
        &mut self,
        npages: usize,
        align_order: u32,
        mt: MigrateType,
        grow: Grow,
    ) -> *mut Page {
        let order = order_for_pages(npages).max(align_order);
        if align_order == 0 && !npages.is_power_of_two() {
            // Best fit first: a run of smaller free blocks that holds the
            // block leaves no tail to fragment a larger one.
            let p = self.take_run(npages, mt, RunScan::Quick);
            if !p.is_null() {
                return self.charge_or_undo(p, npages);
            }
        }
        let mut p = self.take_block_of(order, mt);
        if p.is_null() && grow == Grow::No {
            return p;
        }
        if p.is_null() && align_order == 0 {
            // About to grow: every free block smaller than the request may
            // start a run, not only those at the front of two lists.
            p = self.take_run(npages, mt, RunScan::BeforeGrowing);
            if !p.is_null() {
                return self.charge_or_undo(p, npages);
            }
        }
        if p.is_null() && self.grow(1 << order) {
            // Memory comes online movable: another type takes it through
            // the fallback.
            p = self.take_block_of(order, mt);
        }
        if p.is_null() {
            self.inner.c.alloc_fail += 1;
            return p;
        }
        // SAFETY: p heads a block of 2^order pages we just took.
        let clean = unsafe { (*p).flags } & flags::CLEAN != 0;
        let total = 1usize << order;
        if total > npages {
            // SAFETY: the tail is ours, inside the block, its descriptors
            // None.
            unsafe { self.free_range(page_addr(p) + npages * PAGE_SIZE, total - npages, clean) };
            self.inner.c.pgfree -= (total - npages) as u64;
        }
        self.charge_or_undo(p, npages)
    }

    /// Frees the pages `[addr, addr + pages)` as the largest aligned
    /// power-of-two pieces (the kernel's `free_pages_exact`); a piece never
    /// crosses a MAX_ORDER block. `untouched`: the pages were never written
    /// since they came clean from the zone, so they go back clean (and so
    /// uncharged).
    ///
    /// # Safety
    /// The range is owned by the caller, inside online MAX_ORDER blocks of
    /// one section of this zone, and its descriptors are all `None`.
    pub unsafe fn free_range(&mut self, addr: usize, pages: usize, untouched: bool) {
        use crate::geometry::{MAX_PAGE_ORDER, PAGE_SHIFT, PAGE_SIZE};
        let end = addr + pages * PAGE_SIZE;
        let mut a = addr;
        while a < end {
            let mut order = ((a >> PAGE_SHIFT).trailing_zeros()).min(MAX_PAGE_ORDER);
            while a + (PAGE_SIZE << order) > end {
                order -= 1;
            }
            let d = desc_of(a);
            // SAFETY: the piece is ours (contract); it becomes a free block.
            unsafe {
                (*d).flags = if untouched {
                    crate::page::flags::CLEAN
                } else {
                    0
                };
                (*d).order = order as u8;
                self.free_one_page(d, order);
            }
            a += PAGE_SIZE << order;
        }
    }

    /// Charges the `npages` pages of the block at `p` (just taken); gives
    /// the block back and returns null if the budget says no.
    fn charge_or_undo(&mut self, p: *mut Page, npages: usize) -> *mut Page {
        if !self.charge_range(page_addr(p), npages) {
            // SAFETY: p heads npages pages we own.
            let clean = unsafe { (*p).flags } & flags::CLEAN != 0;
            // SAFETY: as above; they go back as they came.
            unsafe { self.free_range(page_addr(p), npages, clean) };
            self.inner.c.pgfree -= npages as u64;
            self.inner.c.charge_fail += 1;
            self.inner.c.alloc_fail += 1;
            return core::ptr::null_mut();
        }
        self.inner.c.pgalloc += npages as u64;
        if self.inner.free < self.zone.wmark(super::watermark::WMARK_LOW) {
            self.grow(0);
        }
        p
    }

    /// Takes a run of at least `npages` free pages of `mt` made of adjacent
    /// free blocks smaller than the order that would hold it, keeps
    /// exactly `npages` and gives the rest back, looking as far as `scan`
    /// says. Null if the scan finds none.
    ///
    /// A block of up to [`BEST_FIT_MAX_ORDER`] takes the best fit of the
    /// runs the scan finds — the one that leaves least behind (an exact
    /// fit ends the scan) — so the larger runs stay whole for the larger
    /// requests: on the page-granular band (8–256 KiB) it halves the
    /// requests that fit nowhere (`drain_before_grow`) and the heap grows
    /// by one 4 MiB block less. A larger block takes the lowest-addressed
    /// run found among those whose first block is resident (else among the
    /// clean ones), as whole blocks of its orders are taken
    /// ([`lowest_address`](super::buddy::lowest_address)): best fit there
    /// cost 20 MiB more at peak on the 16 KiB – 4 MiB band, and a clean
    /// run taken before a resident one would need room in the budget that
    /// the resident one does not.
    fn take_run(&mut self, npages: usize, mt: MigrateType, scan: RunScan) -> *mut Page {
        let order = order_for_pages(npages);
        let want = npages * PAGE_SIZE;
        let best_fit = order <= BEST_FIT_MAX_ORDER;
        // The lowest order runs start from, blocks looked at per order and
        // in all.
        let (lowest, per_order, mut budget) = match scan {
            RunScan::Quick => (order.saturating_sub(RUN_ORDERS), RUN_SCAN, usize::MAX),
            RunScan::BeforeGrowing => (
                order.saturating_sub(RUN_ORDERS_BEFORE_GROWING),
                usize::MAX,
                RUN_SCAN_BEFORE_GROWING,
            ),
        };
        // The run in hand: start, end, and whether its first block is
        // clean (given back to the OS): a resident run beats a clean one,
        // as on the free lists, and needs no room in the budget.
        let mut best: Option<(usize, usize, bool)> = None;
        'orders: for o in (lowest..order).rev() {
            let mut p = self.inner.free_area[o as usize][mt as usize].first();
            let mut scanned = 0;
            while !p.is_null() && scanned < per_order && budget > 0 {
                scanned += 1;
                budget -= 1;
                let a = page_addr(p);
                // SAFETY: p is on our free list.
                let (next, clean) = unsafe { ((*p).next, (*p).flags & flags::CLEAN != 0) };
                if !best_fit && best.is_some_and(|(ba, _, bc)| (clean, a) >= (bc, ba)) {
                    // Placed no better than the run in hand (resident
                    // first, then lower): no need to walk it. So a run
                    // walked below is better placed, whatever its length.
                    p = next;
                    continue;
                }
                // Walk the free blocks that follow, across MAX_ORDER
                // blocks of the section as long as they are online (a
                // block never mapped has no descriptors to read; an
                // offline one's say None).
                let end = section::section_base(a) + SECTION_SIZE;
                let mut run_end = a;
                while run_end < end && run_end - a < want {
                    if run_end.is_multiple_of(MAX_ORDER_BYTES) && !section::is_ours(run_end) {
                        break;
                    }
                    let d = desc_of(run_end);
                    // SAFETY: a descriptor of an online block; lock held.
                    let (kind, dmt, dorder) = unsafe { ((*d).kind(), (*d).mt(), (*d).order) };
                    if kind != PageKind::Buddy || dmt != mt {
                        break;
                    }
                    run_end += PAGE_SIZE << dorder;
                }
                let len = run_end - a;
                let better = match best {
                    Some((ba, be, _)) if best_fit => len < be - ba,
                    _ => true,
                };
                if len >= want && better {
                    best = Some((a, run_end, clean));
                    if best_fit && len == want {
                        break 'orders;
                    }
                }
                p = next;
            }
        }
        match best {
            Some((a, run_end, _)) => self.carve_run(a, run_end, npages),
            None => core::ptr::null_mut(),
        }
    }

    /// Takes the free blocks of `[a, run_end)` off the lists, keeps the
    /// first `npages` pages as one block and gives the rest back.
    fn carve_run(&mut self, a: usize, run_end: usize, npages: usize) -> *mut Page {
        let mut clean = true;
        let mut x = a;
        while x < run_end {
            let d = desc_of(x);
            // SAFETY: d heads a free block of the run (checked by the
            // caller under the same lock hold).
            unsafe {
                let order = (*d).order;
                clean &= (*d).flags & flags::CLEAN != 0;
                self.inner.del_free(d);
                (*d).reset();
                x += PAGE_SIZE << order;
            }
        }
        let head = desc_of(a);
        // SAFETY: the run's descriptors are all None now; it is ours.
        unsafe {
            take_block(head, 0, clean);
            let rest = (run_end - a) / PAGE_SIZE - npages;
            if rest > 0 {
                self.free_range(a + npages * PAGE_SIZE, rest, clean);
                self.inner.c.pgfree -= rest as u64;
            }
        }
        self.inner.c.exact_runs += 1;
        head
    }
}

impl Zone {
    /// A block of exactly `npages` pages for `mt` aligned to
    /// `2^align_order` pages (see [`ZoneGuard::rmqueue_exact`]).
    pub fn alloc_exact(
        &self,
        npages: usize,
        align_order: u32,
        mt: MigrateType,
        grow: Grow,
    ) -> *mut Page {
        self.check_below_high(order_for_pages(npages));
        self.lock().rmqueue_exact(npages, align_order, mt, grow)
    }

    /// Takes up to `count` blocks of exactly `npages` pages for `mt` in one
    /// lock hold and puts them on `list` (a pageset's refill, as
    /// `rmqueue_bulk`), growing only if `grow` says so. Each comes with
    /// kind `None` and its CLEAN flag. Returns how many it got.
    pub fn rmqueue_exact_bulk(
        &self,
        npages: usize,
        count: usize,
        mt: MigrateType,
        list: &mut PageList,
        grow: Grow,
    ) -> usize {
        self.take_bulk(count, npages, list, |g| {
            g.rmqueue_exact(npages, 0, mt, grow)
        })
    }

    /// Frees the exact block `[page_addr(head), + npages)` to the buddy
    /// lists.
    ///
    /// # Safety
    /// The block is the caller's, inside online MAX_ORDER blocks of one section of this
    /// zone, unused, with every descriptor `None` except `head`, whose
    /// CLEAN flag says whether it was written.
    pub unsafe fn free_exact(&self, head: *mut Page, npages: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.free_exact_many(&[head], npages) }
    }

    /// Frees the exact blocks `heads`, each of `npages` pages, to the
    /// buddy lists in one lock hold.
    ///
    /// # Safety
    /// As [`Zone::free_exact`], for each block.
    pub unsafe fn free_exact_many(&self, heads: &[*mut Page], npages: usize) {
        let mut z = self.lock();
        for &head in heads {
            // SAFETY: forwarded contract.
            unsafe {
                let clean = (*head).flags & flags::CLEAN != 0;
                z.free_range(page_addr(head), npages, clean);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::zone::{ZoneConfig, NO_LIMIT};

    /// The search before growing looks at every free block below the
    /// request's order, the quick one at the fronts of the two orders
    /// below. Eight order-3 blocks b0 … b7 taken from a fresh zone (a
    /// split order-6 block, the zone's other free memory in larger
    /// blocks), b1 … b6 freed: [b1, b7) is 48 free pages, as an order-3,
    /// two order-4 and an order-3 block, which only a run from b1 covers.
    #[test]
    fn before_growing_any_free_block_may_start_a_run() {
        let z = Zone::with_config(&ZoneConfig::with_limit(NO_LIMIT));
        let b: [*mut Page; 8] = core::array::from_fn(|_| z.alloc(3, MigrateType::Movable));
        let step = PAGE_SIZE << 3;
        for i in 0..8 {
            assert_eq!(page_addr(b[i]), page_addr(b[0]) + i * step, "b{i} in a row");
        }
        for &p in &b[1..7] {
            // SAFETY: ours, unused.
            unsafe {
                (*p).flags = 0;
                z.free(p, 3);
            }
        }
        {
            let mut g = z.lock();
            assert!(g
                .take_run(48, MigrateType::Movable, RunScan::Quick)
                .is_null());
            let p = g.take_run(48, MigrateType::Movable, RunScan::BeforeGrowing);
            assert_eq!(page_addr(p), page_addr(b[1]), "the run is [b1, b7)");
            // SAFETY: the 48 pages just taken are ours.
            unsafe { g.free_range(page_addr(p), 48, false) };
        }
        for p in [b[0], b[7]] {
            // SAFETY: ours, unused.
            unsafe { z.free(p, 3) };
        }
        z.check_invariants();
        // SAFETY: nothing uses the zone's memory any more.
        unsafe { z.destroy() };
    }
}
