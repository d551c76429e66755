//! A pageset's doors to its large lists (`class_lists.rs`): allocation through
//! the lists (a block from another CPU's lists on a miss, else a refill),
//! frees to them, the steal another pageset asks for, and the drain of
//! the lists alone. Straight to the zone when the lock is busy, as the
//! order lists do (`pageset.rs`).

use core::ptr;
use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::PAGE_SIZE;
use crate::page::{flags, LargeBlock, Page, PageList, NOT_MEASURED};
use crate::page_alloc::block_classes::{class_of, class_pages, migratetype_for};
use crate::page_alloc::knobs::{heuristic, Knobs};
use crate::page_alloc::zone::{Grow, Zone};
use crate::section::page_addr;
use crate::sys;

use super::class_lists_resident::{measure_list, Residency};
use super::depot::Depot;
use super::pageset::{Pageset, PagesetGuard};

/// Blocks given back to the OS per zone-lock hold.
const RELEASE_BATCH: usize = 16;

impl Pageset {
    /// Allocates an exact-size large block of `class` (MOVABLE), or of a
    /// slightly larger class, through this pageset's large lists
    /// (`class_lists.rs`); straight from the zone's free lists when the lock is
    /// busy. Returns the head, with kind `None` and its CLEAN flag, and the
    /// block's class; null when the zone's free lists have no block either
    /// (this never grows the zone: `Pages::alloc_large` drains the
    /// pagesets first).
    /// `knobs` reads the knobs in force, only on a refill.
    #[inline]
    pub fn alloc_large(
        &self,
        zone: &Zone,
        class: usize,
        knobs: impl Fn() -> Knobs,
        owner: bool,
    ) -> (*mut Page, usize) {
        self.alloc_large_or_steal(zone, class, knobs, owner, |c, _, _| (ptr::null_mut(), c))
    }

    /// [`alloc_large`](Self::alloc_large), where a miss on the lists asks
    /// `steal` for a block of the class from another pageset before it
    /// refills from the zone (`PagesetPool::steal_large`): `steal(class,
    /// more, extra)` may put up to `more` further blocks of the class it
    /// returns on `extra`, which this pageset's lists then cache.
    #[inline]
    pub fn alloc_large_or_steal(
        &self,
        zone: &Zone,
        class: usize,
        knobs: impl Fn() -> Knobs,
        owner: bool,
        steal: impl FnOnce(usize, usize, &mut PageList) -> (*mut Page, usize),
    ) -> (*mut Page, usize) {
        self.alloc_large_entered(
            self.enter(owner),
            zone,
            class,
            knobs,
            None,
            |g, c, more, extra| {
                let (p, c) = steal(c, more, extra);
                (g, p, c)
            },
        )
    }

    /// [`alloc_large_or_steal`](Self::alloc_large_or_steal) with the way
    /// in already tried: `entered` is this pageset's guard, or None when
    /// its lock was busy. A miss takes a batch from `depot` (`depot.rs`)
    /// if it has one, else hands the guard to `steal(guard, class, more,
    /// extra)`, which gives back the guard the blocks then join (the
    /// same, or — a steal made with no lock held — the one it entered
    /// after) with what it stole.
    #[inline]
    pub fn alloc_large_entered<'a>(
        &'a self,
        entered: Option<PagesetGuard<'a>>,
        zone: &Zone,
        class: usize,
        knobs: impl Fn() -> Knobs,
        depot: Option<&Depot>,
        steal: impl FnOnce(
            PagesetGuard<'a>,
            usize,
            usize,
            &mut PageList,
        ) -> (PagesetGuard<'a>, *mut Page, usize),
    ) -> (*mut Page, usize) {
        let Some(mut g) = entered else {
            return self.alloc_large_busy(zone, class);
        };
        let (p, c) = g.large.take(class, &knobs());
        if !p.is_null() {
            // The pageset's own counters see the large lists too.
            g.c.pgalloc += class_pages(c) as u64;
            return (p, c);
        }
        Self::steal_or_refill(g, zone, class, &knobs, depot, steal)
    }

    /// [`alloc_large_or_steal`](Self::alloc_large_or_steal)'s miss.
    #[cold]
    #[inline(never)]
    fn steal_or_refill<'a>(
        mut g: PagesetGuard<'a>,
        zone: &Zone,
        class: usize,
        knobs: &impl Fn() -> Knobs,
        depot: Option<&Depot>,
        steal: impl FnOnce(
            PagesetGuard<'a>,
            usize,
            usize,
            &mut PageList,
        ) -> (PagesetGuard<'a>, *mut Page, usize),
    ) -> (*mut Page, usize) {
        let more = g.large.steal_more(class, zone.pcp_params().batch as usize);
        let mut extra = PageList::new();
        let depot = depot.filter(|_| super::depot::holds(class));
        if let Some(mut d) = depot.and_then(Depot::try_lock) {
            let (p, c) = d.take(zone, class, more, &mut extra, &knobs());
            drop(d);
            g.large.note_depot(class, !p.is_null());
            if !p.is_null() {
                g.c.pgalloc += class_pages(c) as u64;
                // SAFETY: the depot handed over these blocks of class c,
                // whole and no longer on any list.
                unsafe { g.large.adopt(&mut extra, c) };
                return (p, c);
            }
        }
        let (mut g, p, c) = steal(g, class, more, &mut extra);
        if !p.is_null() {
            g.large.c.steals += 1;
            g.c.pgalloc += class_pages(c) as u64;
            // SAFETY: steal handed over these blocks of class c, whole and
            // no longer on any list.
            unsafe { g.large.adopt(&mut extra, c) };
            return (p, c);
        }
        debug_assert!(extra.is_empty());
        Self::refill_large(&mut g, zone, class, &knobs())
    }

    /// A block of `class`, or of a class up to two larger, from this
    /// pageset's large lists for another pageset's miss — if its lock is
    /// free at once (it is never waited for, so a thief holding its own
    /// pageset's lock cannot deadlock with another) — and up to `more`
    /// further blocks of its class on `extra` (`LargeLists::steal`). Null
    /// and `class` otherwise.
    pub fn steal_large(
        &self,
        class: usize,
        more: usize,
        extra: &mut PageList,
    ) -> (*mut Page, usize) {
        match self.enter(false) {
            Some(mut g) => g.large.steal(class, more, extra),
            None => (ptr::null_mut(), class),
        }
    }

    /// [`alloc_large`](Self::alloc_large) when the lock is busy: from the
    /// zone's free lists (without growing it, as a refill).
    #[cold]
    #[inline(never)]
    fn alloc_large_busy(&self, zone: &Zone, class: usize) -> (*mut Page, usize) {
        self.lock_busy.fetch_add(1, Relaxed);
        let pages = class_pages(class);
        let mt = migratetype_for(pages);
        (zone.alloc_exact(pages, 0, mt, Grow::No), class)
    }

    /// [`alloc_large`](Self::alloc_large)'s miss: a refill of the large
    /// lists from the zone, counted as pages moved from and to the zone.
    #[cold]
    #[inline(never)]
    fn refill_large(
        g: &mut PagesetGuard<'_>,
        zone: &Zone,
        class: usize,
        k: &Knobs,
    ) -> (*mut Page, usize) {
        let params = zone.pcp_params();
        let (refilled, drained) = (g.large.c.refill_pages, g.large.c.drained_pages);
        let (p, c) = g.large.refill(zone, class, &params, k);
        if !p.is_null() {
            let pages = class_pages(c) as u64;
            g.c.pgalloc += pages;
            g.c.alloc_zone += g.large.c.refill_pages - refilled;
            g.c.free_zone += g.large.c.drained_pages - drained;
        }
        (p, c)
    }

    /// Frees the exact-size large blocks `heads`, all of `class`, to this
    /// pageset's large lists in one lock hold (a thread's bins spill a
    /// class at a time); straight to the zone, in one zone-lock hold, when
    /// the lock is busy. Returns whether pages went back to the zone.
    ///
    /// # Safety
    /// Each of `heads` heads an exact block of `class_pages(class)` pages
    /// of `zone` that the caller owns and no longer uses; its other
    /// descriptors are `None`.
    #[inline]
    pub unsafe fn free_large(
        &self,
        zone: &Zone,
        heads: &[*mut Page],
        class: usize,
        knobs: impl Fn() -> Knobs,
        owner: bool,
    ) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.free_large_entered(self.enter(owner), zone, heads, class, knobs, None) }
    }

    /// [`free_large`](Self::free_large) with the way in already tried:
    /// `entered` is this pageset's guard, or None when its lock was busy;
    /// what the lists give back goes to `depot` while it has room
    /// (`depot.rs`).
    ///
    /// # Safety
    /// As [`free_large`](Self::free_large).
    #[inline]
    pub unsafe fn free_large_entered(
        &self,
        entered: Option<PagesetGuard<'_>>,
        zone: &Zone,
        heads: &[*mut Page],
        class: usize,
        knobs: impl Fn() -> Knobs,
        depot: Option<&Depot>,
    ) -> bool {
        for &head in heads {
            // SAFETY: the caller owns the block (contract); what it holds
            // is not known yet.
            unsafe { (*head.cast::<LargeBlock>()).resident = NOT_MEASURED };
        }
        let Some(mut g) = entered else {
            // SAFETY: forwarded contract.
            unsafe { self.free_large_busy(zone, heads, class) };
            return true;
        };
        let mut drained = 0;
        let k = knobs();
        for &head in heads {
            // SAFETY: forwarded contract.
            drained += unsafe { g.large.free(zone, head, class, &k, depot) };
        }
        let pages = class_pages(class) * heads.len();
        g.c.pgfree += pages as u64;
        g.c.free_zone += drained as u64;
        if drained == 0 {
            return false;
        }
        drop(g);
        if k.heuristics.has(heuristic::BELOW_HIGH) {
            zone.clear_below_high_if_ok();
        }
        true
    }

    /// [`free_large`](Self::free_large) when the lock is busy: to the
    /// zone.
    ///
    /// # Safety
    /// As [`free_large`](Self::free_large).
    #[cold]
    #[inline(never)]
    unsafe fn free_large_busy(&self, zone: &Zone, heads: &[*mut Page], class: usize) {
        self.lock_busy.fetch_add(1, Relaxed);
        let pages = class_pages(class);
        // SAFETY: forwarded contract.
        unsafe { zone.free_exact_many(heads, pages) };
    }

    /// Measures what the large lists hold and brings it to at most `keep`
    /// pages resident (`LargeLists::take_for_release`): the blocks taken
    /// whole go back to the zone clean, the others' pages past their
    /// heads go back to the OS and the blocks to their lists. The
    /// releases run without the pageset lock, many a system call
    /// (`sys::release_many`). Returns the pages the lists still hold
    /// resident and the resident pages given back.
    pub fn release_large(&self, zone: &Zone, keep: usize) -> (usize, usize) {
        self.release_large_with(zone, keep, &|| self.lock())
    }

    /// [`release_large`](Self::release_large), taking this pageset's lock
    /// each time with `lock` (`PagesetPool::lock_cpu_set`: without a fence
    /// when it is the calling thread's CPU's). Out of line, as a whole:
    /// its frame (a batch of ranges, the measuring buffer) stays off the
    /// give-back's, which runs on small stacks (tests/invisible_stacks.rs).
    #[inline(never)]
    pub(super) fn release_large_with<'a>(
        &'a self,
        zone: &Zone,
        keep: usize,
        lock: &dyn Fn() -> PagesetGuard<'a>,
    ) -> (usize, usize) {
        self.measure_large(zone, lock);
        let (mut whole, mut rest) = (PageList::new(), PageList::new());
        {
            let mut g = lock();
            if g.large.take_for_release(zone, keep, &mut whole, &mut rest) == 0 {
                return (g.large.waiting(), 0);
            }
        }
        let mut released_pages = 0;
        let mut given = 0;
        while !whole.is_empty() || !rest.is_empty() {
            let mut blocks: [(*mut Page, bool); RELEASE_BATCH] =
                [(ptr::null_mut(), false); RELEASE_BATCH];
            let mut ranges = [(0usize, 0usize); RELEASE_BATCH];
            let mut n = 0;
            while n < RELEASE_BATCH && !(whole.is_empty() && rest.is_empty()) {
                // SAFETY: the blocks taken off the lists are ours; a large
                // block's head keeps its page count, and a measured one
                // its head.
                unsafe {
                    let (p, all) = if whole.is_empty() {
                        let p = rest.pop_front();
                        // A block whose first page is not resident has
                        // nothing worth keeping: it goes whole.
                        (p, (*p.cast::<LargeBlock>()).head == 0)
                    } else {
                        (whole.pop_front(), true)
                    };
                    let pages = (*p.cast::<LargeBlock>()).pages as usize;
                    ranges[n] = if all {
                        (page_addr(p), pages * PAGE_SIZE)
                    } else {
                        Residency::rest_range(p)
                    };
                    blocks[n] = (p, all);
                }
                n += 1;
            }
            let ok = sys::release_many(&ranges[..n]);
            for &(p, all) in &blocks[..ok] {
                // SAFETY: still ours, as measured.
                unsafe {
                    let b = p.cast::<LargeBlock>();
                    let kept = if all { 0 } else { (*b).head };
                    given += usize::from((*b).resident - kept);
                }
            }
            {
                let mut z = zone.lock();
                for (i, &(p, all)) in blocks[..n].iter().enumerate() {
                    if !all {
                        continue;
                    }
                    // SAFETY: an exact block of ours, unused; given back
                    // to the OS it reads as zero (clean).
                    unsafe {
                        let pages = (*p.cast::<LargeBlock>()).pages as usize;
                        let clean = i < ok;
                        (*p).flags = if clean { flags::CLEAN } else { 0 };
                        z.free_range(page_addr(p), pages, clean);
                        if clean {
                            z.inner.c.released_bytes += (pages * PAGE_SIZE) as u64;
                            z.inner.c.release_events += 1;
                            released_pages += pages;
                        }
                    }
                }
            }
            let mut g = lock();
            for (i, &(p, all)) in blocks[..n].iter().enumerate() {
                if all {
                    continue;
                }
                // SAFETY: a block taken for its rest, still ours, goes
                // back to its list.
                unsafe {
                    let class = class_of((*p.cast::<LargeBlock>()).pages as usize);
                    g.large.put_back_head(p, class, i < ok);
                }
            }
        }
        let mut g = lock();
        g.large.c.released_pages += released_pages as u64;
        g.large.c.drained_pages += released_pages as u64;
        g.c.free_zone += released_pages as u64;
        (g.large.waiting(), given)
    }

    /// Measures the blocks of the large lists freed since they were last
    /// measured (`class_lists_resident.rs`), without the pageset lock: they
    /// leave the lists meanwhile, so frees on this CPU do not find the
    /// lock busy and go to the zone.
    fn measure_large<'a>(&'a self, zone: &Zone, lock: &dyn Fn() -> PagesetGuard<'a>) {
        let mut blocks = PageList::new();
        {
            let mut g = lock();
            if g.large.waiting() == g.large.resident_measured() {
                return;
            }
            g.large.take_unmeasured(&mut blocks);
        }
        // SAFETY: the blocks taken off the lists are ours.
        unsafe { measure_list(&blocks) };
        let mut g = lock();
        while !blocks.is_empty() {
            // SAFETY: as above; each goes back, measured.
            unsafe {
                let p = blocks.pop_front();
                g.large.put_back_measured(zone, p);
            }
        }
    }

    /// Gives every block of the large lists back to the zone. Returns the
    /// pages drained.
    pub fn drain_large(&self, zone: &Zone) -> usize {
        self.drain_large_with(self.lock(), zone)
    }

    /// [`drain_large`](Self::drain_large) with the lock taken (`g`).
    pub(super) fn drain_large_with(&self, mut g: PagesetGuard<'_>, zone: &Zone) -> usize {
        let n = g.large.drain_all(zone);
        g.c.free_zone += n as u64;
        n
    }
}
