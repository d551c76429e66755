//! Huge blocks (> 4 MiB): each is one mapping of its own, the block and
//! one page before it that holds its header and page descriptor (see
//! `section/huge.rs`): its length and a page of address space, as glibc's
//! mmap'd chunks. The block starts on a chunk (4 MiB) boundary, so it is
//! found like any other: the chunk map's byte for its first chunk says a
//! huge block starts there, its descriptor says `Huge` and how long it is.
//! No side table, no lock on the free path. A block aligned to a whole
//! section or more (256 MiB, up to what the address space allows) is a
//! *giant* block, never cached and never resized in place.
//!
//! Freed huge blocks are kept for reuse, mapped and resident, in a small
//! cache — the pageset idea one level up. Mapping a block and faulting its
//! pages in again costs as much as writing them; a program that allocates
//! and frees big buffers in a loop (malloc-large: 5–25 MiB, 20 live) would
//! otherwise pay that on every buffer. A request takes the smallest cached
//! block that holds it, else grows the largest smaller one in place
//! (mremap: only the new pages fault), else maps a new one. How much the
//! cache may hold, `high`, is tuned by the pagesets' [`Tuner`], in pages,
//! under the same knobs ([`HugeBlocks::params`]): blocks refused for lack
//! of room are remembered, and a miss that follows grows `high` by what
//! was refused, up to an eighth of the memory the budget is sized from,
//! not while the zone is below its high watermark; each tick `high`
//! decays by an eighth (to `HUGE_HIGH_MIN`) and blocks that stayed in the
//! cache for a whole tick are unmapped — idle memory still goes back to
//! the OS within a tick or two. free_count counts what is freed without
//! allocations: with a free_high threshold of `batch` or `5batch` (4 MiB,
//! or 20) a program that only frees huge blocks unmaps the blocks it
//! caches (a drain keeps a batch, 4 MiB: no block); the default threshold leaves the
//! cache without free_high, as before the tuner was shared. With the
//! heuristics off (`base`) `high` stays at `HUGE_HIGH_MIN`.
//!
//! Every huge block, live or cached, holds its mapping's cost in the
//! budget (`HUGE_META` for its header and descriptor page on top of its
//! length): charged when mapped or grown, given back when unmapped or
//! shrunk. When the budget says no, `alloc` returns null and the runtime
//! reclaims (this cache first among the rest) before it retries.
//!
//! Every huge block is also on one list (under the cache lock), so the
//! stats can ask the OS how much of them is resident.
//!
//! Under `PCPALLOC_THP=dense` a block is not advised for huge pages when
//! mapped: big ones are watched, and advised once they show dense use
//! (`huge_thp.rs`). A block's resize (`realloc` past 4 MiB) is
//! `realloc.rs`.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::geometry::{MAX_ORDER_BYTES, MAX_ORDER_PAGES, PAGE_SHIFT, PAGE_SIZE, SECTION_SIZE};
use crate::page::{flags, LargeBlock, Page, PageKind};
use crate::page_alloc::knobs::Knobs;
use crate::page_alloc::pcp::tuner::{OwnFreeHigh, Tuner, TunerParams};
use crate::page_alloc::zone::Budget;
use crate::section;
use crate::sync::Locked;
use crate::sys;

use super::huge_thp::Watch;

mod realloc;

/// Blocks the cache can hold.
const CACHE_SLOTS: usize = 16;
/// The cache's `high` never decays below this.
pub(crate) const HUGE_HIGH_MIN: usize = 32 << 20;
/// The share of the budget's size the cache may grow to (an eighth, as a
/// pageset's `high_max`).
const HUGE_HIGH_LIMIT_SHIFT: u32 = 3;
/// What a huge block costs the budget beyond its length: the page that
/// holds its header and descriptor.
pub(crate) const HUGE_META: usize = PAGE_SIZE;

/// `bytes` in pages, as the tuner counts them.
#[inline]
const fn pages_of(bytes: usize) -> i32 {
    let pages = bytes >> PAGE_SHIFT;
    if pages > i32::MAX as usize {
        i32::MAX
    } else {
        pages as i32
    }
}

/// The budget cost of a huge block mapping `len` bytes.
#[inline]
pub(crate) const fn cost(len: usize) -> usize {
    len + HUGE_META
}

/// A cached block: its head and the tick it was cached at.
#[derive(Clone, Copy)]
struct Entry {
    block: *mut LargeBlock,
    epoch: u32,
}

/// The cache and the list of every block, behind one lock (a leaf:
/// nothing else is taken under it).
///
/// Invariants: `entries[..n]` are `HugeCached` heads of huge sections;
/// `bytes` is the sum of their `len`; `bytes ≤ high` except after `high`
/// decays (the next tick unmaps the idle ones); `all` links every huge
/// block, live or cached, through `next`/`prev`.
struct State {
    entries: [Entry; CACHE_SLOTS],
    n: usize,
    bytes: usize,
    /// `high`, free_count and what was refused for lack of room since the
    /// last tick, in pages.
    t: Tuner,
    /// Every huge block.
    all: *mut LargeBlock,
}

// SAFETY: the entries and the list are huge sections only reached under
// the lock.
unsafe impl Send for State {}

impl State {
    /// Puts `b` on the list of every block.
    ///
    /// # Safety
    /// `b` is a huge block of ours on no list.
    unsafe fn link(&mut self, b: *mut LargeBlock) {
        // SAFETY: b and the list's blocks are ours, reached under the lock.
        unsafe {
            (*b).prev = core::ptr::null_mut();
            (*b).next = self.all;
            if !self.all.is_null() {
                (*self.all).prev = b;
            }
        }
        self.all = b;
    }

    /// Takes `b` off the list of every block.
    ///
    /// # Safety
    /// `b` is on the list.
    unsafe fn unlink(&mut self, b: *mut LargeBlock) {
        // SAFETY: as in link.
        unsafe {
            let (n, p) = ((*b).next, (*b).prev);
            if !n.is_null() {
                (*n).prev = p;
            }
            if p.is_null() {
                self.all = n;
            } else {
                (*p).next = n;
            }
            (*b).next = core::ptr::null_mut();
            (*b).prev = core::ptr::null_mut();
        }
    }
}

/// The huge blocks of one allocator: counters, the cache and the list.
pub struct HugeBlocks {
    live: AtomicUsize,
    /// Usable bytes of live blocks (what the program holds).
    live_bytes: AtomicUsize,
    /// Bytes mapped for blocks, live and cached.
    bytes: AtomicUsize,
    allocs: AtomicU64,
    hits: AtomicU64,
    state: Locked<State>,
    /// The blocks watched for dense use (`huge_thp.rs`).
    watch: Watch,
}

/// Counters of the huge blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugeUsage {
    /// Huge blocks live now.
    pub live: usize,
    /// Usable bytes of the live blocks.
    pub live_bytes: usize,
    /// Bytes mapped for huge blocks, live and cached.
    pub bytes: usize,
    /// Huge blocks ever mapped.
    pub allocs: u64,
    /// Allocations served from the cache (including by growing a cached
    /// block in place).
    pub cache_hits: u64,
    /// Blocks in the cache.
    pub cached: usize,
    /// Bytes in the cache.
    pub cached_bytes: usize,
    /// The cache's auto-tuned limit in bytes.
    pub cache_high: usize,
}

/// The address of huge block `b`.
#[inline]
pub(crate) fn block_addr(b: *const LargeBlock) -> usize {
    section::huge_block_addr(b.cast())
}

/// Makes the head of a huge section a live huge block whose caller may
/// use `pages` pages of its `len` mapped bytes.
///
/// # Safety
/// `head` heads a huge section the caller owns.
unsafe fn make_huge(head: *mut Page, pages: usize, len: usize, fl: u8) -> *mut LargeBlock {
    // SAFETY: forwarded contract.
    unsafe {
        let b = LargeBlock::make(head, 0, pages, fl);
        (*b).len = len;
        (*b).set_kind(PageKind::Huge);
        b
    }
}

impl HugeBlocks {
    /// No huge block yet.
    pub const fn new() -> HugeBlocks {
        HugeBlocks {
            live: AtomicUsize::new(0),
            live_bytes: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            allocs: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            state: Locked::new(State {
                entries: [Entry {
                    block: core::ptr::null_mut(),
                    epoch: 0,
                }; CACHE_SLOTS],
                n: 0,
                bytes: 0,
                t: Tuner::new(pages_of(HUGE_HIGH_MIN)),
                all: core::ptr::null_mut(),
            }),
            watch: Watch::new(),
        }
    }

    /// The cache's bounds and units (pages) for the tuner: `high` between
    /// `HUGE_HIGH_MIN` and an eighth of what `budget` is sized from; a
    /// batch of 4 MiB (a huge block is larger), which a free_high drain
    /// keeps (so keeps no block); no free_high under the default
    /// threshold.
    pub fn params(budget: &Budget) -> TunerParams {
        let high_max = (budget.size() >> HUGE_HIGH_LIMIT_SHIFT).max(HUGE_HIGH_MIN);
        TunerParams {
            batch: MAX_ORDER_PAGES as i32,
            high_min: pages_of(HUGE_HIGH_MIN),
            high_max: pages_of(high_max),
            keep: MAX_ORDER_PAGES as i32,
            free_count_cap: 1 << 30,
            own_free_high: OwnFreeHigh::Never,
        }
    }

    /// A huge block of `size` bytes aligned to `align` (a power of two),
    /// zeroed if `zero`: from the cache, or mapped (charging `budget`).
    /// Null when the budget or the OS says no, or the size is absurd.
    /// `thp`: advise a freshly mapped block for huge pages (`Some(true)`),
    /// against them (`Some(false)`), or leave it to the system and advise
    /// it once it shows dense use (`None`, `dense`: see `huge_thp.rs`).
    /// `k` and `below_high` (the zone is below its high watermark) tune
    /// the cache.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc(
        &self,
        budget: &Budget,
        size: usize,
        align: usize,
        zero: bool,
        thp: Option<bool>,
        k: &Knobs,
        below_high: bool,
    ) -> *mut u8 {
        let Some(len) = size.checked_next_multiple_of(PAGE_SIZE) else {
            return core::ptr::null_mut();
        };
        if len / PAGE_SIZE > u32::MAX as usize {
            return core::ptr::null_mut();
        }
        if align >= SECTION_SIZE {
            return self.alloc_giant(budget, len, align, thp);
        }
        let tuning = (k, below_high);
        if let Some(p) = self.take_cached(budget, len, align, thp, tuning) {
            if zero {
                // The kernel gives zeroed pages faster than we write
                // zeros over resident ones, and only those the program
                // touches: a sparse table calloc'd from the cache costs
                // what a fresh mapping does (glibc's calloc of a big
                // block is a fresh mmap). The pages go back now and fault
                // in zeroed.
                sys::release(p, len);
            }
            return p;
        }
        let Some(charge) = budget.charge(cost(len)) else {
            return core::ptr::null_mut();
        };
        let Some(head) = section::create_huge(len, align) else {
            return core::ptr::null_mut(); // the charge goes back
        };
        charge.keep();
        // SAFETY: a fresh huge block's descriptor, ours; its memory reads
        // as zero.
        let b = unsafe { make_huge(head, len / PAGE_SIZE, len, 0) };
        self.note_mapped(b, len, thp)
    }

    /// A giant block (aligned to a section or more): never cached.
    fn alloc_giant(&self, budget: &Budget, len: usize, align: usize, thp: Option<bool>) -> *mut u8 {
        let Some(charge) = budget.charge(cost(len)) else {
            return core::ptr::null_mut();
        };
        let Some(head) = section::create_huge(len, align) else {
            return core::ptr::null_mut(); // the charge goes back
        };
        charge.keep();
        // SAFETY: a fresh giant block's descriptor, ours.
        let b = unsafe { make_huge(head, len / PAGE_SIZE, len, flags::GIANT) };
        self.note_mapped(b, len, thp)
    }

    /// Counts, lists and advises (or watches) a block just mapped; returns
    /// its address.
    fn note_mapped(&self, b: *mut LargeBlock, len: usize, thp: Option<bool>) -> *mut u8 {
        match thp {
            Some(on) => sys::advise_huge(block_addr(b) as *mut u8, len, on),
            // SAFETY: a fresh block of ours.
            None => unsafe { self.watch.watch(b) },
        }
        // SAFETY: b is a fresh block of ours, on no list.
        unsafe { self.state.lock().link(b) };
        self.live.fetch_add(1, Relaxed);
        self.live_bytes.fetch_add(len, Relaxed);
        self.bytes.fetch_add(len, Relaxed);
        self.allocs.fetch_add(1, Relaxed);
        block_addr(b) as *mut u8
    }

    /// A cached block for `len` bytes aligned to `align`: the smallest
    /// that holds it, else the largest smaller one grown in place. `thp`
    /// as [`alloc`](Self::alloc)'s: `None` watches the block anew.
    fn take_cached(
        &self,
        budget: &Budget,
        len: usize,
        align: usize,
        thp: Option<bool>,
        (k, below_high): (&Knobs, bool),
    ) -> Option<*mut u8> {
        let mut c = self.state.lock();
        c.t.on_alloc(pages_of(len), k);
        let note_miss = |c: &mut State| {
            // A miss after blocks were refused for lack of room: grow
            // `high` by what this one needs, as far as refusals allow (the
            // refill half of the auto-tuning).
            c.t.grow_after_give_back(pages_of(len), &Self::params(budget), below_high, k);
        };
        let fits = |e: &Entry| block_addr(e.block).is_multiple_of(align);
        let len_of = |e: &Entry| {
            // SAFETY: cached blocks are ours, read under the lock.
            unsafe { (*e.block).len }
        };
        let (mut best, mut grow) = (None::<usize>, None::<usize>);
        for (i, e) in c.entries[..c.n].iter().enumerate() {
            if !fits(e) {
                continue;
            }
            let l = len_of(e);
            if l >= len {
                if best.is_none_or(|b| l < len_of(&c.entries[b])) {
                    best = Some(i);
                }
            } else if grow.is_none_or(|g| l > len_of(&c.entries[g])) {
                grow = Some(i);
            }
        }
        let i = match (best, grow) {
            (Some(i), _) => i,
            (None, Some(i)) => {
                let b = c.entries[i].block;
                let old = len_of(&c.entries[i]);
                let Some(charge) = budget.charge(len - old) else {
                    note_miss(&mut c);
                    return None;
                };
                // In place, else moved with its pages to where it fits (a
                // block's mapping is its length and a page: the address
                // space after it is often another's). Only a block that
                // need not be aligned beyond a chunk moves.
                // SAFETY: b is a cached huge block, ours under the lock;
                // the watch lets go of it while it is resized or moved.
                let grown = unsafe {
                    if self.resize_watched(b, len) {
                        Some(b)
                    } else if align <= MAX_ORDER_BYTES {
                        self.move_watched(&mut c, b, len)
                    } else {
                        None
                    }
                };
                let Some(b) = grown else {
                    note_miss(&mut c);
                    return None; // the charge goes back
                };
                c.entries[i].block = b;
                charge.keep();
                // SAFETY: as above.
                unsafe { (*b).len = len };
                c.bytes += len - old;
                self.bytes.fetch_add(len - old, Relaxed);
                i
            }
            (None, None) => {
                note_miss(&mut c);
                return None;
            }
        };
        let e = c.entries[i];
        c.n -= 1;
        let last = c.n;
        c.entries[i] = c.entries[last];
        // SAFETY: e.block is a cached huge block, now ours.
        let l = unsafe { (*e.block).len };
        c.bytes -= l;
        // The pages past `len` stay resident: giving them back (madvise)
        // made malloc-large 1.6-1.8x slower for 10-20% less peak memory.
        // SAFETY: as above; the block stays on the list of every block.
        unsafe { make_huge(e.block.cast(), len / PAGE_SIZE, l, 0) };
        drop(c);
        if thp.is_none() {
            // SAFETY: the block is ours now.
            unsafe { self.watch.watch(e.block) };
        }
        self.live.fetch_add(1, Relaxed);
        self.live_bytes.fetch_add(len, Relaxed);
        self.hits.fetch_add(1, Relaxed);
        Some(block_addr(e.block) as *mut u8)
    }

    /// Frees huge block `b`: into the cache if it has room, else unmapped.
    /// `epoch` is the maintenance tick now; `k` the knobs in force.
    ///
    /// # Safety
    /// `b` is a live huge block the caller frees.
    pub unsafe fn free(&self, budget: &Budget, b: *mut LargeBlock, epoch: u32, k: &Knobs) {
        // SAFETY: forwarded contract.
        let (len, pages, giant) = unsafe { ((*b).len, (*b).pages, (*b).flags & flags::GIANT != 0) };
        self.live.fetch_sub(1, Relaxed);
        self.live_bytes
            .fetch_sub(pages as usize * PAGE_SIZE, Relaxed);
        if giant {
            // SAFETY: the block is ours and unused.
            unsafe { self.unmap(budget, b) };
            return;
        }
        let p = Self::params(budget);
        let mut c = self.state.lock();
        c.t.clamp_high(&p, k);
        c.t.on_free(pages_of(len), &p, k);
        let cached = c.n < CACHE_SLOTS && pages_of(c.bytes + len) <= c.t.high;
        if cached {
            // SAFETY: b is ours; it becomes a cached block.
            unsafe { (*b).set_kind(PageKind::HugeCached) };
            let n = c.n;
            c.entries[n] = Entry { block: b, epoch };
            c.n += 1;
            c.bytes += len;
        } else {
            c.t.note_given_back(pages_of(len));
        }
        // free_high: a program that only frees keeps `keep` cached.
        let over = if c.t.wants_free_high(pages_of(c.bytes), &p, k) {
            let keep = (c.t.free_high(&p, k).max(0) as usize) << PAGE_SHIFT;
            c.bytes.saturating_sub(keep)
        } else {
            0
        };
        drop(c);
        if !cached {
            // SAFETY: the block is ours and unused.
            unsafe { self.unmap(budget, b) };
        }
        if over > 0 {
            self.trim_some(budget, over);
        }
    }

    /// Unmaps block `b` (live or taken out of the cache) and gives its cost
    /// back to the budget.
    ///
    /// # Safety
    /// `b` heads a huge block nobody uses, on the list of every block.
    unsafe fn unmap(&self, budget: &Budget, b: *mut LargeBlock) {
        // SAFETY: forwarded contract.
        unsafe {
            self.state.lock().unlink(b);
            self.watch.forget(b);
            let len = (*b).len;
            (*b).set_kind(PageKind::None);
            section::destroy_huge(b.cast());
            budget.uncharge(cost(len));
            self.bytes.fetch_sub(len, Relaxed);
        }
    }

    /// The tick (`epoch` is the tick now): unmaps blocks cached before the
    /// previous tick (idle for at least a whole tick) and decays `high` by
    /// an eighth ([`Tuner::decay`] under `k`). Returns the bytes unmapped.
    pub fn tick(&self, budget: &Budget, epoch: u32, k: &Knobs) -> usize {
        let decay = (&Self::params(budget), k);
        self.release(budget, |e| epoch.wrapping_sub(e.epoch) >= 2, Some(decay))
    }

    /// Unmaps every cached block (trim, reclaim). Returns the bytes
    /// unmapped.
    pub fn trim(&self, budget: &Budget) -> usize {
        self.release(budget, |_| true, None)
    }

    /// Unmaps cached blocks until at least `want` bytes are unmapped (a
    /// reclaim that needs room for one request). Returns the bytes
    /// unmapped.
    pub fn trim_some(&self, budget: &Budget, want: usize) -> usize {
        let taken = core::cell::Cell::new(0usize);
        self.release(
            budget,
            |e| {
                if taken.get() >= want {
                    return false;
                }
                // SAFETY: a cached block, read under the cache's lock.
                taken.set(taken.get() + unsafe { (*e.block).len });
                true
            },
            None,
        )
    }

    /// Unmaps the cached blocks `old` picks; decays `high` first when
    /// given the tuner's bounds and knobs (the tick). Returns the bytes
    /// unmapped.
    fn release(
        &self,
        budget: &Budget,
        old: impl Fn(&Entry) -> bool,
        decay: Option<(&TunerParams, &Knobs)>,
    ) -> usize {
        let mut out = [core::ptr::null_mut::<LargeBlock>(); CACHE_SLOTS];
        let mut nout = 0;
        {
            let mut c = self.state.lock();
            if let Some((p, k)) = decay {
                c.t.decay(p, k);
            }
            let mut i = 0;
            while i < c.n {
                if old(&c.entries[i]) {
                    let b = c.entries[i].block;
                    out[nout] = b;
                    nout += 1;
                    // SAFETY: a cached block, ours under the lock.
                    c.bytes -= unsafe { (*b).len };
                    c.n -= 1;
                    let last = c.n;
                    c.entries[i] = c.entries[last];
                } else {
                    i += 1;
                }
            }
        }
        let mut bytes = 0;
        for &b in &out[..nout] {
            // SAFETY: taken out of the cache: ours, unused, still listed.
            unsafe {
                bytes += (*b).len;
                self.unmap(budget, b);
            }
        }
        bytes
    }

    /// Bytes mapped for huge blocks, live and cached (racy read).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// Bytes of cached blocks (racy read).
    pub fn cached_bytes(&self) -> usize {
        self.bytes
            .load(Relaxed)
            .saturating_sub(self.live_bytes.load(Relaxed))
    }

    /// Bytes of huge blocks, live and cached, resident in memory now (their
    /// header and descriptor pages included), as the OS counts them.
    pub fn resident_bytes(&self) -> usize {
        let c = self.state.lock();
        let mut pages = 0;
        let mut b = c.all;
        while !b.is_null() {
            let header = block_addr(b) - PAGE_SIZE;
            // SAFETY: listed blocks are ours and mapped (with their header
            // page); read under the lock.
            pages += sys::resident_pages(header as *const u8, unsafe { (*b).len } + PAGE_SIZE);
            // SAFETY: as above.
            b = unsafe { (*b).next };
        }
        pages * PAGE_SIZE
    }

    /// The counters.
    pub fn usage(&self) -> HugeUsage {
        let c = self.state.lock();
        HugeUsage {
            live: self.live.load(Relaxed),
            live_bytes: self.live_bytes.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            allocs: self.allocs.load(Relaxed),
            cache_hits: self.hits.load(Relaxed),
            cached: c.n,
            cached_bytes: c.bytes,
            cache_high: (c.t.high.max(0) as usize) << PAGE_SHIFT,
        }
    }

    /// Advises for huge pages the watched blocks that show dense use, if
    /// a look is due (`huge_thp.rs`; one load and the clock when not).
    /// Returns how many were advised.
    #[inline]
    pub fn thp_look_if_due(&self) -> usize {
        self.watch.look_if_due()
    }

    /// Collapses into huge pages at most `max` 2 MiB ranges of blocks
    /// advised after they showed dense use (the tick's share). Returns how
    /// many were tried.
    pub fn thp_collapse(&self, max: usize) -> usize {
        if max == 0 {
            return 0;
        }
        self.watch.collapse_some(max)
    }

    /// Whether ranges of advised blocks wait for [`thp_collapse`](Self::thp_collapse).
    #[inline]
    pub fn thp_has_pending(&self) -> bool {
        self.watch.has_pending()
    }

    /// Takes the cache and watch locks (before fork).
    pub fn lock_for_fork(&self) {
        core::mem::forget(self.state.lock());
        self.watch.lock_for_fork();
    }

    /// Releases (parent) or resets (child) the lock [`lock_for_fork`]
    /// took.
    ///
    /// # Safety
    /// Only right after fork, having called `lock_for_fork` in this thread.
    ///
    /// [`lock_for_fork`]: Self::lock_for_fork
    pub unsafe fn unlock_after_fork(&self, child: bool) {
        // SAFETY: forwarded contract.
        unsafe {
            self.watch.unlock_after_fork(child);
            if child {
                self.state.lock.force_unlock();
            } else {
                self.state.lock.unlock();
            }
        }
    }
}

impl Default for HugeBlocks {
    fn default() -> Self {
        Self::new()
    }
}
