//! The page allocator: a zone and the pagesets in front of it (the
//! kernel's `alloc_pages` / `__free_pages`), as a value.
//!
//! The allocator's own page allocator is one static in the runtime; tests
//! and the replay make their own. The layers above — slabs and large
//! blocks — are handed a [`Pages`]: this allocator as seen from one caller,
//! that is, which pageset that caller goes through (this CPU's, its
//! thread's, or a virtual CPU's in the replay). They never name a global.
//!
//! Blocks of order ≤ 3 go through the pageset's order lists, larger ones
//! straight to the zone; exact-size blocks (malloc's large blocks, in the
//! size classes of `block_classes.rs`) through the pageset's large lists. When
//! the zone says no, every pageset is drained to the zone and the
//! allocation retried once — the kernel's drain_all_pages before reclaim
//! — before failing. A free that puts pages back in the zone then checks
//! the zone's dirty limit (`zone/dirty.rs`), after every lock is dropped.
//!
//! - `zone/`: the buddy zone, its budget and growth;
//! - `pcp/`: the pagesets;
//! - `block_classes.rs`: the size classes of exact-size blocks;
//! - `knobs.rs`: the heuristics the pagesets run.

pub(crate) mod block_classes;
pub(crate) mod knobs;
pub(crate) mod pcp;
pub(crate) mod zone;

use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::geometry::{MAX_PAGE_ORDER, PAGE_ALLOC_COSTLY_ORDER, PAGE_SHIFT};
use crate::page::{MigrateType, Page};
use knobs::Knobs;
use pcp::pageset::PagesetGuard;
use pcp::{Pageset, PagesetPool};
use zone::{Grow, Zone};

/// A zone and its pagesets, with the heuristics' knobs in force.
pub struct PageAllocator {
    /// The buddy zone.
    pub zone: Zone,
    /// The pagesets in front of it.
    pub pagesets: PagesetPool,
    /// The knobs the pagesets read on every operation ([`Knobs::to_bits`]).
    knobs: AtomicU32,
}

impl PageAllocator {
    /// An unconfigured page allocator (its zone cannot grow until
    /// configured) with the default knobs.
    pub const fn new() -> PageAllocator {
        PageAllocator {
            zone: Zone::new(),
            pagesets: PagesetPool::new(),
            knobs: AtomicU32::new(Knobs::DEFAULT.to_bits()),
        }
    }

    /// The knobs in force.
    #[inline]
    pub fn knobs(&self) -> Knobs {
        Knobs::from_bits(self.knobs.load(Relaxed))
    }

    /// The knobs in force as one word ([`Knobs::to_bits`]), for a cache
    /// that keeps them to compare.
    #[inline]
    pub fn knob_bits(&self) -> u32 {
        self.knobs.load(Relaxed)
    }

    /// Replaces the knobs; pagesets pick them up on their next operation.
    pub fn set_knobs(&self, k: Knobs) {
        self.knobs.store(k.to_bits(), Relaxed);
    }

    /// This page allocator as seen through `pageset` (a thread's or a
    /// virtual CPU's, `owner` if the caller owns it), or through the
    /// calling thread's CPU when `pageset` is null.
    #[inline]
    pub fn through(&self, pageset: *const Pageset, owner: bool) -> Pages<'_> {
        Pages {
            alloc: self,
            pageset,
            owner,
        }
    }

    /// Drains every pageset to the zone. Returns the pages drained.
    pub fn drain_all(&self) -> usize {
        self.pagesets.drain_all(&self.zone)
    }

    /// Bytes the zone manages.
    pub fn managed_bytes(&self) -> usize {
        self.zone.managed_pages() << PAGE_SHIFT
    }
}

impl Default for PageAllocator {
    fn default() -> Self {
        Self::new()
    }
}

/// A page allocator as seen from one caller: which pageset its blocks of
/// order ≤ 3 go through. Cheap to make and copy.
#[derive(Clone, Copy)]
pub struct Pages<'a> {
    alloc: &'a PageAllocator,
    /// Null: the pageset of the CPU the calling thread runs on.
    pageset: *const Pageset,
    /// The caller owns `pageset` (a thread pageset: entered without
    /// atomics).
    owner: bool,
}

impl<'a> Pages<'a> {
    /// The page allocator behind.
    #[inline]
    pub fn allocator(&self) -> &'a PageAllocator {
        self.alloc
    }

    /// The zone behind.
    #[inline]
    pub fn zone(&self) -> &'a Zone {
        &self.alloc.zone
    }

    /// The caller's pageset, entered if its lock is free (None: busy).
    #[inline(always)]
    fn enter(&self) -> (&'a Pageset, Option<PagesetGuard<'a>>) {
        if self.pageset.is_null() {
            self.alloc.pagesets.enter_cpu()
        } else {
            // SAFETY: pagesets live as long as their pool (forever for the
            // runtime's, the test's lifetime otherwise).
            let ps = unsafe { &*self.pageset };
            (ps, ps.enter(self.owner))
        }
    }

    /// Allocates a block of `order` for `mt`. Returns the head descriptor
    /// with kind `None` (the caller gives it one) and CLEAN telling whether
    /// the memory reads as zero, or null when out of memory.
    #[inline]
    pub fn alloc(&self, order: u32, mt: MigrateType) -> *mut Page {
        debug_assert!(order <= MAX_PAGE_ORDER);
        let zone = self.zone();
        let p = if order <= PAGE_ALLOC_COSTLY_ORDER {
            let (ps, entered) = self.enter();
            ps.alloc_entered(entered, zone, order, mt, &self.alloc.knobs())
        } else {
            zone.alloc(order, mt)
        };
        if p.is_null() {
            self.alloc_slow(order, mt)
        } else {
            p
        }
    }

    #[cold]
    fn alloc_slow(&self, order: u32, mt: MigrateType) -> *mut Page {
        if !self.drained_all() {
            return core::ptr::null_mut();
        }
        self.zone().alloc(order, mt)
    }

    /// The zone said no: drain every pageset, as the kernel's
    /// drain_all_pages before reclaim. Whether there was anything to drain
    /// (then the caller retries once).
    fn drained_all(&self) -> bool {
        if self.alloc.pagesets.total_count() == 0 {
            return false;
        }
        self.alloc.drain_all();
        self.zone().count_drain_all();
        true
    }

    /// Allocates an exact-size MOVABLE block of size class `class`
    /// (`block_classes.rs`), or of a slightly larger class a pageset list holds,
    /// through the pageset's large lists. Returns the head, with kind
    /// `None` and CLEAN telling whether the memory reads as zero, or null
    /// when out of memory; and the block's class.
    #[inline]
    pub fn alloc_large(&self, class: usize) -> (*mut Page, usize) {
        let (ps, entered) = self.enter();
        let pool = &self.alloc.pagesets;
        let (p, c) = ps.alloc_large_entered(
            entered,
            self.zone(),
            class,
            || self.alloc.knobs(),
            pool.depot_for(ps),
            // A thread's own pageset is not a CPU's: it takes from none.
            |g, class, more, extra| {
                let (p, c) = pool.steal_large(ps, class, more, extra);
                (g, p, c)
            },
        );
        if p.is_null() {
            return self.alloc_large_slow(class);
        }
        (p, c)
    }

    /// [`alloc_large`](Self::alloc_large) when neither the pageset nor the
    /// zone's free lists had a block: every CPU pageset's large lists go
    /// back to the zone first, where their blocks merge with the free ones
    /// around them (the kernel's `drain_all_pages` when a high-order
    /// request fails), then the zone may grow; at a memory limit, once more
    /// after every pageset drained whole.
    ///
    /// A block the free lists cannot fit is the zone's fragmentation, and
    /// the pagesets' blocks are part of it: growing instead would keep the
    /// caches and the fragments both. On the page-granular band (8–256 KiB)
    /// this keeps the heap at 32 MiB where it grew to 44.
    #[cold]
    #[inline(never)]
    fn alloc_large_slow(&self, class: usize) -> (*mut Page, usize) {
        let zone = self.zone();
        let pages = block_classes::class_pages(class);
        let mt = block_classes::migratetype_for(pages);
        if self.alloc.pagesets.drain_all_large(zone) > 0 {
            zone.count_drain_before_grow();
        }
        let p = zone.alloc_exact(pages, 0, mt, Grow::Yes);
        if !p.is_null() || !self.drained_all() {
            return (p, class);
        }
        (zone.alloc_exact(pages, 0, mt, Grow::Yes), class)
    }

    /// Allocates an exact block of `pages` pages aligned to `2^align_order`
    /// pages, from the zone (an aligned block cannot come from a class
    /// list). As [`alloc_large`](Self::alloc_large) otherwise.
    pub fn alloc_exact_aligned(&self, pages: usize, align_order: u32) -> *mut Page {
        let zone = self.zone();
        let mt = block_classes::migratetype_for(pages);
        let p = zone.alloc_exact(pages, align_order, mt, Grow::Yes);
        if p.is_null() && self.drained_all() {
            return zone.alloc_exact(pages, align_order, mt, Grow::Yes);
        }
        p
    }

    /// Frees an exact block of size class `class` to the pageset's large
    /// list of that class.
    ///
    /// # Safety
    /// `head` heads an exact block of this allocator's zone of
    /// `class_pages(class)` pages that the caller owns and no longer uses;
    /// its kind is `None`, as are its other descriptors. True when pages
    /// went on to the zone (a drain), where a give-back may find them.
    #[inline]
    pub unsafe fn free_large(&self, head: *mut Page, class: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.free_large_many(&[head], class) }
    }

    /// Frees the exact blocks `heads`, all of size class `class`, to the
    /// pageset's large list of that class in one lock hold.
    ///
    /// # Safety
    /// As [`free_large`](Self::free_large), for each block. True when pages
    /// went on to the zone.
    #[inline]
    pub unsafe fn free_large_many(&self, heads: &[*mut Page], class: usize) -> bool {
        let zone = self.zone();
        // SAFETY: forwarded contract.
        let to_zone = unsafe {
            let (ps, entered) = self.enter();
            let depot = self.alloc.pagesets.depot_for(ps);
            ps.free_large_entered(entered, zone, heads, class, || self.alloc.knobs(), depot)
        };
        if to_zone {
            zone.balance_dirty();
        }
        to_zone
    }

    /// Frees an exact block of `pages` pages: to the pageset's large list
    /// of its class when `pages` is a class size, else to the zone.
    ///
    /// # Safety
    /// `head` heads an exact block of this allocator's zone of `pages`
    /// pages that the caller owns and no longer uses; its kind is `None`,
    /// as are its other descriptors. True when pages went to the zone.
    #[inline]
    pub unsafe fn free_exact(&self, head: *mut Page, pages: usize) -> bool {
        let class = block_classes::class_of(pages);
        if block_classes::class_pages(class) == pages {
            // SAFETY: forwarded contract.
            unsafe { self.free_large(head, class) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { self.zone().free_exact(head, pages) };
            self.zone().balance_dirty();
            true
        }
    }

    /// Frees block `head` of `order`.
    ///
    /// # Safety
    /// `head` heads a block of this allocator's zone of `order` that the
    /// caller owns and no longer uses; its kind is `None`, as are its other
    /// descriptors. Out of line: the order lists' way in on the free side
    /// is one function (a slab's give-back, a page block's free), which the
    /// rseq test finds by name (`tests/rseq.rs`).
    #[inline(never)]
    pub unsafe fn free(&self, head: *mut Page, order: u32) {
        let zone = self.zone();
        let to_zone = if order <= PAGE_ALLOC_COSTLY_ORDER {
            // SAFETY: forwarded contract.
            unsafe {
                let (ps, entered) = self.enter();
                ps.free_entered(entered, zone, head, order, &self.alloc.knobs())
            }
        } else {
            // SAFETY: forwarded contract.
            unsafe { zone.free(head, order) };
            true
        };
        if to_zone {
            zone.balance_dirty();
        }
    }

    /// Frees block `head` of `order` straight to the zone, bypassing the
    /// pagesets (the maintenance tick giving idle memory back).
    ///
    /// # Safety
    /// As [`free`](Self::free).
    pub unsafe fn free_to_zone(&self, head: *mut Page, order: u32) {
        // SAFETY: forwarded contract.
        unsafe { self.zone().free(head, order) }
    }

    /// Whether the zone is below its high watermark (ZONE_BELOW_HIGH):
    /// caches above the pagesets stop growing too.
    #[inline]
    pub fn below_high(&self) -> bool {
        self.zone().below_high()
    }
}
