//! A pageset's lists of exact-size large blocks: one list per size class
//! of `page_alloc/classes.rs` (3 pages to 4 MiB), in front of the zone the way
//! the order lists are — the kernel keeps pageset lists for orders 0..=3
//! and, since v6.8, one for the pageblock order (THP); ours hold the
//! page-granular blocks of malloc, each of exactly its class's pages.
//!
//! A freed block goes on the list of its class on the freeing thread's
//! CPU — whichever thread allocated it, so a block handed to another
//! thread and freed there costs no zone lock — and the next request of the
//! class on that CPU takes it as it is. The lists self-tune as a pageset
//! does (seed 000), in pages:
//!
//! - `high` bounds the pages held; a free past it gives the coldest blocks
//!   back to the zone, and remembers them in `missed`;
//! - a miss (a refill from the zone) grows `high` by what it takes, as far
//!   as blocks were given back for lack of room since the last tick — the
//!   refill half of patch 7 — up to `high_max`, never under BELOW_HIGH;
//! - `free_count` counts pages freed since the last allocation (halved by
//!   each allocation, as patch 9's): when it reaches twice `high`, this CPU
//!   only frees — a consumer — and a free_high drain gives back all but
//!   `high_min`, shrinking `high` (patches 1–3's intent for high orders);
//! - each tick `high` decays by an eighth towards `high_min` and the excess
//!   goes back (`decay_pcp_high`); an idle pageset is drained whole.
//!
//! `high_min` is the pageset's own, at least [`LARGE_HIGH_MIN_PAGES`];
//! `high_max` half the pages in use, split over the CPUs, at least 8 MiB —
//! of the heap as it is, not of the machine, so a small heap caches
//! little.
//!
//! Invariants (checked by `Pageset::check`): `count` = Σ pages of the
//! blocks on the lists; every block on list `c` is a `PcpLarge` head of
//! `class_pages(c)` pages.

use crate::geometry::MAX_ORDER_PAGES;
use crate::page::{LargeBlock, Page, PageKind, PageList};
use crate::page_alloc::classes::{class_pages, migratetype_for, NR_LARGE_CLASSES};
use crate::page_alloc::knobs::{heuristic, Knobs};
use crate::page_alloc::zone::watermark::PcpParams;
use crate::page_alloc::zone::{Grow, Zone};

/// The least `high` of the large lists: one 1 MiB block's worth.
pub const LARGE_HIGH_MIN_PAGES: usize = 512;
/// A request may take a cached block up to this many classes larger.
const LARGE_STEP_UP: usize = 2;
/// The most blocks one refill takes (small classes: a batch's worth).
const LARGE_REFILL_MAX: usize = 8;
/// high decays by high >> this each tick.
const LARGE_HIGH_DECAY_SHIFT: u32 = 3;

/// Counters of a pageset's large lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LargeCounters {
    /// Blocks allocated through the lists.
    pub alloc: u64,
    /// Of those, served from a list without the zone.
    pub hits: u64,
    /// Blocks freed to the lists.
    pub free: u64,
    /// Pages taken from the zone on refills.
    pub refill_pages: u64,
    /// Pages given back to the zone (over high, free_high, decay, drain).
    pub drained_pages: u64,
    /// free_high drains (a CPU that only frees).
    pub free_high: u64,
    /// Misses served by a block taken from another pageset's lists.
    pub steals: u64,
}

/// The state of a pageset's large lists (see the module docs). Guarded by
/// the pageset lock.
pub struct LargeLists {
    lists: [PageList; NR_LARGE_CLASSES],
    /// Pages on the lists.
    pub count: usize,
    /// Above it, frees go back to the zone (0: not set up yet).
    pub high: usize,
    /// Pages given back for lack of room since the last tick.
    pub missed: usize,
    /// Pages freed since the last allocation (halved by each).
    pub free_count: usize,
    /// `high_min` as last computed (on a refill or a tick).
    high_min: usize,
    /// Counters.
    pub c: LargeCounters,
}

/// The high bounds of the large lists for `params` and `zone`: `high_max`
/// is half the pages in use (handed out or cached) split over the CPUs, at
/// least [`LARGE_HIGH_MAX_FLOOR`] — of what the program holds, not of the
/// zone, whose free memory would otherwise let the caches grow with their
/// own fragmentation.
fn bounds(params: &PcpParams, zone: &Zone) -> (usize, usize) {
    let high_min = (params.high_min as usize).max(LARGE_HIGH_MIN_PAGES);
    let in_use = zone.managed_pages().saturating_sub(zone.free_pages());
    let high_max = (in_use / LARGE_HIGH_MAX_FRACTION / zone.nr_cpus())
        .max(LARGE_HIGH_MAX_FLOOR)
        .max(high_min);
    (high_min, high_max)
}

/// The large lists of all CPUs may hold up to 1/this of the pages in use.
const LARGE_HIGH_MAX_FRACTION: usize = 2;
/// `high_max` is at least this many pages (8 MiB) per CPU — twice the
/// 4 MiB a thread cache of tcmalloc's may hold. (1024 and 512 pages made
/// no difference to the first page band's peak RSS, 11 interleaved rounds
/// each, 2026-12-02: drain-before-grow empties the lists before the zone
/// grows.)
const LARGE_HIGH_MAX_FLOOR: usize = 2048;
/// Past `high`, a free gives back down to `high - high >> this`, so the
/// next frees need not take the zone lock again at once.
const LARGE_DRAIN_SHIFT: u32 = 3;

impl LargeLists {
    /// Empty lists.
    pub const fn new() -> LargeLists {
        LargeLists {
            lists: [const { PageList::new() }; NR_LARGE_CLASSES],
            count: 0,
            high: 0,
            missed: 0,
            free_count: 0,
            high_min: LARGE_HIGH_MIN_PAGES,
            c: LargeCounters {
                alloc: 0,
                hits: 0,
                free: 0,
                refill_pages: 0,
                drained_pages: 0,
                free_high: 0,
                steals: 0,
            },
        }
    }

    /// A block of class `class` (MOVABLE) from the lists, the common case:
    /// a cached block of `class`, or of one a little larger (at most
    /// `LARGE_STEP_UP` classes up: under a half more) — a cached block that
    /// serves as it is beats a trip to the zone. Returns the head, with
    /// kind `None` and its CLEAN flag, and the block's class. Counts the
    /// allocation either way; null (and `class`) on a miss, which
    /// [`refill`](Self::refill) then serves.
    #[inline]
    pub fn take(&mut self, class: usize) -> (*mut Page, usize) {
        self.free_count >>= 1;
        self.c.alloc += 1;
        let r = self.pop_fitting(class, false);
        if !r.0.is_null() {
            self.c.hits += 1;
        }
        r
    }

    /// Gives another pageset, whose lists had no block of `class`, one of
    /// `class` or a class up to `LARGE_STEP_UP` larger: the coldest, so
    /// what this CPU reuses next stays; and up to `more` further blocks of
    /// that block's class onto `extra`, at most half (rounded up) of what
    /// that list still holds, for the thief to cache — a consumer's CPU feeds a producer's
    /// in batches, one lock hold each, as a refill from the zone would.
    /// Not counted as an allocation here (these lists' tuning follows this
    /// CPU's own requests); the thief counts the steal. Returns the head,
    /// with kind `None`, and the block's class; null if none.
    pub fn steal(&mut self, class: usize, more: usize, extra: &mut PageList) -> (*mut Page, usize) {
        let (p, c) = self.pop_fitting(class, true);
        if p.is_null() || more == 0 {
            return (p, c);
        }
        for _ in 0..more.min(self.lists[c].len().div_ceil(2)) {
            // SAFETY: a popped block is ours and goes on `extra`, the
            // thief's; the count says the list is not empty.
            unsafe { extra.push_front(self.pop_from(c, true)) };
        }
        (p, c)
    }

    /// Pops a block of `class` or of a class up to `LARGE_STEP_UP`
    /// larger — the newest of its list, or the coldest if `coldest` —
    /// with kind `None`, and its class; null and `class` if none.
    #[inline(always)]
    fn pop_fitting(&mut self, class: usize, coldest: bool) -> (*mut Page, usize) {
        let last = (class + LARGE_STEP_UP).min(NR_LARGE_CLASSES - 1);
        for c in class..=last {
            let p = self.pop_from(c, coldest);
            if !p.is_null() {
                return (p, c);
            }
        }
        (core::ptr::null_mut(), class)
    }

    /// Takes the coldest (last) or the hottest (first) block off the list
    /// of class `c`, uncounted and of kind `None`; null if it is empty.
    fn pop_from(&mut self, c: usize, coldest: bool) -> *mut Page {
        // SAFETY: the class lists hold our PcpLarge blocks; a popped block
        // is ours.
        unsafe {
            let list = &mut self.lists[c];
            let p = if coldest {
                list.pop_back()
            } else {
                list.pop_front()
            };
            if !p.is_null() {
                self.count -= class_pages(c);
                (*p).set_kind(PageKind::None);
            }
            p
        }
    }

    /// A block of class `class` after [`take`](Self::take) found nothing:
    /// grows `high` as far as blocks were given back for lack of room, and
    /// takes blocks of `class` from the zone in one lock hold (several for
    /// small classes) — one for the caller, the rest cached. Null when the
    /// zone's free lists have none (the zone does not grow here).
    #[cold]
    #[inline(never)]
    pub fn refill(
        &mut self,
        zone: &Zone,
        class: usize,
        params: &PcpParams,
        k: &Knobs,
    ) -> (*mut Page, usize) {
        let pages = class_pages(class);
        let (high_min, high_max) = bounds(params, zone);
        self.high_min = high_min;
        self.high = self.high.max(high_min);
        let below = k.heuristics.has(heuristic::BELOW_HIGH) && zone.check_below_high(0);
        if self.missed > 0 && !below && k.heuristics.has(heuristic::AUTO_TUNE) {
            // A miss after blocks were given back for lack of room: make
            // room for this one (the refill half of the auto-tuning).
            let grow = pages.min(self.missed);
            self.missed -= grow;
            self.high = (self.high + grow).min(high_max);
        }
        let want = self.batch_blocks(pages, params.batch as usize, self.high);
        let mut got = PageList::new();
        // Never grows the zone: a miss there drains every pageset's large
        // lists before the zone may grow (`Pages::alloc_large`).
        let mt = migratetype_for(pages);
        let n = zone.rmqueue_exact_bulk(pages, want, mt, &mut got, Grow::No);
        if n == 0 {
            return (core::ptr::null_mut(), class);
        }
        self.c.refill_pages += (n * pages) as u64;
        // SAFETY: got holds the n blocks just taken, ours.
        let p = unsafe { got.pop_front() };
        for _ in 1..n {
            // SAFETY: as above; the rest are cached on the class's list.
            unsafe {
                let q = got.pop_front();
                self.cache(q, class, pages);
            }
        }
        (p, class)
    }

    /// Caches the blocks of class `class` that [`steal`](Self::steal)
    /// took from another pageset's lists for this one.
    ///
    /// # Safety
    /// Every block of `blocks` heads an exact block of
    /// `class_pages(class)` pages the caller owns and hands over; its
    /// other descriptors are `None`.
    pub unsafe fn adopt(&mut self, blocks: &mut PageList, class: usize) {
        let pages = class_pages(class);
        while !blocks.is_empty() {
            // SAFETY: forwarded contract.
            unsafe {
                let q = blocks.pop_front();
                self.cache(q, class, pages);
            }
        }
    }

    /// How many blocks of `class` beyond the one a miss takes a steal may
    /// bring, as a refill from the zone would take: a batch's worth, up to
    /// [`LARGE_REFILL_MAX`], within `high` (at least `high_min`, or
    /// [`LARGE_HIGH_MIN_PAGES`] before the first refill sets it).
    pub fn steal_more(&self, class: usize, batch: usize) -> usize {
        let high = self.high.max(self.high_min).max(LARGE_HIGH_MIN_PAGES);
        self.batch_blocks(class_pages(class), batch, high) - 1
    }

    /// Blocks of `pages` pages one miss takes (the caller's and those
    /// cached): `batch` pages' worth, 1 to [`LARGE_REFILL_MAX`], and no
    /// more than the caller's plus what fits under `high`.
    fn batch_blocks(&self, pages: usize, batch: usize, high: usize) -> usize {
        let room = high.saturating_sub(self.count) / pages;
        (batch / pages).clamp(1, LARGE_REFILL_MAX).min(room + 1)
    }

    /// Puts block `p` of class `class` on its list.
    ///
    /// # Safety
    /// `p` heads an exact block of `class_pages(class)` pages the caller
    /// owns and hands over; its other descriptors are `None`.
    unsafe fn cache(&mut self, p: *mut Page, class: usize, pages: usize) {
        // SAFETY: forwarded contract; the head becomes a cached block.
        unsafe {
            let b = p.cast::<LargeBlock>();
            (*b).pages = pages as u32;
            (*p).set_kind(PageKind::PcpLarge);
            self.lists[class].push_front(p);
        }
        self.count += pages;
    }

    /// Frees block `p` of class `class` to its list; gives blocks back to
    /// the zone when the lists hold more than `high`, or for free_high
    /// (whose cut of `high` reads the zone's `batch`). Returns the pages
    /// given back.
    ///
    /// # Safety
    /// As [`cache`](Self::cache).
    /// `knobs` reads the knobs in force, only when a decision needs them.
    #[inline]
    pub unsafe fn free(
        &mut self,
        zone: &Zone,
        p: *mut Page,
        class: usize,
        knobs: impl Fn() -> Knobs,
    ) -> usize {
        let pages = class_pages(class);
        let high_min = self.high_min;
        if self.high == 0 {
            self.high = high_min;
        }
        // SAFETY: forwarded contract.
        unsafe { self.cache(p, class, pages) };
        self.c.free += 1;
        self.free_count = (self.free_count + pages).min(MAX_ORDER_PAGES << 8);
        if self.free_count >= 2 * self.high && self.count > high_min {
            let k = knobs();
            if k.heuristics.has(heuristic::FREE_COUNT) {
                return self.free_high(zone, &k, class);
            }
        }
        if self.count > self.high {
            return self.drain_over_high(zone, class);
        }
        0
    }

    /// This CPU only frees: what it holds serves others better in the
    /// zone. Keeps `high_min`, and shrinks `high`.
    #[cold]
    #[inline(never)]
    fn free_high(&mut self, zone: &Zone, k: &Knobs, class: usize) -> usize {
        self.c.free_high += 1;
        let cut = (zone.pcp_params().batch as usize) << k.batch_scale_max;
        self.high = self.high.saturating_sub(cut).max(self.high_min);
        self.free_count = 0;
        self.drain(zone, self.count - self.high_min, class)
    }

    /// Past `high`: gives back down to `high - high >> LARGE_DRAIN_SHIFT`
    /// and remembers it in `missed`.
    #[cold]
    #[inline(never)]
    fn drain_over_high(&mut self, zone: &Zone, class: usize) -> usize {
        let target = self.high - (self.high >> LARGE_DRAIN_SHIFT);
        let drained = self.drain(zone, self.count - target, class);
        self.missed += drained;
        drained
    }

    /// The tick: `high` decays by an eighth towards `high_min` and the
    /// excess goes back to the zone; `missed` starts over. Returns the
    /// pages given back.
    pub fn tick(&mut self, zone: &Zone, params: &PcpParams) -> usize {
        let (high_min, _) = bounds(params, zone);
        self.high_min = high_min;
        self.missed = 0;
        if self.high > high_min {
            self.high = (self.high - (self.high >> LARGE_HIGH_DECAY_SHIFT)).max(high_min);
        }
        if self.count > self.high {
            let over = self.count - self.high;
            return self.drain(zone, over, 0);
        }
        0
    }

    /// Gives at least `pages` pages back to the zone (everything for
    /// `usize::MAX`), coldest blocks first, starting with class `first`,
    /// in one zone-lock hold. Returns the pages given back.
    pub fn drain(&mut self, zone: &Zone, pages: usize, first: usize) -> usize {
        if self.count == 0 || pages == 0 {
            return 0;
        }
        let mut freed = 0;
        let mut z = zone.lock();
        let mut class = first;
        let mut empty_in_a_row = 0;
        while freed < pages && self.count > 0 && empty_in_a_row < NR_LARGE_CLASSES {
            if self.lists[class].is_empty() {
                empty_in_a_row += 1;
                class = (class + 1) % NR_LARGE_CLASSES;
                continue;
            }
            empty_in_a_row = 0;
            let n = class_pages(class);
            // SAFETY: the list is non-empty; its blocks are ours (pageset
            // lock held by the caller).
            unsafe {
                let p = self.lists[class].pop_back();
                (*p).set_kind(PageKind::None);
                let clean = (*p).flags & crate::page::flags::CLEAN != 0;
                z.free_range(crate::section::page_addr(p), n, clean);
            }
            self.count -= n;
            freed += n;
            if self.lists[class].is_empty() {
                class = (class + 1) % NR_LARGE_CLASSES;
            }
        }
        drop(z);
        self.c.drained_pages += freed as u64;
        freed
    }

    /// Checks the lists against `count`; returns the pages held.
    pub fn check(&self) -> usize {
        let mut pages = 0;
        for (class, list) in self.lists.iter().enumerate() {
            // SAFETY: list elements are our blocks; the pageset lock is held.
            unsafe { list.check() };
            let mut p = list.first();
            while !p.is_null() {
                // SAFETY: as above.
                unsafe {
                    assert_eq!(
                        (*p).kind(),
                        PageKind::PcpLarge,
                        "a large list holds another kind"
                    );
                    assert_eq!(
                        (*p.cast::<LargeBlock>()).pages as usize,
                        class_pages(class),
                        "a block on the wrong class list"
                    );
                    p = (*p).next;
                }
                pages += class_pages(class);
            }
        }
        assert_eq!(
            pages, self.count,
            "large lists' count disagrees with the lists"
        );
        pages
    }
}

impl Default for LargeLists {
    fn default() -> Self {
        Self::new()
    }
}
