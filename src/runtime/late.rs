//! The late heap: where a thread allocates after its exit hook ran.
//!
//! glibc runs pthread key destructors in rounds, in an order we do not
//! choose: a program's destructor may run after ours and allocate (and
//! re-set its key, so there is another round, and another). A thread past
//! its exit hook must not take a heap of its own again — nothing would
//! hand it back — so it allocates from one heap shared by every such
//! thread, under a lock (these allocations are few). Its frees need no
//! heap: a block of the late heap freed by any thread goes on its slab's
//! remote list, as any other thread's would, and the late heap collects
//! it on its next allocation or on the tick. So an exiting thread's memory
//! is always reclaimed, whatever its destructors do, and the late heap is
//! the only heap that outlives no thread.
//!
//! Lock order: the late lock comes right after the tick lock (see
//! `fork.rs`): a heap is acquired, and pages allocated, under it.

use crate::heap::Heap;
use crate::large;
use crate::section::desc_of;
use crate::sync::Locked;

use super::process::{pages_of, HEAPS, PAGES};

/// The late heap (null until a thread first needs it).
static LATE: Locked<usize> = Locked::new(0);

/// An object of `class` for a thread past its exit hook. Null when out of
/// memory.
pub(crate) fn alloc_small(class: usize) -> *mut u8 {
    let mut g = LATE.lock();
    if *g == 0 {
        *g = HEAPS.acquire() as usize;
    }
    let h = *g as *mut Heap;
    if h.is_null() {
        return h.cast();
    }
    // SAFETY: holding the late lock makes this thread the late heap's
    // owner; heaps live forever.
    unsafe {
        let p = Heap::alloc_fast(h, class);
        if !p.is_null() {
            return p;
        }
        let pages = pages_of(&*h);
        (*h).owned().alloc_slow(class, &pages)
    }
}

/// A large block (≤ 4 MiB) for a thread past its exit hook, through the
/// CPU's pageset. Null when out of memory.
pub(crate) fn alloc_large(size: usize, align: usize, zero: bool) -> *mut u8 {
    let p = large::alloc(&PAGES.through(core::ptr::null(), false), size, align, zero);
    if !p.is_null() {
        // SAFETY: p heads a live large block.
        let bytes = unsafe { large::usable_size(desc_of(p as usize).cast()) };
        HEAPS.note_large_allocated_elsewhere(bytes);
    }
    p
}

/// The tick's share: the late heap collects what was freed to it and gives
/// empty slabs back. Returns how many slabs went back.
pub(crate) fn collect() -> usize {
    let g = LATE.lock();
    let h = *g as *mut Heap;
    if h.is_null() {
        return 0;
    }
    // SAFETY: owner under the lock, as above.
    unsafe {
        let pages = pages_of(&*h);
        (*h).owned().collect(&pages)
    }
}

/// Takes the late lock (before fork).
pub(super) fn lock_for_fork() {
    core::mem::forget(LATE.lock());
}

/// Releases (parent) or resets (child) the lock [`lock_for_fork`] took.
///
/// # Safety
/// Only right after fork, having called `lock_for_fork` in this thread.
pub(super) unsafe fn unlock_after_fork(child: bool) {
    // SAFETY: forwarded contract.
    unsafe {
        if child {
            LATE.lock.force_unlock();
        } else {
            LATE.lock.unlock();
        }
    }
}
