//! A pageset's lists of exact-size large blocks: one list per size class
//! of `page_alloc/block_classes.rs` (3 pages to 4 MiB), in front of the zone the way
//! the order lists are — the kernel keeps pageset lists for orders 0..=3
//! and, since v6.8, one for the pageblock order (THP); ours hold the
//! page-granular blocks of malloc, each of exactly its class's pages.
//!
//! A freed block goes on the list of its class on the freeing thread's
//! CPU — whichever thread allocated it, so a block handed to another
//! thread and freed there costs no zone lock — and the next request of the
//! class on that CPU takes it as it is. The lists self-tune with the
//! pagesets' [`Tuner`] (`tuner.rs`), in pages, under the same knobs:
//!
//! - `high` bounds what the lists hold resident ([`LargeLists::waiting`],
//!   below); a free past it gives the coldest blocks back to the zone
//!   (down to `high - high >> 3`), and the tuner remembers them;
//! - a miss (a refill from the zone) grows `high` by what it takes, as far
//!   as blocks were given back for lack of room since the last tick — the
//!   refill half of patch 7 — up to `high_max`;
//! - `free_count` counts pages freed without allocations (patch 9, under
//!   `PCPALLOC_FREE_COUNT`): at the free_high threshold (by default twice
//!   `high`; `batch` or `5batch` of the zone's batch when set) this CPU
//!   only frees — a consumer — and a free_high drain gives back all but
//!   `high_min`, cutting `high` by `batch << BATCH_SCALE_MAX`;
//! - each tick `high` decays by an eighth towards `high_min` and the excess
//!   goes back (`decay_pcp_high`); an idle pageset is drained whole.
//!
//! With the heuristics off (`base`) the lists hold at most `high_min`.
//!
//! `high` counts a block's pages until the block is measured, then its
//! resident pages (`class_lists_resident.rs`): a block handed out whole and
//! written in part costs what was written, so the lists can keep a
//! thread pool's blocks from one wave to the next, and the give-back at a
//! thread's exit takes back what they hold resident past its `keep`.
//!
//! `high_min` is the pageset's own, at least [`LARGE_HIGH_MIN_PAGES`];
//! `high_max` half the pages in use, split over the CPUs, at least 8 MiB —
//! of the heap as it is, not of the machine, so a small heap caches
//! little.
//!
//! With two CPU pagesets or more, blocks move between CPUs' lists through
//! the depot (`depot.rs`); what the lists give it, and when, is
//! `class_lists/share.rs`.
//!
//! Invariants (checked by `Pageset::check`): `count` = Σ pages of the
//! blocks on the lists; every block on list `c` is a `PcpLarge` head of
//! `class_pages(c)` pages; and the residency counts of
//! `class_lists_resident.rs`.

use crate::geometry::MAX_ORDER_PAGES;
use crate::page::{flags, LargeBlock, Page, PageKind, PageList, NOT_MEASURED};

use super::class_lists_resident::{Lists, Residency};
use super::depot::Depot;

mod share;
use super::tuner::{OwnFreeHigh, Tuner, TunerParams};
use crate::page_alloc::block_classes::{class_of, class_pages, migratetype_for, NR_LARGE_CLASSES};
use crate::page_alloc::knobs::{heuristic, Knobs};
use crate::page_alloc::zone::watermark::PcpParams;
use crate::page_alloc::zone::{Grow, Zone};
use crate::section::page_addr;

/// The least `high` of the large lists: one 1 MiB block's worth.
pub(crate) const LARGE_HIGH_MIN_PAGES: usize = 512;
/// A request may take a cached block up to this many classes larger.
const LARGE_STEP_UP: usize = 2;
/// The most blocks one refill takes (small classes: a batch's worth).
const LARGE_REFILL_MAX: usize = 8;
/// `free_count` stops growing at this many pages (1 GiB).
const LARGE_FREE_COUNT_CAP: i32 = (MAX_ORDER_PAGES << 8) as i32;

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
    /// Pages of blocks given back to the OS from the lists (their
    /// resident pages released, the blocks to the zone).
    pub released_pages: u64,
}

/// The state of a pageset's large lists (see the module docs). Guarded by
/// the pageset lock.
pub struct LargeLists {
    lists: Lists,
    /// Pages on the lists.
    pub count: usize,
    /// What the lists hold resident (`class_lists_resident.rs`).
    res: Residency,
    /// `high` (0: not set up yet; above it, frees go back to the zone),
    /// free_count and what was given back for lack of room, in pages.
    pub t: Tuner,
    /// The bounds as last computed (on a refill or a tick).
    p: TunerParams,
    /// Counters.
    pub c: LargeCounters,
    /// The classes whose misses here found the depot without a block since
    /// the last tick (bit c: class c): requests of this CPU's own, which
    /// its lists do not answer ([`Depot::wanted`]).
    asked: u64,
}

/// The high bounds of the large lists for `params` and `zone`: `high_max`
/// is half the pages in use (handed out or cached) split over the CPUs, at
/// least [`LARGE_HIGH_MAX_FLOOR`] — of what the program holds, not of the
/// zone, whose free memory would otherwise let the caches grow with their
/// own fragmentation.
fn bounds(params: &PcpParams, zone: &Zone) -> TunerParams {
    let high_min = (params.high_min as usize).max(LARGE_HIGH_MIN_PAGES);
    let in_use = zone.managed_pages().saturating_sub(zone.free_pages());
    let high_max = (in_use / LARGE_HIGH_MAX_FRACTION / zone.nr_cpus())
        .max(LARGE_HIGH_MAX_FLOOR)
        .max(high_min);
    TunerParams {
        batch: params.batch as i32,
        high_min: high_min as i32,
        high_max: high_max.min(i32::MAX as usize) as i32,
        keep: high_min as i32,
        ..INITIAL_PARAMS
    }
}

/// The bounds before the first refill or tick computes them: a free_high
/// drain keeps `high_min`, free_count is capped at 1 GiB, and the default
/// free_high threshold is twice `high`.
const INITIAL_PARAMS: TunerParams = TunerParams {
    batch: 0,
    high_min: LARGE_HIGH_MIN_PAGES as i32,
    high_max: LARGE_HIGH_MAX_FLOOR as i32,
    keep: LARGE_HIGH_MIN_PAGES as i32,
    free_count_cap: LARGE_FREE_COUNT_CAP,
    own_free_high: OwnFreeHigh::TwiceHigh,
};

/// The large lists of all CPUs may hold up to 1/this of the pages in use.
const LARGE_HIGH_MAX_FRACTION: usize = 2;
/// `high_max` is at least this many pages (8 MiB) per CPU — twice the
/// 4 MiB a thread cache of tcmalloc's may hold. (1024 and 512 pages made
/// no difference to the first page band's peak RSS in 11 interleaved
/// rounds each: drain-before-grow empties the lists before the zone
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
            res: Residency::new(),
            t: Tuner::new(0),
            p: INITIAL_PARAMS,
            c: LargeCounters {
                alloc: 0,
                hits: 0,
                free: 0,
                refill_pages: 0,
                drained_pages: 0,
                free_high: 0,
                steals: 0,
                released_pages: 0,
            },
            asked: 0,
        }
    }

    /// `high`, in pages (0: not set up yet).
    pub fn high(&self) -> usize {
        self.t.high as usize
    }

    /// What the lists may hold resident, in pages (`class_lists_resident.rs`):
    /// the measured blocks' resident pages and the others' every page.
    /// `high` bounds this.
    #[inline]
    pub fn waiting(&self) -> usize {
        self.res.waiting()
    }

    /// Blocks measured so far.
    pub fn measured(&self) -> u64 {
        self.res.measured
    }

    /// What the measured blocks hold resident.
    pub fn resident_measured(&self) -> usize {
        self.res.resident
    }

    /// Counts block `p` of class `class`, just put on its list.
    ///
    /// # Safety
    /// `p` is a PcpLarge block on list `class` with `resident` set.
    #[inline]
    unsafe fn count_in(&mut self, p: *mut Page, class: usize) {
        self.count += class_pages(class);
        // SAFETY: forwarded contract.
        unsafe { self.res.count_in(p, class) };
    }

    /// Takes block `p` of `pages` pages, just unlinked, out of the counts.
    /// Returns what it counted for in [`waiting`](Self::waiting).
    ///
    /// # Safety
    /// `p` was on the lists.
    #[inline]
    unsafe fn uncount(&mut self, p: *mut Page, pages: usize) -> usize {
        self.count -= pages;
        // SAFETY: forwarded contract.
        unsafe { self.res.uncount(p, pages) }
    }

    /// Measures the blocks freed since the lists were last measured
    /// (`Residency::measure`). Returns the pages measured and how many
    /// were resident.
    pub fn measure(&mut self, zone: &Zone, always: bool) -> (usize, usize) {
        self.res.measure(&self.lists, zone, always)
    }

    /// Takes the blocks not measured off the lists onto `out`, uncounted,
    /// with kind `None`, for the caller to measure without the pageset
    /// lock and put back ([`put_back_measured`](Self::put_back_measured)).
    pub fn take_unmeasured(&mut self, out: &mut PageList) {
        for c in 0..NR_LARGE_CLASSES {
            let n = class_pages(c);
            let mut p = self.lists[c].first();
            while self.res.unmeasured_blocks[c] > 0 && !p.is_null() {
                // SAFETY: the lists hold our blocks (lock held by the
                // caller); one taken off is ours.
                unsafe {
                    let next = (*p).next;
                    if (*p.cast::<LargeBlock>()).resident == NOT_MEASURED {
                        self.lists[c].remove(p);
                        self.uncount(p, n);
                        (*p).set_kind(PageKind::None);
                        out.push_back(p);
                    }
                    p = next;
                }
            }
        }
    }

    /// Puts back block `p`, taken by [`take_unmeasured`](Self::take_unmeasured)
    /// and measured since, at the front of its list.
    ///
    /// # Safety
    /// `p` came off these lists that way, with `resident` and `head` set.
    pub unsafe fn put_back_measured(&mut self, zone: &Zone, p: *mut Page) {
        // SAFETY: forwarded contract.
        unsafe {
            let b = p.cast::<LargeBlock>();
            let pages = (*b).pages as usize;
            let class = class_of(pages);
            self.res
                .note_measured(zone, pages, usize::from((*b).resident));
            (*p).set_kind(PageKind::PcpLarge);
            self.lists[class].push_front(p);
            self.count_in(p, class);
        }
    }

    /// Takes blocks off the lists for the give-back
    /// (`Residency::take_for_release`). Returns what they counted for.
    pub fn take_for_release(
        &mut self,
        zone: &Zone,
        keep: usize,
        whole: &mut PageList,
        rest: &mut PageList,
    ) -> usize {
        let (taken, pages) = self
            .res
            .take_for_release(&mut self.lists, zone, keep, whole, rest);
        self.count -= pages;
        taken
    }

    /// Puts back a block taken for its rest (`Residency::put_back_head`).
    ///
    /// # Safety
    /// As `Residency::put_back_head`.
    pub unsafe fn put_back_head(&mut self, p: *mut Page, class: usize, released: bool) {
        // SAFETY: forwarded contract.
        unsafe { self.res.put_back_head(&mut self.lists, p, class, released) };
        self.count += class_pages(class);
    }

    /// A block of class `class` (MOVABLE) from the lists, the common case:
    /// a cached block of `class`, or of one a little larger (at most
    /// `LARGE_STEP_UP` classes up: under a half more) — a cached block that
    /// serves as it is beats a trip to the zone. Returns the head, with
    /// kind `None` and its CLEAN flag, and the block's class. Counts the
    /// allocation either way; null (and `class`) on a miss, which
    /// [`refill`](Self::refill) then serves.
    #[inline]
    pub fn take(&mut self, class: usize, k: &Knobs) -> (*mut Page, usize) {
        self.t.on_alloc(class_pages(class) as i32, k);
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
                self.uncount(p, class_pages(c));
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
        self.p = bounds(params, zone);
        self.t.raise_to_floor(&self.p, k);
        let below = k.heuristics.has(heuristic::BELOW_HIGH) && zone.check_below_high(0);
        // A miss after blocks were given back for lack of room: make room
        // for this one (the refill half of the auto-tuning).
        self.t.grow_after_give_back(pages as i32, &self.p, below, k);
        let want = self.batch_blocks(pages, params.batch as usize, self.high());
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
            // SAFETY: as above; the rest are cached on the class's list,
            // what they hold not known.
            unsafe {
                let q = got.pop_front();
                (*q.cast::<LargeBlock>()).resident = NOT_MEASURED;
                self.cache(q, class, pages);
            }
        }
        (p, class)
    }

    /// Caches the blocks of class `class` that [`steal`](Self::steal)
    /// took from another pageset's lists for this one, measured or not as
    /// they were there.
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
        let high = self
            .high()
            .max(self.p.high_min as usize)
            .max(LARGE_HIGH_MIN_PAGES);
        self.batch_blocks(class_pages(class), batch, high) - 1
    }

    /// Blocks of `pages` pages one miss takes (the caller's and those
    /// cached): `batch` pages' worth, 1 to [`LARGE_REFILL_MAX`], and no
    /// more than the caller's plus what fits under `high`.
    fn batch_blocks(&self, pages: usize, batch: usize, high: usize) -> usize {
        let room = high.saturating_sub(self.waiting()) / pages;
        (batch / pages).clamp(1, LARGE_REFILL_MAX).min(room + 1)
    }

    /// Puts block `p` of class `class` on its list, counted as its
    /// `resident` and `head` say (`class_lists_resident.rs`).
    ///
    /// # Safety
    /// `p` heads an exact block of `class_pages(class)` pages the caller
    /// owns and hands over, with `resident` set (`NOT_MEASURED`, or as
    /// measured with `head`); its other descriptors are `None`.
    unsafe fn cache(&mut self, p: *mut Page, class: usize, pages: usize) {
        // SAFETY: forwarded contract; the head becomes a cached block.
        unsafe {
            let b = p.cast::<LargeBlock>();
            (*b).pages = pages as u32;
            (*p).set_kind(PageKind::PcpLarge);
            self.lists[class].push_front(p);
            self.count_in(p, class);
        }
    }

    /// Frees block `p` of class `class` to its list; gives blocks back —
    /// to `depot` while it has room (`depot.rs`), else to the zone — when
    /// the lists hold more than `high`, or for free_high (whose cut of
    /// `high` reads the zone's `batch`). Returns the pages given back to
    /// the zone. A block measured on its way here counts towards the
    /// tick's measurements (`class_lists_resident.rs`).
    ///
    /// # Safety
    /// As [`cache`](Self::cache).
    #[inline]
    pub unsafe fn free(
        &mut self,
        zone: &Zone,
        p: *mut Page,
        class: usize,
        k: &Knobs,
        depot: Option<&Depot>,
    ) -> usize {
        let pages = class_pages(class);
        if self.t.high == 0 {
            self.t.high = self.p.high_min;
            self.p.batch = zone.pcp_params().batch as i32;
        }
        // SAFETY: forwarded contract.
        unsafe {
            let r = (*p.cast::<LargeBlock>()).resident;
            if r != NOT_MEASURED {
                self.res.note_measured(zone, pages, usize::from(r));
            }
            self.cache(p, class, pages);
        }
        self.c.free += 1;
        self.t.on_free(pages as i32, &self.p, k);
        if self.t.wants_free_high(self.waiting_i32(), &self.p, k) {
            // What was freed may hold little: blocks handed out whole and
            // written in part (a thread pool's buffers, freed as a wave
            // ends). Freed pages count as much as the blocks just looked
            // at held resident.
            let (pages, resident) = self.measure(zone, false);
            if let Some(held) =
                (i64::from(self.t.free_count) * resident as i64).checked_div(pages as i64)
            {
                self.t.free_count = held as i32;
            }
            if self.t.wants_free_high(self.waiting_i32(), &self.p, k) {
                return self.free_high(zone, k, class, depot);
            }
        }
        if self.waiting() > self.high() {
            return self.drain_over_high(zone, class, k, depot);
        }
        if let Some(d) = depot {
            self.offer(d, class, k);
        }
        0
    }

    /// [`waiting`](Self::waiting) as the tuner counts it.
    #[inline]
    fn waiting_i32(&self) -> i32 {
        self.waiting().min(i32::MAX as usize) as i32
    }

    /// This CPU only frees: what it holds serves others better in the
    /// zone. Keeps `high_min` (the tuner's keep), and shrinks `high`.
    #[cold]
    #[inline(never)]
    fn free_high(&mut self, zone: &Zone, k: &Knobs, class: usize, depot: Option<&Depot>) -> usize {
        self.c.free_high += 1;
        self.p.batch = zone.pcp_params().batch as i32;
        let keep = self.t.free_high(&self.p, k).max(0) as usize;
        let want = self.waiting().saturating_sub(keep);
        self.drain_via(zone, want, class, k, depot).0
    }

    /// Past `high`: gives back down to `high - high >> LARGE_DRAIN_SHIFT`
    /// and remembers it in `missed`.
    #[cold]
    #[inline(never)]
    fn drain_over_high(
        &mut self,
        zone: &Zone,
        class: usize,
        k: &Knobs,
        depot: Option<&Depot>,
    ) -> usize {
        let high = self.high();
        let target = high - (high >> LARGE_DRAIN_SHIFT);
        let want = self.waiting() - target;
        let (drained, held) = self.drain_via(zone, want, class, k, depot);
        self.t.note_given_back(held.min(i32::MAX as usize) as i32);
        drained
    }

    /// The tick: `high` decays by an eighth towards `high_min` and the
    /// excess goes back to the zone; what was given back for lack of room
    /// starts over ([`Tuner::decay`]). Returns the pages given back.
    pub fn tick(&mut self, zone: &Zone, params: &PcpParams, k: &Knobs) -> usize {
        self.p = bounds(params, zone);
        self.asked = 0;
        if self.t.high != 0 {
            self.t.decay(&self.p, k);
        }
        if self.waiting() > self.high() {
            let over = self.waiting() - self.high();
            return self.drain(zone, over, 0).0;
        }
        0
    }

    /// Gives blocks back to the zone, coldest first, starting with class
    /// `first`, in one zone-lock hold, until they held `want` of
    /// [`waiting`](Self::waiting) (everything for `usize::MAX`). Returns
    /// the pages given back and what they held.
    pub fn drain(&mut self, zone: &Zone, want: usize, first: usize) -> (usize, usize) {
        if self.count == 0 || want == 0 {
            return (0, 0);
        }
        let (mut freed, mut held) = (0, 0);
        let mut z = zone.lock();
        let mut class = first;
        let mut empty_in_a_row = 0;
        while (held < want || want == usize::MAX)
            && self.count > 0
            && empty_in_a_row < NR_LARGE_CLASSES
        {
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
                held += self.uncount(p, n);
                (*p).set_kind(PageKind::None);
                let clean = (*p).flags & flags::CLEAN != 0;
                z.free_range(page_addr(p), n, clean);
            }
            freed += n;
            if self.lists[class].is_empty() {
                class = (class + 1) % NR_LARGE_CLASSES;
            }
        }
        drop(z);
        self.c.drained_pages += freed as u64;
        (freed, held)
    }

    /// Gives every block back to the zone. Returns the pages given back.
    pub fn drain_all(&mut self, zone: &Zone) -> usize {
        self.drain(zone, usize::MAX, 0).0
    }

    /// Checks the lists against `count`; returns the pages held.
    pub fn check(&self) -> usize {
        let (mut pages, mut unmeasured, mut resident, mut rest) = (0, 0, 0, 0);
        let mut unmeasured_blocks = [0u32; NR_LARGE_CLASSES];
        for (class, list) in self.lists.iter().enumerate() {
            // SAFETY: list elements are our blocks; the pageset lock is held.
            unsafe { list.check() };
            let mut p = list.first();
            while !p.is_null() {
                // SAFETY: as above.
                unsafe {
                    let r = (*p.cast::<LargeBlock>()).resident;
                    if r == NOT_MEASURED {
                        unmeasured += class_pages(class);
                        unmeasured_blocks[class] += 1;
                    } else {
                        let h = (*p.cast::<LargeBlock>()).head;
                        assert!(
                            h <= r && r as usize <= class_pages(class),
                            "more resident than pages, or a head longer than that"
                        );
                        resident += r as usize;
                        rest += usize::from(r - h);
                    }
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
        assert_eq!(
            (unmeasured, resident, rest, unmeasured_blocks),
            (
                self.res.unmeasured,
                self.res.resident,
                self.res.rest,
                self.res.unmeasured_blocks
            ),
            "large lists' measured counts disagree with the lists"
        );
        pages
    }
}

impl Default for LargeLists {
    fn default() -> Self {
        Self::new()
    }
}
