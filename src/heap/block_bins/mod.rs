//! Large bins: a thread heap's cache of freed large blocks of up to
//! 256 KiB (the reach of tcmalloc's thread cache), in front of the
//! pageset's large lists (`page_alloc/pcp/class_lists.rs`). A bin is a short
//! stack of blocks of one size class: a free pushes the block, the next
//! request of the class (or of one up to two classes smaller, as the
//! pageset's lists serve) on this thread pops it — no CPU lookup, no
//! atomic read-modify-write, no list links to rewrite in other
//! descriptors.
//!
//! The bins self-tune with the pagesets' [`Tuner`] (`page_alloc/pcp/
//! tuner.rs`), in pages, under the same knobs ([`BINS_PARAMS`]):
//!
//! - `high` bounds the pages held; a free past it, or into a full bin,
//!   spills the bin's coldest blocks (then other bins', largest class
//!   first) to the pageset, and the tuner remembers them;
//! - a miss grows `high` by the class's pages, as far as blocks were
//!   spilled for lack of room since the last tick (the refill half of
//!   patch 7), up to [`BINS_HIGH_MAX`], not while the zone is below its
//!   high watermark;
//! - `free_count` counts pages freed without allocations (patch 9, under
//!   `PCPALLOC_FREE_COUNT`): at the free_high threshold (by default twice
//!   `high`; `batch` or `5batch` of [`BIN_BATCH`] when set) the thread
//!   only frees, and a free_high spill leaves a quarter of
//!   [`BINS_HIGH_MIN`] — the threads that allocate what it frees need the
//!   rest — and cuts `high` by `BIN_BATCH << BATCH_SCALE_MAX`;
//! - at its first use in each tick the owner decays `high` by an eighth
//!   towards [`BINS_HIGH_MIN`] and spills the excess; the bins of a thread
//!   that used them in neither this tick nor the last are spilled whole by
//!   the tick itself ([`BlockBins::drain_if_idle`]), so idle memory goes
//!   back as a pageset's does.
//!
//! With the heuristics off (`base`) the bins hold at most
//! [`BINS_HIGH_MIN`]. The fast paths read the knobs the owner's last slow
//! path saw (a change reaches them at the next miss, spill or tick).
//!
//! The owner enters through a [`BiasedLock`] (plain stores while no one
//! else wants in); the tick, a reclaim, a trim and the checker take its
//! remote side, never across a fork ([`close_gate_for_fork`]). A block in
//! a bin keeps its large-block descriptor (class tag and pages) with kind
//! `Cached`, so freeing it again is a double free; it is charged to the
//! budget as any block the page allocator handed out.
//!
//! Invariants (checked by [`BlockBins::check`]): `count` = Σ pages of the
//! binned blocks = `held`; every block in bin `c` is a `Cached` head of
//! `class_pages(c)` pages; `len[c] ≤ BIN_SLOTS`.

use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::geometry::PAGE_SIZE;
use crate::page::{LargeBlock, Page, PageKind};
use crate::page_alloc::block_classes::{class_of, class_pages, SMALL_CLASS_PAGES};
use crate::page_alloc::knobs::{Knobs, DEFAULT_BATCH_SCALE_MAX};
use crate::page_alloc::pcp::tuner::{OwnFreeHigh, Tuner, TunerParams};
use crate::page_alloc::Pages;
use crate::sync::{bump, BiasedLock, ForkGate};

/// Size classes with a bin: every class up to 64 pages.
pub const BIN_CLASSES: usize = class_of(SMALL_CLASS_PAGES) + 1;
/// Blocks one bin holds.
pub const BIN_SLOTS: usize = 8;
/// The largest request served from the bins: 256 KiB.
pub const BIN_MAX_BYTES: usize = class_pages(BIN_CLASSES - 1) * PAGE_SIZE;
const _: () = assert!(BIN_MAX_BYTES == SMALL_CLASS_PAGES * PAGE_SIZE);
/// `high`'s floor, in pages (256 KiB): what a thread keeps before its
/// bins show they need more (misses after spills for lack of room).
pub const BINS_HIGH_MIN: usize = 64;
/// `high`'s ceiling, in pages (8 MiB). A thread whose block sizes spread
/// over the classes needs a few blocks of each to hit: one of every class
/// is 1.6 MiB, and at 4 MiB (tcmalloc's thread cache) the page band's
/// random 8–256 KiB blocks missed on 3-8% of their requests and spilled
/// 3.1-7.4 M pages per 2 M operations (to 0.6-1.1% and 0.3-0.5 M pages at
/// 8 MiB, the peak no higher: what the bins do not hold, the pagesets
/// do). Only a thread that misses after spills grows this far, and an
/// idle one decays back.
pub const BINS_HIGH_MAX: usize = 2048;
/// A request may take a binned block up to this many classes larger
/// (under a half more), as from the pageset's lists.
pub(crate) const STEP_UP: usize = 2;
/// The bins' batch, in pages: the smallest block they see (malloc's
/// page-granular blocks start at 8 KiB; a bin moves a block at a time).
/// The free_high thresholds `batch` and `5batch` count it, and a free_high
/// spill cuts `high` by `BIN_BATCH << BATCH_SCALE_MAX` (64 pages by
/// default), not under BINS_HIGH_MIN.
pub(crate) const BIN_BATCH: usize = 2;
const _: () = assert!(BIN_BATCH << DEFAULT_BATCH_SCALE_MAX == 64);
/// A free_high spill keeps this many pages (16): a thread that only frees
/// has no use for more, the threads that allocate what it frees do.
const FREE_HIGH_KEEP: usize = BINS_HIGH_MIN / 4;
/// The bins' bounds and units for the tuner.
pub(crate) const BINS_PARAMS: TunerParams = TunerParams {
    batch: BIN_BATCH as i32,
    high_min: BINS_HIGH_MIN as i32,
    high_max: BINS_HIGH_MAX as i32,
    keep: FREE_HIGH_KEEP as i32,
    free_count_cap: 1 << 18,
    own_free_high: OwnFreeHigh::TwiceHigh,
};

/// Remote drains under way: so no remote side of a bins' lock — nor of a
/// heap's `slow` lock, which a collection of emptied slabs takes
/// (`emptied.rs`) — is held across a fork (the child would find it held by
/// a thread it does not have), fork's handlers close the gate and wait for
/// the work inside to finish (each holds one such lock and may wait for
/// the heap's owner to leave its slow path, or for a pageset's or the
/// zone's lock, which fork takes after this).
pub(crate) static FORK_GATE: ForkGate = ForkGate::new();

/// Counters of a heap's large bins, written under the bins' lock with a
/// load and a store (no read-modify-write), read racily by the report.
#[derive(Debug, Default)]
pub struct BinCounters {
    /// Requests served from a bin.
    pub hits: AtomicU64,
    /// Requests the bins could not serve (hits + misses: all they were
    /// asked for; the hit path bumps one counter only).
    pub misses: AtomicU64,
    /// Blocks freed into the bins.
    pub free: AtomicU64,
    /// Pages spilled to the pageset (room, free_high, decay, drains).
    pub spilled_pages: AtomicU64,
    /// free_high spills (a thread that only frees).
    pub free_high: AtomicU64,
}

impl BinCounters {
    const fn new() -> BinCounters {
        BinCounters {
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            free: AtomicU64::new(0),
            spilled_pages: AtomicU64::new(0),
            free_high: AtomicU64::new(0),
        }
    }
}

/// The bins' state, behind the lock.
struct State {
    slots: [[*mut Page; BIN_SLOTS]; BIN_CLASSES],
    len: [u8; BIN_CLASSES],
    /// Pages in the bins.
    count: usize,
    /// `high` (above it, frees spill), free_count and the pages spilled
    /// for lack of room since the last tick.
    t: Tuner,
    /// The knobs the owner's last slow path read ([`Knobs::to_bits`]),
    /// for the fast paths, and decoded.
    knob_bits: u32,
    k: Knobs,
    /// free_count's free_high threshold under those knobs, capped: a fast
    /// free leaves it below (`i32::MAX`: FREE_COUNT off).
    free_high_at: i32,
    /// Under those knobs an allocation halves free_count (the default
    /// FREE_COUNT with `halve`): the fast path's one test.
    halve: bool,
    /// Whether a spill in the owner's [`BlockBins::put`] under way sent
    /// pages on to the zone (the pageset's list drained), where only a
    /// tick or a give-back finds them: `put`'s answer.
    reached_zone: bool,
}

/// A heap's large bins. See the module docs.
///
/// Aligned to a cache line: another thread takes `lock` (a remote drain,
/// the tick), so it must not share a line with the owner's hot fields
/// before it in the heap, whose layout moves as they change (pingpong, 8–32
/// KiB blocks: 1.10× the time when a change to the bins moved this struct
/// 252 bytes).
#[repr(C, align(64))]
pub struct BlockBins {
    lock: BiasedLock,
    state: UnsafeCell<State>,
    /// `count`, for looks without the lock (the tick's idle check).
    held: AtomicUsize,
    /// The zone epoch (ticks run) of the owner's last use.
    epoch: AtomicU32,
    /// Counters.
    pub c: BinCounters,
}

// SAFETY: `state` is only reached under `lock` (the owner's biased side or
// the remote side); the other fields are atomics.
unsafe impl Sync for BlockBins {}

impl BlockBins {
    /// Empty bins.
    pub const fn new() -> BlockBins {
        BlockBins {
            lock: BiasedLock::new(),
            state: UnsafeCell::new(State {
                slots: [[ptr::null_mut(); BIN_SLOTS]; BIN_CLASSES],
                len: [0; BIN_CLASSES],
                count: 0,
                t: Tuner::new(BINS_HIGH_MIN as i32),
                knob_bits: Knobs::DEFAULT.to_bits(),
                k: Knobs::DEFAULT,
                free_high_at: 2 * BINS_HIGH_MIN as i32,
                halve: true,
                reached_zone: false,
            }),
            c: BinCounters::new(),
            held: AtomicUsize::new(0),
            epoch: AtomicU32::new(0),
        }
    }

    /// Pages in the bins (a racy look).
    pub fn held_pages(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// Runs `f` on the state as the owner.
    ///
    /// # Safety
    /// The calling thread owns the heap these bins belong to.
    #[inline(always)]
    unsafe fn owner<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let e = self.lock.owner_enter();
        // SAFETY: owner_enter excludes every remote holder.
        let r = f(unsafe { &mut *self.state.get() });
        // SAFETY: paired with the enter above.
        unsafe { self.lock.owner_exit(e) };
        r
    }

    /// Runs `f` on the state from anywhere (tick, reclaim, checks); `None`
    /// when the owner cannot be kept out (the membarrier call failed).
    fn remote<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        if !self.lock.try_remote_lock() {
            return None;
        }
        // SAFETY: the remote side excludes the owner and other remotes.
        let r = f(unsafe { &mut *self.state.get() });
        // SAFETY: taken above.
        unsafe { self.lock.remote_unlock() };
        Some(r)
    }

    /// A binned block of `class` (`class < BIN_CLASSES`), or of a class at
    /// most [`STEP_UP`] larger, as the pageset's lists serve one, for the
    /// owner: its head descriptor, still `Cached` (the caller makes it a
    /// live block), and its class; null on a miss. `epoch` is the zone's;
    /// `pages` takes what a tick's decay spills.
    ///
    /// # Safety
    /// The calling thread owns the heap these bins belong to.
    #[inline]
    pub unsafe fn take<'p>(
        &self,
        class: usize,
        epoch: u32,
        pages: impl Fn() -> Pages<'p>,
    ) -> (*mut Page, usize) {
        debug_assert!(class < BIN_CLASSES);
        // SAFETY: forwarded contract.
        unsafe {
            self.owner(|st| {
                let k = self.knobs_after_tick(st, epoch, &pages());
                st.t.on_alloc(class_pages(class) as i32, &k);
                let (p, c) = self.pop(st, class);
                if p.is_null() {
                    st.grow_on_miss(class, &self.c, &pages(), &k);
                }
                st.set_free_high_at(&k);
                (p, c)
            })
        }
    }

    /// [`take`](Self::take)'s common case alone: a hit, entered with plain
    /// stores, in the tick of the owner's last use. Null when anything
    /// else would be needed (a miss, a new tick, a remote in the way):
    /// the caller then calls `take`, which does it all. No calls, so the
    /// callers' fast paths keep few registers.
    ///
    /// # Safety
    /// As [`take`](Self::take).
    #[inline(always)]
    pub unsafe fn take_hit(&self, class: usize, epoch: u32) -> (*mut Page, usize) {
        debug_assert!(class < BIN_CLASSES);
        if !self.lock.owner_try_enter_biased() {
            return (ptr::null_mut(), class);
        }
        // SAFETY: the biased side excludes every remote holder; the
        // indices are below BIN_CLASSES and the lengths.
        unsafe {
            let st = &mut *self.state.get();
            let mut r = (ptr::null_mut(), class);
            if self.epoch.load(Relaxed) == epoch {
                r = self.pop(st, class);
                if !r.0.is_null() {
                    if st.halve {
                        st.t.free_count >>= 1;
                    } else {
                        let k = st.k;
                        st.t.on_alloc(class_pages(class) as i32, &k);
                    }
                }
            }
            self.lock.owner_exit_biased();
            r
        }
    }

    /// Pops the newest block of `class`, or of a class at most
    /// [`STEP_UP`] larger, off `st` (this bins' state, held by the
    /// caller), counting the hit: the head and its class, or null and
    /// `class`.
    #[inline(always)]
    fn pop(&self, st: &mut State, class: usize) -> (*mut Page, usize) {
        let last = (class + STEP_UP).min(BIN_CLASSES - 1);
        let mut c = class;
        loop {
            // SAFETY: c <= last < BIN_CLASSES; n - 1 < len <= BIN_SLOTS.
            unsafe {
                let n = *st.len.get_unchecked(c) as usize;
                if n > 0 {
                    *st.len.get_unchecked_mut(c) = (n - 1) as u8;
                    let p = *st.slots.get_unchecked(c).get_unchecked(n - 1);
                    st.count -= class_pages(c);
                    bump(&self.c.hits, 1);
                    self.held.store(st.count, Relaxed);
                    return (p, c);
                }
            }
            if c >= last {
                return (ptr::null_mut(), class);
            }
            c += 1;
        }
    }

    /// Pushes `b`, a block of `class` (`np` pages) the owner frees, on its
    /// bin in `st` (held by the caller; the bin has room): it becomes
    /// `Cached`, and the free is counted.
    ///
    /// # Safety
    /// `b` is a live block of `class` the caller frees; `class <
    /// BIN_CLASSES` and its bin holds fewer than BIN_SLOTS blocks.
    #[inline(always)]
    unsafe fn push(&self, st: &mut State, b: *mut LargeBlock, class: usize, np: usize) {
        // SAFETY: forwarded contract.
        unsafe {
            let n = *st.len.get_unchecked(class) as usize;
            debug_assert!(n < BIN_SLOTS);
            (*b).set_kind(PageKind::Cached);
            *st.slots.get_unchecked_mut(class).get_unchecked_mut(n) = b.cast();
            *st.len.get_unchecked_mut(class) = (n + 1) as u8;
        }
        st.count += np;
        bump(&self.c.free, 1);
        self.held.store(st.count, Relaxed);
    }

    /// [`put`](Self::put)'s common case alone: room in the bin and under
    /// `high`, entered with plain stores, in the tick of the owner's last
    /// use. False (nothing done) when anything else would be needed: the
    /// caller then calls `put`.
    ///
    /// # Safety
    /// As [`put`](Self::put).
    #[inline(always)]
    pub unsafe fn put_fits(&self, b: *mut LargeBlock, class: usize, epoch: u32) -> bool {
        debug_assert!(class < BIN_CLASSES);
        if !self.lock.owner_try_enter_biased() {
            return false;
        }
        // SAFETY: as in take_hit; b is the caller's live block (contract).
        unsafe {
            let st = &mut *self.state.get();
            let np = class_pages(class);
            let n = *st.len.get_unchecked(class) as usize;
            let fits = self.epoch.load(Relaxed) == epoch
                && n < BIN_SLOTS
                && st.count + np <= st.t.high as usize
                && st.t.free_count + (np as i32) < st.free_high_at;
            if fits {
                if st.free_high_at != i32::MAX {
                    st.t.free_count += np as i32;
                }
                self.push(st, b, class, np);
            }
            self.lock.owner_exit_biased();
            fits
        }
    }

    /// Bins large block `b` of `class` (`class < BIN_CLASSES`), freed by
    /// the owner: it becomes `Cached`. Spills to `pages` first when the
    /// bin is full or the bins would pass `high`. Returns whether pages
    /// went on to the zone — a spill the pageset's list did not keep —
    /// where only the tick or a give-back finds them: a spill the pageset
    /// keeps is memory any CPU's next miss reuses, as a free to the
    /// pageset is (`large::free`).
    ///
    /// # Safety
    /// The calling thread owns the heap these bins belong to; `b` is a
    /// live large block of `class` (tagged `class + 1`, `class_pages(class)`
    /// pages) that it frees.
    #[inline]
    pub unsafe fn put<'p>(
        &self,
        b: *mut LargeBlock,
        class: usize,
        epoch: u32,
        pages: impl Fn() -> Pages<'p>,
    ) -> bool {
        debug_assert!(class < BIN_CLASSES);
        // SAFETY: forwarded contract.
        unsafe {
            self.owner(|st| {
                st.reached_zone = false;
                let k = self.knobs_after_tick(st, epoch, &pages());
                let np = class_pages(class);
                st.t.on_free(np as i32, &BINS_PARAMS, &k);
                let n = *st.len.get_unchecked(class) as usize;
                let spill = n == BIN_SLOTS
                    || st.count + np > st.t.high as usize
                    || st.t.free_high_due(&BINS_PARAMS, &k);
                if spill {
                    st.make_room(class, np, &pages(), &self.c, &k);
                }
                self.push(st, b, class, np);
                st.set_free_high_at(&k);
                st.reached_zone
            })
        }
    }

    /// The knobs in force for the owner's work on the bins, once the tick
    /// `epoch` brings is done if the bins missed it.
    #[inline(always)]
    fn knobs_after_tick(&self, st: &mut State, epoch: u32, pages: &Pages<'_>) -> Knobs {
        let k = st.refresh(pages);
        if self.epoch.load(Relaxed) != epoch {
            self.on_tick(st, epoch, pages, &k);
        }
        k
    }

    /// The owner's first use in a new tick: `high` decays by an eighth
    /// towards BINS_HIGH_MIN, the excess spills, what was spilled for lack
    /// of room starts over ([`Tuner::decay`]).
    #[cold]
    #[inline(never)]
    fn on_tick(&self, st: &mut State, epoch: u32, pages: &Pages<'_>, k: &Knobs) {
        self.epoch.store(epoch, Relaxed);
        st.t.decay(&BINS_PARAMS, k);
        let high = st.t.high as usize;
        if st.count > high {
            st.spill(st.count - high, pages, &self.c);
        }
    }

    /// Spills every block (thread exit, reclaim, flush). Returns the
    /// pages spilled.
    ///
    /// # Safety
    /// The calling thread owns the heap these bins belong to.
    pub unsafe fn drain(&self, pages: &Pages<'_>) -> usize {
        // SAFETY: forwarded contract.
        unsafe { self.owner(|st| self.spill_all(st, pages)) }
    }

    /// Spills every block of `st`, this bins' state, which the caller
    /// holds. Returns the pages spilled.
    fn spill_all(&self, st: &mut State, pages: &Pages<'_>) -> usize {
        let n = st.spill(usize::MAX, pages, &self.c);
        self.held.store(st.count, Relaxed);
        n
    }

    /// Forgets the tuning (`high`, `missed`, `free_count`) for the next
    /// thread that adopts the heap; the bins are empty by then (spilled at
    /// the exit).
    ///
    /// # Safety
    /// The calling thread owns the heap these bins belong to.
    pub unsafe fn reset_tuning(&self) {
        // SAFETY: forwarded contract.
        unsafe {
            self.owner(|st| {
                debug_assert_eq!(st.count, 0);
                st.t = Tuner::new(BINS_HIGH_MIN as i32);
                let k = st.k;
                st.set_free_high_at(&k);
            })
        }
    }

    /// The tick's share: spills the bins whole when their owner used them
    /// in neither the tick `epoch` nor the one before (as a pageset idle
    /// for a while is drained). Returns the pages spilled.
    pub fn drain_if_idle(&self, epoch: u32, pages: &Pages<'_>) -> usize {
        if epoch.wrapping_sub(self.epoch.load(Relaxed)) < 2 {
            return 0;
        }
        self.drain_remote(pages)
    }

    /// Spills the bins whole from another thread than the owner (the
    /// tick, a reclaim at the memory limit, a trim). Returns the pages
    /// spilled. Skipped while a fork is under way (see [`FORK_GATE`]).
    pub fn drain_remote(&self, pages: &Pages<'_>) -> usize {
        if self.held.load(Relaxed) == 0 {
            return 0;
        }
        let Some(_inside) = FORK_GATE.enter() else {
            return 0;
        };
        self.remote(|st| self.spill_all(st, pages)).unwrap_or(0)
    }

    /// In a forked child, the bins of a thread that did not survive: spilled
    /// when nobody was in them at the fork (their state is whole), else
    /// left as they are. Returns the pages spilled.
    ///
    /// # Safety
    /// Only in a forked child, from its one thread, for a heap whose owner
    /// did not survive the fork.
    pub unsafe fn drain_lost(&self, pages: &Pages<'_>) -> usize {
        if self.held.load(Relaxed) == 0 || !self.lock.is_free() {
            return 0;
        }
        // SAFETY: no other thread exists, and nobody was in the bins.
        self.spill_all(unsafe { &mut *self.state.get() }, pages)
    }

    /// The pages held and `high`, for tests (the remote side waits for
    /// the owner to leave).
    pub fn state(&self) -> (usize, usize) {
        self.remote(|st| (st.count, st.t.high as usize))
            .expect("membarrier failed")
    }

    /// Checks the invariants (see the module docs); returns the pages
    /// held (0 unchecked when the owner cannot be kept out).
    pub fn check(&self) -> usize {
        self.remote(|st| {
            let mut pages = 0;
            for class in 0..BIN_CLASSES {
                let n = st.len[class] as usize;
                assert!(n <= BIN_SLOTS, "a large bin overflows");
                for &p in &st.slots[class][..n] {
                    // SAFETY: binned blocks are ours; the lock is held.
                    unsafe {
                        assert_eq!(
                            (*p).kind(),
                            PageKind::Cached,
                            "a binned block is not Cached"
                        );
                        let b = p.cast::<LargeBlock>();
                        assert_eq!(
                            (*b).pages as usize,
                            class_pages(class),
                            "a block in the wrong bin"
                        );
                        assert_eq!(
                            (*b).order as usize,
                            class + 1,
                            "a binned block lost its tag"
                        );
                    }
                    pages += class_pages(class);
                }
            }
            assert_eq!(pages, st.count, "large bins' count disagrees with the bins");
            assert_eq!(pages, self.held.load(Relaxed), "large bins' held disagrees");
            pages
        })
        .unwrap_or(0)
    }
}

impl Default for BlockBins {
    fn default() -> Self {
        Self::new()
    }
}

mod spill;
