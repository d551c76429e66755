//! Huge blocks (> 4 MiB): each lives in a section of its own — a
//! section-aligned reservation whose descriptor area describes just the
//! block (see `section::create_huge`). So a huge block is found like any
//! other: the chunk map says the address is ours, its page descriptor says
//! `Huge` and how long it is. No side table, no lock on the free path.
//!
//! Freed huge blocks are kept for reuse, mapped and resident, in a small
//! cache — the pageset idea one level up. Mapping a block and faulting its
//! pages in again costs as much as writing them; a program that allocates
//! and frees big buffers in a loop (malloc-large: 5–25 MiB, 20 live) would
//! otherwise pay that on every buffer. A request takes the smallest cached
//! block that holds it, else grows the largest smaller one in place
//! (mremap: only the new pages fault), else maps a new one. How much the
//! cache may hold, `high`, is tuned as a pageset's is (seed 000 patches
//! 6–7): blocks refused for lack of room are remembered, and a miss that
//! follows grows `high` by what was refused, up to an eighth of the memory
//! limit; each tick `high` decays by an eighth (to `HUGE_HIGH_MIN`) and
//! blocks that stayed in the cache for a whole tick are unmapped — idle
//! memory still goes back to the OS within a tick or two.
//!
//! The memory limit covers huge blocks, cached ones included: their bytes
//! stay charged to the zone's budget; at the limit the cache is emptied
//! before an allocation fails.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::geometry::{MAX_ORDER_BYTES, PAGE_SIZE, SECTION_META_BYTES, SECTION_SIZE};
use crate::page::{LargeBlock, Page, PageKind};
use crate::section::{self, page_addr};
use crate::sync::Locked;
use crate::sys;
use crate::zone::Budget;

/// Blocks the cache can hold.
const CACHE_SLOTS: usize = 16;
/// The cache's `high` never decays below this.
pub const HUGE_HIGH_MIN: usize = 32 << 20;
/// The share of the memory limit the cache may grow to (an eighth, as a
/// pageset's `high_max`).
const HUGE_HIGH_LIMIT_SHIFT: u32 = 3;

/// A cached block: its head and the tick it was cached at.
#[derive(Clone, Copy)]
struct Entry {
    block: *mut LargeBlock,
    epoch: u32,
}

/// The cache, behind its lock (a leaf: nothing else is taken under it).
///
/// Invariants: `entries[..n]` are `HugeCached` heads of huge sections;
/// `bytes` is the sum of their `len`; `bytes ≤ high` except after `high`
/// decays (the next tick unmaps the idle ones).
struct Cache {
    entries: [Entry; CACHE_SLOTS],
    n: usize,
    bytes: usize,
    high: usize,
    /// Bytes refused for lack of room since the last tick.
    missed: usize,
}

// SAFETY: the entries are huge sections only reached under the lock.
unsafe impl Send for Cache {}

/// The huge blocks of one allocator: counters and the cache.
pub struct HugeBlocks {
    live: AtomicUsize,
    bytes: AtomicUsize,
    allocs: AtomicU64,
    hits: AtomicU64,
    cache: Locked<Cache>,
}

/// Counters of the huge blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugeUsage {
    /// Huge blocks live now.
    pub live: usize,
    /// Bytes mapped for them.
    pub bytes: usize,
    /// Huge blocks ever mapped.
    pub allocs: u64,
    /// Allocations served from the cache (including by growing a cached
    /// block in place).
    pub cache_hits: u64,
    /// Blocks in the cache, and their bytes.
    pub cached: usize,
    /// Bytes in the cache.
    pub cached_bytes: usize,
    /// The cache's auto-tuned limit in bytes.
    pub cache_high: usize,
}

/// Where a huge block aligned to `align` starts in its section, or `None`
/// for an alignment a section cannot give.
fn block_offset(align: usize) -> Option<usize> {
    let off = align
        .max(SECTION_META_BYTES)
        .next_multiple_of(MAX_ORDER_BYTES);
    (off < SECTION_SIZE).then_some(off)
}

/// Makes the head of a huge section a live huge block whose caller may
/// use `pages` pages of its `len` mapped bytes.
///
/// # Safety
/// `head` heads a huge section the caller owns.
unsafe fn make_huge(head: *mut Page, pages: usize, len: usize) -> *mut LargeBlock {
    // SAFETY: forwarded contract.
    unsafe {
        let b = LargeBlock::make(head, 0, pages, 0);
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
            bytes: AtomicUsize::new(0),
            allocs: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            cache: Locked::new(Cache {
                entries: [Entry {
                    block: core::ptr::null_mut(),
                    epoch: 0,
                }; CACHE_SLOTS],
                n: 0,
                bytes: 0,
                high: HUGE_HIGH_MIN,
                missed: 0,
            }),
        }
    }

    /// A huge block of `size` bytes aligned to `align` (a power of two),
    /// zeroed if `zero`: from the cache, or mapped (charging `budget`).
    /// Null when the limit, the alignment or the OS says no.
    pub fn alloc(&self, budget: &Budget, size: usize, align: usize, zero: bool) -> *mut u8 {
        let Some(len) = size.checked_next_multiple_of(PAGE_SIZE) else {
            return core::ptr::null_mut();
        };
        let Some(offset) = block_offset(align) else {
            return core::ptr::null_mut();
        };
        if len / PAGE_SIZE > u32::MAX as usize {
            return core::ptr::null_mut();
        }
        if let Some(p) = self.take_cached(budget, len, offset) {
            if zero {
                // SAFETY: p is a block of ours of at least len bytes.
                unsafe { core::ptr::write_bytes(p, 0, size) };
            }
            return p;
        }
        let mut charged = budget.try_charge(len);
        if !charged && self.trim(budget) > 0 {
            charged = budget.try_charge(len);
        }
        if !charged {
            return core::ptr::null_mut();
        }
        let Some(head) = section::create_huge(len, offset) else {
            budget.uncharge(len);
            return core::ptr::null_mut();
        };
        // SAFETY: a fresh huge section's head descriptor, ours; its memory
        // reads as zero.
        unsafe { make_huge(head, len / PAGE_SIZE, len) };
        self.live.fetch_add(1, Relaxed);
        self.bytes.fetch_add(len, Relaxed);
        self.allocs.fetch_add(1, Relaxed);
        page_addr(head) as *mut u8
    }

    /// A cached block for `len` bytes at section offset `offset`: the
    /// smallest that holds it, else the largest smaller one grown in place.
    fn take_cached(&self, budget: &Budget, len: usize, offset: usize) -> Option<*mut u8> {
        let mut c = self.cache.lock();
        let fits = |e: &Entry| {
            let p = page_addr(e.block.cast());
            (p - section::section_base(p)).is_multiple_of(offset)
        };
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
                // SAFETY: b is a cached huge block, ours under the lock.
                if !budget.try_charge(len - old) || !unsafe { section::resize_huge(b.cast(), len) }
                {
                    budget.uncharge(len - old);
                    self.note_miss(&mut c, len);
                    return None;
                }
                // SAFETY: as above.
                unsafe { (*b).len = len };
                c.bytes += len - old;
                self.bytes.fetch_add(len - old, Relaxed);
                i
            }
            (None, None) => {
                self.note_miss(&mut c, len);
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
        drop(c);
        // SAFETY: as above.
        unsafe { make_huge(e.block.cast(), len / PAGE_SIZE, l) };
        self.live.fetch_add(1, Relaxed);
        self.hits.fetch_add(1, Relaxed);
        Some(page_addr(e.block.cast()) as *mut u8)
    }

    /// A miss after blocks were refused for lack of room: grow `high` by
    /// what this one needs, as far as refusals allow (the refill half of a
    /// pageset's auto-tuning).
    fn note_miss(&self, c: &mut Cache, len: usize) {
        if c.missed > 0 {
            let grow = len.min(c.missed);
            c.missed -= grow;
            c.high = c.high.saturating_add(grow);
        }
    }

    /// Frees huge block `b`: into the cache if it has room, else unmapped.
    /// `epoch` is the maintenance tick now.
    ///
    /// # Safety
    /// `b` is a live huge block the caller frees.
    pub unsafe fn free(&self, budget: &Budget, b: *mut LargeBlock, epoch: u32) {
        // SAFETY: forwarded contract.
        let len = unsafe { (*b).len };
        self.live.fetch_sub(1, Relaxed);
        {
            let mut c = self.cache.lock();
            let high_max = (budget.limit() >> HUGE_HIGH_LIMIT_SHIFT).max(HUGE_HIGH_MIN);
            c.high = c.high.min(high_max);
            if c.n < CACHE_SLOTS && c.bytes + len <= c.high {
                // SAFETY: b is ours; it becomes a cached block.
                unsafe { (*b).set_kind(PageKind::HugeCached) };
                let n = c.n;
                c.entries[n] = Entry { block: b, epoch };
                c.n += 1;
                c.bytes += len;
                return;
            }
            c.missed = c.missed.saturating_add(len);
        }
        // SAFETY: the block is ours and unused.
        unsafe { self.unmap(budget, b) };
    }

    /// Unmaps block `b` (live or taken out of the cache).
    ///
    /// # Safety
    /// `b` heads a huge section nobody uses.
    unsafe fn unmap(&self, budget: &Budget, b: *mut LargeBlock) {
        // SAFETY: forwarded contract.
        unsafe {
            let len = (*b).len;
            (*b).set_kind(PageKind::None);
            section::destroy_huge(b.cast());
            budget.uncharge(len);
            self.bytes.fetch_sub(len, Relaxed);
        }
    }

    /// The tick (`epoch` is the tick now): unmaps blocks cached before the
    /// previous tick (idle for at least a whole tick) and decays `high` by
    /// an eighth. Returns the bytes unmapped.
    pub fn tick(&self, budget: &Budget, epoch: u32) -> usize {
        self.release(budget, |e| epoch.wrapping_sub(e.epoch) >= 2, true)
    }

    /// Unmaps every cached block (trim, the memory limit). Returns the
    /// bytes unmapped.
    pub fn trim(&self, budget: &Budget) -> usize {
        self.release(budget, |_| true, false)
    }

    fn release(&self, budget: &Budget, old: impl Fn(&Entry) -> bool, decay: bool) -> usize {
        let mut out = [core::ptr::null_mut::<LargeBlock>(); CACHE_SLOTS];
        let mut nout = 0;
        {
            let mut c = self.cache.lock();
            if decay {
                c.high = (c.high - c.high / 8).max(HUGE_HIGH_MIN);
                c.missed = 0;
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
            // SAFETY: taken out of the cache: ours, unused.
            unsafe {
                bytes += (*b).len;
                self.unmap(budget, b);
            }
        }
        bytes
    }

    /// Resizes huge block `b` to `size` (> 4 MiB) bytes: within its mapping
    /// when it is long enough, in place when the address space after it is
    /// free, else by moving its pages (no copy) into a new section. Null if
    /// it cannot (the block is then untouched).
    ///
    /// # Safety
    /// `b` is a live huge block of the caller's.
    pub unsafe fn realloc(&self, budget: &Budget, b: *mut LargeBlock, size: usize) -> *mut u8 {
        let Some(new_len) = size.checked_next_multiple_of(PAGE_SIZE) else {
            return core::ptr::null_mut();
        };
        let p = page_addr(b.cast());
        // SAFETY: b is a live huge block (contract).
        let old_len = unsafe { (*b).len };
        if new_len / PAGE_SIZE > u32::MAX as usize {
            return core::ptr::null_mut();
        }
        if new_len <= old_len && new_len * 2 >= old_len {
            // SAFETY: as above: the mapping holds new_len bytes.
            unsafe { (*b).pages = (new_len / PAGE_SIZE) as u32 };
            return p as *mut u8;
        }
        if new_len > old_len && !budget.try_charge(new_len - old_len) {
            return core::ptr::null_mut();
        }
        // SAFETY: as above; the caller owns the block.
        if unsafe { section::resize_huge(b.cast(), new_len) } {
            // SAFETY: as above.
            unsafe {
                (*b).len = new_len;
                (*b).pages = (new_len / PAGE_SIZE) as u32;
            }
            if new_len < old_len {
                budget.uncharge(old_len - new_len);
            }
            self.bytes.fetch_add(new_len, Relaxed);
            self.bytes.fetch_sub(old_len, Relaxed);
            return p as *mut u8;
        }
        if new_len < old_len {
            return p as *mut u8; // cannot shrink in place: keep it as it is
        }
        // Move: a new section, and the old pages remapped into it.
        let offset = p - section::section_base(p);
        let Some(head) = section::create_huge(new_len, offset) else {
            budget.uncharge(new_len - old_len);
            return core::ptr::null_mut();
        };
        let q = page_addr(head);
        if !sys::move_pages(p as *mut u8, old_len, q as *mut u8) {
            // SAFETY: the new section is ours and unused.
            unsafe { section::destroy_huge(head) };
            budget.uncharge(new_len - old_len);
            return core::ptr::null_mut();
        }
        // SAFETY: the new head is ours; the old block's pages now live in
        // the new section and the old section holds nothing.
        unsafe {
            make_huge(head, new_len / PAGE_SIZE, new_len);
            (*b).set_kind(PageKind::None);
            section::destroy_huge(b.cast());
        }
        self.bytes.fetch_add(new_len, Relaxed);
        self.bytes.fetch_sub(old_len, Relaxed);
        q as *mut u8
    }

    /// Bytes mapped for huge blocks, live and cached (racy read).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// The counters.
    pub fn usage(&self) -> HugeUsage {
        let c = self.cache.lock();
        HugeUsage {
            live: self.live.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            allocs: self.allocs.load(Relaxed),
            cache_hits: self.hits.load(Relaxed),
            cached: c.n,
            cached_bytes: c.bytes,
            cache_high: c.high,
        }
    }

    /// Takes the cache lock (before fork).
    pub fn lock_for_fork(&self) {
        core::mem::forget(self.cache.lock());
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
            if child {
                self.cache.lock.force_unlock();
            } else {
                self.cache.lock.unlock();
            }
        }
    }
}

impl Default for HugeBlocks {
    fn default() -> Self {
        Self::new()
    }
}
