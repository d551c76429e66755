//! The depot: one shared stock of exact-size large blocks, a list per size
//! class, between the CPU pagesets' class lists (`class_lists.rs`) and the
//! zone — tcmalloc's transfer cache, for page-granular blocks.
//!
//! A CPU's class lists over their `high` (or draining for free_high, a
//! consumer's CPU) put the blocks they give back here while the depot has
//! room, and the zone gets the rest; a miss on another CPU's lists takes a
//! refill's batch from here before it asks the zone. So the blocks a
//! consumer's CPU frees reach a producer's CPU as they are, without either
//! taking the other's pageset lock: the depot has a lock of its own, a
//! plain one that no restartable sequence takes, so a CPU pageset entered
//! by rseq (`sys/rseq.rs`) is never taken from elsewhere on these paths —
//! no `membarrier` fence, and no pageset held by a thief while its own
//! CPU's entries find it busy. (Before, a miss took another CPU's
//! pageset lock and its blocks: `PagesetPool::steal_large`, which under
//! rseq cost a fence per steal.) Like a pageset's lock on the alloc and
//! free paths, the depot's is only tried: busy, the blocks go to (or come
//! from) the zone.
//!
//! The depot is a cache level and tunes itself with the one rule
//! (`tuner.rs`), in pages of what its blocks may hold resident:
//! `high` starts at `high_min`; blocks that found no room are remembered
//! (`missed`), and a miss that finds the depot without a block grows `high`
//! by as much (up to `high_max`); each tick `high` loses an eighth and
//! the excess goes back to the zone, and a depot idle for
//! [`EXPIRE_TICKS`] ticks goes back whole. No free_high (it only ever
//! takes what a level below gives back). With AUTO_TUNE off it holds at
//! most `high_min`. Every drain-all empties it first (`PagesetPool`).
//!
//! Its blocks keep their kind `PcpLarge` and their measured residency
//! (`class_lists_resident.rs`): a class list that takes one counts it as
//! the list it came from did.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::page::{flags, LargeBlock, Page, PageKind, PageList, NOT_MEASURED};
use crate::page_alloc::block_classes::{class_of, class_pages, NR_LARGE_CLASSES};
use crate::page_alloc::knobs::{heuristic, Knobs};
use crate::page_alloc::zone::Zone;
use crate::section::page_addr;
use crate::sync::{Guard, Locked};

use super::tuner::{OwnFreeHigh, Tuner, TunerParams};

/// A request may take a block up to this many classes larger (as from a
/// class list).
const STEP_UP: usize = 2;
/// The depot holds blocks of up to 256 KiB (the classes up to this one),
/// the thread bins' largest: the blocks programs hand between threads by
/// the thousand. Larger ones go between CPUs through the zone, as before
/// (a 4 MiB block in the depot is memory the zone's dirty limit and
/// give-back no longer see: tests/preload.rs's fork_release).
pub(crate) const MAX_CLASS: usize = class_of(64);

/// Whether the depot takes blocks of `class`.
#[inline(always)]
pub(crate) const fn holds(class: usize) -> bool {
    class <= MAX_CLASS
}

/// The classes the depot holds, as bits.
const CLASS_MASK: u64 = (1u64 << (MAX_CLASS + 1)) - 1;
/// `high_min`: 2 MiB, a CPU's class lists' least `high`
/// (`class_lists::LARGE_HIGH_MIN_PAGES`).
const HIGH_MIN: usize = 512;
/// Ticks without a put or a take after which the depot goes back to the
/// zone whole, as an idle pageset (`pageset::PCP_EXPIRE_TICKS`).
const EXPIRE_TICKS: u32 = 3;
/// `high_max` is at least this many pages (8 MiB), as a CPU's class lists.
const HIGH_MAX_FLOOR: usize = 2048;
/// The depot may hold up to 1/this of the pages in use.
const HIGH_MAX_FRACTION: usize = 4;

/// Counters of the depot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DepotCounters {
    /// Blocks class lists put here (instead of the zone).
    pub put: u64,
    /// Blocks misses took from here.
    pub taken: u64,
    /// Class-list misses served from here.
    pub hits: u64,
    /// Misses that found nothing here (and asked the class lists).
    pub wanted: u64,
    /// Blocks class lists put here for those misses.
    pub answered: u64,
    /// Pages that found no room here and went to the zone.
    pub full_pages: u64,
    /// Pages given back to the zone (decay, expiry, drain-all).
    pub drained_pages: u64,
    /// Tries that found the depot's lock busy (the zone served them).
    pub busy: u64,
    /// Pages held now.
    pub pages: u64,
    /// `high` now.
    pub high: u64,
}

impl DepotCounters {
    /// All zero (for const and zeroed snapshots).
    pub const ZERO: DepotCounters = DepotCounters {
        put: 0,
        taken: 0,
        hits: 0,
        wanted: 0,
        answered: 0,
        full_pages: 0,
        drained_pages: 0,
        busy: 0,
        pages: 0,
        high: 0,
    };
}

/// What block `p` of `pages` pages counts for in what the depot holds: its
/// resident pages once measured, else every page.
///
/// # Safety
/// `p` heads a large block the caller holds.
unsafe fn held(p: *mut Page, pages: usize) -> usize {
    // SAFETY: forwarded contract.
    let r = unsafe { (*p.cast::<LargeBlock>()).resident };
    if r == NOT_MEASURED {
        pages
    } else {
        usize::from(r)
    }
}

/// The lock-guarded part of the depot.
pub struct DepotInner {
    lists: [PageList; NR_LARGE_CLASSES],
    /// Pages on the lists.
    count: usize,
    /// What the blocks may hold resident, in pages (`held`); `high`
    /// bounds this.
    waiting: usize,
    t: Tuner,
    p: TunerParams,
    c: DepotCounters,
    /// puts + takes at the last tick, and the idle ticks since.
    last_activity: u64,
    idle_ticks: u32,
}

/// The bounds before a tick computes them.
const INITIAL_PARAMS: TunerParams = TunerParams {
    batch: 0,
    high_min: HIGH_MIN as i32,
    high_max: HIGH_MAX_FLOOR as i32,
    keep: 0,
    free_count_cap: 0,
    own_free_high: OwnFreeHigh::Never,
};

/// The depot (see the module docs).
pub struct Depot {
    inner: Locked<DepotInner>,
    /// `count` and `waiting` as of the last change, for looks without the
    /// lock (the give-back's, drain-all's).
    pages: AtomicUsize,
    waiting: AtomicUsize,
    /// Tries that found the lock busy.
    busy: AtomicU64,
    /// The classes misses found here without a block since one was put
    /// (bit c: class c), for the class lists that hold some to put a
    /// batch here on their next free ([`Depot::wanted`]).
    wanted: AtomicU64,
}

const _: () = assert!(NR_LARGE_CLASSES <= 64, "a class is a bit of `wanted`");

/// The depot, held.
pub struct DepotGuard<'a> {
    g: Guard<'a, DepotInner>,
    d: &'a Depot,
}

impl Drop for DepotGuard<'_> {
    fn drop(&mut self) {
        if self.d.pages.load(Relaxed) != self.g.count {
            self.d.pages.store(self.g.count, Relaxed);
        }
        if self.d.waiting.load(Relaxed) != self.g.waiting {
            self.d.waiting.store(self.g.waiting, Relaxed);
        }
    }
}

impl Depot {
    /// An empty depot.
    pub const fn new() -> Depot {
        Depot {
            inner: Locked::new(DepotInner {
                lists: [const { PageList::new() }; NR_LARGE_CLASSES],
                count: 0,
                waiting: 0,
                t: Tuner::new(0),
                p: INITIAL_PARAMS,
                c: DepotCounters::ZERO,
                last_activity: 0,
                idle_ticks: 0,
            }),
            pages: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            busy: AtomicU64::new(0),
            wanted: AtomicU64::new(0),
        }
    }

    /// The classes a list may answer for misses here that found nothing
    /// (bit c: a block of class c would do — a miss of c, or of one of
    /// the [`STEP_UP`] classes below). A class list holding blocks of
    /// such a class puts a batch of them here on its next free
    /// (`LargeLists::answer`): a miss on one CPU brings another CPU's
    /// blocks without taking its pageset's lock (the steal it replaces
    /// held that lock across a `membarrier` under rseq). One load; 0
    /// almost always.
    #[inline(always)]
    pub fn wanted(&self) -> u64 {
        let w = self.wanted.load(Relaxed);
        (w | (w << 1) | (w << 2)) & CLASS_MASK
    }

    /// The depot if its lock is free now (the alloc and free paths).
    #[inline]
    pub fn try_lock(&self) -> Option<DepotGuard<'_>> {
        match self.inner.try_lock() {
            Some(g) => Some(DepotGuard { g, d: self }),
            None => {
                self.busy.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// The depot, waited for (maintenance, drain-all, stats).
    pub fn lock(&self) -> DepotGuard<'_> {
        DepotGuard {
            g: self.inner.lock(),
            d: self,
        }
    }

    /// Pages the depot holds (a racy read).
    #[inline]
    pub fn pages(&self) -> usize {
        self.pages.load(Relaxed)
    }

    /// What the depot's blocks may hold resident, in pages (a racy read).
    #[inline]
    pub fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    /// Gives every block back to the zone. Returns the pages given back.
    pub fn drain_all(&self, zone: &Zone) -> usize {
        if self.pages() == 0 {
            return 0;
        }
        self.lock().drain(zone, usize::MAX)
    }

    /// Hands every block to `to(list, class)`, a list of blocks of one
    /// class each time, with kind `None` (the give-back: a class list
    /// adopts them, under its pageset's lock, which the caller holds).
    pub fn move_all(&self, mut to: impl FnMut(&mut PageList, usize)) {
        let mut d = self.lock();
        for c in 0..NR_LARGE_CLASSES {
            let mut list = PageList::new();
            while !d.g.lists[c].is_empty() {
                // SAFETY: a popped block is ours and goes on `list`.
                unsafe { list.push_back(d.pop(c)) };
            }
            if !list.is_empty() {
                to(&mut list, c);
            }
        }
    }

    /// The tick: `high` decays by an eighth towards `high_min` and the
    /// excess goes back to the zone; a depot idle since
    /// [`EXPIRE_TICKS`] ticks goes back whole. Returns the pages given
    /// back.
    pub fn tick(&self, zone: &Zone, k: &Knobs) -> usize {
        let mut d = self.lock();
        let g = &mut *d.g;
        let activity = g.c.put + g.c.taken;
        if activity == g.last_activity {
            g.idle_ticks += 1;
        } else {
            g.idle_ticks = 0;
            g.last_activity = activity;
        }
        g.p = bounds(zone);
        // A request nobody could answer in a tick is stale.
        self.wanted.store(0, Relaxed);
        if g.t.high != 0 {
            g.t.decay(&g.p, k);
        }
        let over = if g.idle_ticks >= EXPIRE_TICKS {
            usize::MAX
        } else {
            g.waiting.saturating_sub(g.t.high.max(0) as usize)
        };
        d.drain(zone, over)
    }

    /// The counters, with `pages` and `high` as they are now.
    pub fn snapshot(&self) -> DepotCounters {
        let d = self.lock();
        DepotCounters {
            pages: d.g.count as u64,
            high: d.g.t.high.max(0) as u64,
            busy: self.busy.load(Relaxed),
            ..d.g.c
        }
    }

    /// Checks the lists against the counts; returns the pages held.
    pub fn check(&self) -> usize {
        let d = self.lock();
        let (mut pages, mut waiting) = (0, 0);
        for (class, list) in d.g.lists.iter().enumerate() {
            // SAFETY: the lists hold our blocks; the lock is held.
            unsafe { list.check() };
            let mut p = list.first();
            while !p.is_null() {
                // SAFETY: as above.
                unsafe {
                    assert_eq!(
                        (*p).kind(),
                        PageKind::PcpLarge,
                        "the depot holds another kind"
                    );
                    assert_eq!(
                        (*p.cast::<LargeBlock>()).pages as usize,
                        class_pages(class),
                        "a depot block on the wrong class list"
                    );
                    waiting += held(p, class_pages(class));
                    p = (*p).next;
                }
                pages += class_pages(class);
            }
        }
        assert_eq!(
            (pages, waiting),
            (d.g.count, d.g.waiting),
            "the depot's counts disagree with its lists"
        );
        pages
    }

    /// Takes the lock for fork (after every pageset's: a class list puts
    /// blocks here under its pageset's lock).
    pub fn lock_for_fork(&self) {
        self.inner.lock.lock();
    }

    /// Releases what [`lock_for_fork`](Self::lock_for_fork) took.
    ///
    /// # Safety
    /// Only right after fork, having called `lock_for_fork` in this thread.
    pub unsafe fn unlock_after_fork(&self, child: bool) {
        // SAFETY: the lock was taken by lock_for_fork in this thread.
        unsafe {
            if child {
                self.inner.lock.force_unlock();
            } else {
                self.inner.lock.unlock();
            }
        }
    }
}

impl Default for Depot {
    fn default() -> Self {
        Self::new()
    }
}

/// The depot's bounds: `high_min` one class list's, `high_max` a quarter
/// of the pages in use, at least [`HIGH_MAX_FLOOR`].
fn bounds(zone: &Zone) -> TunerParams {
    let in_use = zone.managed_pages().saturating_sub(zone.free_pages());
    let high_max = (in_use / HIGH_MAX_FRACTION).max(HIGH_MAX_FLOOR);
    TunerParams {
        batch: zone.pcp_params().batch as i32,
        high_max: high_max.min(i32::MAX as usize) as i32,
        ..INITIAL_PARAMS
    }
}

impl DepotGuard<'_> {
    /// Whether a block that counts for `units` fits under `high` (set
    /// up on first use); if not, it is remembered as given back for lack
    /// of room, and the caller gives it to the zone.
    #[inline]
    pub fn room_for(&mut self, units: usize, k: &Knobs) -> bool {
        let g = &mut *self.g;
        if g.t.high == 0 {
            g.t.high = g.p.high_min;
        }
        g.t.raise_to_floor(&g.p, k);
        if g.waiting + units <= g.t.high.max(0) as usize {
            return true;
        }
        g.t.note_given_back(units.min(i32::MAX as usize) as i32);
        g.c.full_pages += units as u64;
        false
    }

    /// Puts block `p` of class `class` here, after
    /// [`room_for`](Self::room_for) said yes.
    ///
    /// # Safety
    /// `p` heads an exact block of `class_pages(class)` pages that the
    /// caller hands over, off every list, `resident` set; its other
    /// descriptors are `None`.
    #[inline]
    pub unsafe fn put(&mut self, p: *mut Page, class: usize) {
        let pages = class_pages(class);
        // SAFETY: forwarded contract; the block becomes the depot's.
        unsafe {
            (*p).set_kind(PageKind::PcpLarge);
            self.g.waiting += held(p, pages);
            self.g.lists[class].push_front(p);
        }
        // The misses this block serves: of its class and up to STEP_UP
        // below.
        let served = (0b111u64 << class) >> STEP_UP;
        if self.d.wanted.load(Relaxed) & served != 0 {
            self.d.wanted.fetch_and(!served, Relaxed);
        }
        self.g.count += pages;
        self.g.c.put += 1;
    }

    /// A class list's miss: a block of `class` or of a class up to
    /// [`STEP_UP`] larger (the newest), and up to `more` further blocks of
    /// its class on `extra`. Returns the head, with kind `None`, and its
    /// class; null and `class` when there is none — then `high` grows by
    /// as much as was given back for lack of room since the last tick.
    pub fn take(
        &mut self,
        zone: &Zone,
        class: usize,
        more: usize,
        extra: &mut PageList,
        k: &Knobs,
    ) -> (*mut Page, usize) {
        let last = (class + STEP_UP).min(NR_LARGE_CLASSES - 1);
        let Some(c) = (class..=last).find(|&c| !self.g.lists[c].is_empty()) else {
            if self.d.wanted.load(Relaxed) & (1 << class) == 0 {
                self.d.wanted.fetch_or(1 << class, Relaxed);
            }
            self.g.c.wanted += 1;
            let g = &mut *self.g;
            if g.t.missed > 0 {
                let below = k.heuristics.has(heuristic::BELOW_HIGH) && zone.below_high();
                g.t.grow_after_give_back(class_pages(class) as i32, &g.p, below, k);
            }
            return (core::ptr::null_mut(), class);
        };
        let p = self.pop(c);
        for _ in 0..more {
            if self.g.lists[c].is_empty() {
                break;
            }
            // SAFETY: a popped block is ours and goes on the caller's list.
            unsafe { extra.push_front(self.pop(c)) };
        }
        self.g.c.hits += 1;
        (p, c)
    }

    /// Counts `n` blocks put here in answer to [`Depot::wanted`].
    pub fn answered(&mut self, n: u64) {
        self.g.c.answered += n;
    }

    /// Pops the newest block of class `c` (non-empty), uncounted, with
    /// kind `None`.
    fn pop(&mut self, c: usize) -> *mut Page {
        let pages = class_pages(c);
        // SAFETY: the list is not empty; its blocks are ours (lock held).
        unsafe {
            let p = self.g.lists[c].pop_front();
            self.g.waiting -= held(p, pages);
            (*p).set_kind(PageKind::None);
            self.g.count -= pages;
            self.g.c.taken += 1;
            p
        }
    }

    /// Gives blocks back to the zone, coldest first, in one zone-lock hold,
    /// until they held `want` pages (everything for `usize::MAX`).
    /// Returns the pages given back.
    fn drain(&mut self, zone: &Zone, want: usize) -> usize {
        if self.g.count == 0 || want == 0 {
            return 0;
        }
        let (mut freed, mut given) = (0, 0);
        let mut z = zone.lock();
        for c in (0..NR_LARGE_CLASSES).rev() {
            let n = class_pages(c);
            while given < want && !self.g.lists[c].is_empty() {
                // SAFETY: the list is not empty; its blocks are ours (lock
                // held); each goes to the zone, unused.
                unsafe {
                    let p = self.g.lists[c].pop_back();
                    let h = held(p, n);
                    self.g.waiting -= h;
                    given += h;
                    (*p).set_kind(PageKind::None);
                    let clean = (*p).flags & flags::CLEAN != 0;
                    z.free_range(page_addr(p), n, clean);
                }
                self.g.count -= n;
                freed += n;
            }
        }
        drop(z);
        self.g.c.drained_pages += freed as u64;
        freed
    }
}
