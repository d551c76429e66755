//! Every thread heap of an allocator, and the abandoned ones waiting for a
//! new thread.
//!
//! Heaps are never freed: when a thread exits, its heap gives back what it
//! can (empty slabs, cached blocks) and goes on the abandoned list, slabs
//! and all; the next new thread adopts it whole. So a slab's owner never
//! changes while the slab lives, remote frees always reach a valid heap,
//! and a program that churns threads reuses the same few heaps. The
//! maintenance tick sweeps abandoned heaps too, so their emptied slabs go
//! back; a live heap's slabs whose every object is free go back without
//! its owner too (`emptied.rs`).

use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};

use crate::meta;
use crate::page_alloc::Pages;
use crate::sync::Locked;

use super::emptied::SWEEP_TICKS;
use super::heap::{Heap, EMPTY_HEAP, HEAP_ABANDONED, HEAP_ACTIVE, HEAP_LOST};

/// The heaps of one allocator. See the module docs.
pub struct HeapRegistry {
    /// Every heap ever made, through `next_all` (lock-free push).
    all: AtomicPtr<Heap>,
    /// Heaps of exited threads, through `next_abandoned`.
    abandoned: Locked<usize>,
    /// How many heaps are abandoned (on the list, or off it for a sweep);
    /// written under the list's lock.
    abandoned_count: AtomicUsize,
    /// Bytes of large blocks freed by threads without a heap (rare: during
    /// a thread's exit), which no heap's counters see.
    large_freed_elsewhere: AtomicU64,
    /// Bytes of large blocks allocated by threads past their exit hook.
    large_allocated_elsewhere: AtomicU64,
}

/// Bytes in use in the small objects and large blocks of every heap (see
/// [`HeapRegistry::bytes_in_use`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BytesInUse {
    /// Live small objects, by their class size.
    pub small: u64,
    /// Free small objects waiting on thread bins.
    pub binned: u64,
    /// Live large blocks, by their pages.
    pub large: u64,
}

impl HeapRegistry {
    /// No heap yet.
    pub const fn new() -> HeapRegistry {
        HeapRegistry {
            all: AtomicPtr::new(ptr::null_mut()),
            abandoned: Locked::new(0),
            abandoned_count: AtomicUsize::new(0),
            large_freed_elsewhere: AtomicU64::new(0),
            large_allocated_elsewhere: AtomicU64::new(0),
        }
    }

    /// Counts a large block of `bytes` freed by a thread without a heap.
    pub fn note_large_freed_elsewhere(&self, bytes: usize) {
        self.large_freed_elsewhere.fetch_add(bytes as u64, Relaxed);
    }

    /// Counts a large block of `bytes` allocated by a thread without a
    /// heap (past its exit hook).
    pub fn note_large_allocated_elsewhere(&self, bytes: usize) {
        self.large_allocated_elsewhere
            .fetch_add(bytes as u64, Relaxed);
    }

    /// Bytes in use, summed over every heap's counters (a racy snapshot:
    /// each counter is read once, so the sums are off by at most what
    /// moved while they were read).
    pub fn bytes_in_use(&self) -> BytesInUse {
        let (mut small, mut binned, mut large) = (0i64, 0u64, 0i64);
        self.for_each(|h| {
            let u = h.usage();
            small += u.small_out - u.remote_freed;
            binned += u.binned;
            large += u.large_out;
        });
        large -= self.large_freed_elsewhere.load(Relaxed) as i64;
        large += self.large_allocated_elsewhere.load(Relaxed) as i64;
        // Small objects freed by threads without a heap are counted on
        // the empty heap (the only counter it has).
        small -= EMPTY_HEAP.usage().remote_freed;
        BytesInUse {
            small: (small - binned as i64).max(0) as u64,
            binned,
            large: large.max(0) as u64,
        }
    }

    /// A heap for a new thread: an abandoned one, or a new one. Null if
    /// metadata memory ran out. The caller owns it; it is marked active.
    /// A new heap is made under the abandoned-list lock, so no heap appears
    /// while [`lock_all`](Self::lock_all) holds it.
    pub fn acquire(&self) -> *mut Heap {
        let h = {
            let mut a = self.abandoned.lock();
            let h = *a as *mut Heap;
            if h.is_null() {
                self.create()
            } else {
                // SAFETY: heaps on the abandoned list are ours to take; the
                // link is guarded by the lock we hold.
                *a = unsafe { *(*h).next_abandoned.get() } as usize;
                self.abandoned_count.store(
                    self.abandoned_count.load(Relaxed).saturating_sub(1),
                    Relaxed,
                );
                h
            }
        };
        if !h.is_null() {
            // SAFETY: heaps live forever.
            unsafe { (*h).state.store(HEAP_ACTIVE, Release) };
        }
        h
    }

    fn create(&self) -> *mut Heap {
        let h = meta::alloc(core::mem::size_of::<Heap>(), 64).cast::<Heap>();
        if h.is_null() {
            return h;
        }
        // A heap is nearly 4 KiB: copied from a static, not built on the
        // stack, so a thread's first allocation fits in a small stack (a
        // signal handler's alternate one).
        static NEW_HEAP: Heap = Heap::new();
        // SAFETY: fresh, aligned metadata memory, ours alone; NEW_HEAP is
        // never used but as this template, so its bytes are a new heap's.
        unsafe { core::ptr::copy_nonoverlapping(&NEW_HEAP, h, 1) };
        let mut head = self.all.load(Acquire);
        loop {
            // SAFETY: h is ours until published.
            unsafe { (*h).next_all.store(head, Relaxed) };
            match self.all.compare_exchange_weak(head, h, AcqRel, Acquire) {
                Ok(_) => return h,
                Err(x) => head = x,
            }
        }
    }

    /// Puts `h` on the abandoned list, for the next new thread.
    ///
    /// # Safety
    /// The caller owns `h` and will not touch it again.
    pub unsafe fn abandon(&self, h: *mut Heap) {
        let mut a = self.abandoned.lock();
        // SAFETY: ours until pushed; the link is guarded by the lock.
        unsafe {
            (*h).state.store(HEAP_ABANDONED, Release);
            *(*h).next_abandoned.get() = *a as *mut Heap;
        }
        *a = h as usize;
        self.abandoned_count
            .store(self.abandoned_count.load(Relaxed) + 1, Relaxed);
    }

    /// How many heaps are abandoned now (a racy hint).
    pub fn abandoned_count(&self) -> usize {
        self.abandoned_count.load(Relaxed)
    }

    /// Calls `f` on every heap ever created.
    pub fn for_each(&self, mut f: impl FnMut(&Heap)) {
        let mut h = self.all.load(Acquire);
        while !h.is_null() {
            // SAFETY: heaps live forever.
            let r = unsafe { &*h };
            f(r);
            h = r.next_all.load(Acquire);
        }
    }

    /// Sweeps every abandoned heap (maintenance tick, trim, reclaim):
    /// collects remote frees and gives emptied slabs back. Each heap is
    /// taken off the list while it is swept, so a thread adopting heaps
    /// meanwhile never sees it. Returns how many slabs went back.
    pub fn collect_abandoned(&self, pages: &Pages<'_>) -> usize {
        let mut slabs = 0;
        let mut list = {
            let mut a = self.abandoned.lock();
            core::mem::replace(&mut *a, 0) as *mut Heap
        };
        let mut done: *mut Heap = ptr::null_mut();
        let mut tail: *mut Heap = ptr::null_mut();
        while !list.is_null() {
            // SAFETY: the heaps are off the list and so ours for now.
            unsafe {
                let next = *(*list).next_abandoned.get();
                slabs += (*list).owned().collect(pages);
                *(*list).next_abandoned.get() = done;
                if done.is_null() {
                    tail = list;
                }
                done = list;
                list = next;
            }
        }
        if !done.is_null() {
            let mut a = self.abandoned.lock();
            // SAFETY: tail is the last heap of our private chain.
            unsafe { *(*tail).next_abandoned.get() = *a as *mut Heap };
            *a = done as usize;
        }
        slabs
    }

    /// The tick's share of slabs whose every object is free
    /// (`emptied.rs`): every live heap whose owner took no allocation slow
    /// path since the tick before last gives back those on its stacks, and
    /// every `SWEEP_TICKS` ticks those on its lists (an owner that keeps
    /// taking slow paths does it itself). `epoch` is the tick's. Returns
    /// how many slabs went back.
    pub fn collect_idle_emptied(&self, epoch: u32, pages: &Pages<'_>) -> usize {
        let sweep = epoch.is_multiple_of(SWEEP_TICKS);
        let mut n = 0;
        self.for_each(|h| {
            if h.state.load(Relaxed) == HEAP_ACTIVE
                && epoch.wrapping_sub(h.slow_epoch.load(Relaxed)) >= 2
            {
                n += h.collect_emptied(sweep && h.holds_slabs(), pages);
            }
        });
        n
    }

    /// A trim's or a reclaim's share: every live heap but `me` (the
    /// caller's, which collects as owner) gives back every slab whose
    /// every object is free, its owner busy or not. Returns how many
    /// slabs went back.
    pub fn collect_emptied_everywhere(&self, me: *const Heap, pages: &Pages<'_>) -> usize {
        let mut n = 0;
        self.for_each(|h| {
            if !ptr::eq(h, me) && h.state.load(Relaxed) == HEAP_ACTIVE {
                n += h.collect_emptied(h.holds_slabs(), pages);
            }
        });
        n
    }

    /// Gives back the parked slabs of every heap whose parking lock is
    /// free (the tick's share, and an allocation at the memory limit).
    /// Returns how many slabs went back.
    pub fn release_parked_everywhere(&self, pages: &Pages<'_>) -> usize {
        let mut n = 0;
        self.for_each(|h| n += h.release_parked(pages));
        n
    }

    /// The tick's share of the large bins: spills those of every live
    /// thread that used them in neither tick `epoch` nor the one before.
    /// (A lost heap's bins — a thread that did not survive fork — stay as
    /// they are: its lock may be held by that thread.) Returns the pages
    /// spilled.
    pub fn drain_idle_block_bins(&self, epoch: u32, pages: &Pages<'_>) -> usize {
        let mut n = 0;
        self.for_each(|h| {
            if h.state.load(Relaxed) == HEAP_ACTIVE {
                n += h.block_bins.drain_if_idle(epoch, pages);
            }
        });
        n
    }

    /// Spills the large bins of every live thread (a reclaim at the memory
    /// limit, a trim). Returns the pages spilled.
    pub fn drain_all_block_bins(&self, pages: &Pages<'_>) -> usize {
        let mut n = 0;
        self.for_each(|h| {
            if h.state.load(Relaxed) == HEAP_ACTIVE {
                n += h.block_bins.drain_remote(pages);
            }
        });
        n
    }

    /// In a forked child, after [`mark_lost_except`](Self::mark_lost_except):
    /// the large bins of the lost heaps that nobody was in at the fork go
    /// back to `pages`. Returns the pages spilled.
    ///
    /// # Safety
    /// Only in a forked child, from its one thread.
    pub unsafe fn drain_lost_block_bins(&self, pages: &Pages<'_>) -> usize {
        let mut n = 0;
        self.for_each(|h| {
            if h.state.load(Relaxed) == HEAP_LOST {
                // SAFETY: forwarded contract; a lost heap's owner is gone.
                n += unsafe { h.block_bins.drain_lost(pages) };
            }
        });
        n
    }

    /// In a forked child: every heap but `me` belonged to a thread that
    /// does not exist there; mark the active ones lost (never reused).
    pub fn mark_lost_except(&self, me: *const Heap) {
        self.for_each(|h| {
            if !ptr::eq(h, me) && h.state.load(Relaxed) == HEAP_ACTIVE {
                h.state.store(HEAP_LOST, Relaxed);
            }
        });
    }

    /// Takes the abandoned-list lock, then every heap's parking lock
    /// (before fork). No heap is created while the first is held, so
    /// `unlock_all` releases exactly these.
    pub fn lock_all(&self) {
        core::mem::forget(self.abandoned.lock());
        self.for_each(|h| h.parked.lock_for_fork());
    }

    /// Releases what [`lock_all`](Self::lock_all) took: in the parent,
    /// waking anyone queued; in the child, resetting.
    ///
    /// # Safety
    /// Only right after fork, having called `lock_all` in this thread.
    pub unsafe fn unlock_all(&self, child: bool) {
        // SAFETY: every lock was taken by lock_all in this thread.
        unsafe {
            self.for_each(|h| h.parked.unlock_after_fork());
            if child {
                self.abandoned.lock.force_unlock();
            } else {
                self.abandoned.lock.unlock();
            }
        }
    }
}

impl Default for HeapRegistry {
    fn default() -> Self {
        Self::new()
    }
}
