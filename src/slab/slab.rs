//! Slab operations on a slab's head descriptor.
//!
//! A slab is a block of order 0..=3 cut into objects of one size class.
//! Its metadata is its head page descriptor (see `page.rs`), so an object's
//! slab is found from the object's address alone: section → descriptor →
//! `head`. Objects are handed out from three places, in this order:
//!
//! - `free`: the owner's list (no atomics; only the owning heap touches it);
//! - `thread_free`: objects freed by other threads, pushed with CAS; the
//!   owner takes the whole list with one swap when `free` runs dry;
//! - the untouched tail (`reserved` < `capacity`), carved a page at a time
//!   so a new slab costs no more memory than it serves.
//!
//! `aux` counts objects handed out and not yet back on `free` (objects
//! waiting on `thread_free` still count), so `aux == 0` means the slab holds
//! no live object and can go back to the page allocator.
//!
//! Free-block layout: word 0 links the list; word 1 holds the process's
//! free key, so `free` recognises a block that is already free (a double
//! free) in O(1) and confirms it by looking through the list.
//!
//! Full slabs are on no list. Before it stops looking at a full slab the
//! owner sets FULL_NOTIFY in `thread_free` (only when `thread_free` is
//! empty, by CAS); the first remote free that finds the flag clears it and
//! pushes the slab on the owner heap's delayed stack, so the owner learns
//! the slab has room again without ever scanning its full slabs (mimalloc's
//! delayed free, simplified: heaps live forever, so the push is always
//! safe).

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::config::PAGE_SIZE;
use crate::page::{flags, Page, PageKind};
use crate::section::{desc_of, page_addr};

use super::classes::{CAPACITY, CLASS_SIZE};

/// Low bit of `thread_free`: the slab is full and its owner wants to hear
/// about the next remote free.
pub const FULL_NOTIFY: usize = 1;
/// Bytes carved from a slab's untouched tail at a time.
const EXTEND_BYTES: usize = PAGE_SIZE;
/// ... but at least this many objects, so large classes do not take the
/// slow path every few allocations.
const EXTEND_MIN_OBJECTS: usize = 16;

/// Turns the block at `head` (order `order`) into an empty slab of class
/// `class` owned by `owner`.
///
/// # Safety
/// `head` heads a block the caller owns, of the slab order of `class`.
pub unsafe fn init(head: *mut Page, class: usize, order: u32, owner: *mut u8) {
    // SAFETY: the caller owns the block and all its descriptors.
    unsafe {
        (*head).order = order as u8;
        set_class(head, class);
        (*head).flags = 0;
        (*head).aux = 0;
        (*head).reserved = 0;
        (*head).capacity = CAPACITY[class];
        (*head).next = core::ptr::null_mut();
        (*head).prev = core::ptr::null_mut();
        (*head).free = core::ptr::null_mut();
        (*head).thread_free.store(0, Relaxed);
        (*head).owner.store(owner, Relaxed);
        (*head).head.store(head, Relaxed);
        let base = page_addr(head);
        for i in 1..(1usize << order) {
            let t = desc_of(base + i * PAGE_SIZE);
            (*t).head.store(head, Relaxed);
            (*t).set_kind(PageKind::SlabTail);
        }
        // Publish the kind last: a racing invalid free that sees Slab also
        // sees the fields above.
        (*head).kind.store(PageKind::Slab as u8, Release);
    }
}

/// Writes the class and what the free path's object check needs of it.
///
/// # Safety
/// The caller owns the slab's descriptor.
unsafe fn set_class(head: *mut Page, class: usize) {
    let info = super::classes::CLASS_INFO[class];
    // SAFETY: forwarded contract.
    unsafe {
        (*head).class = class as u8;
        (*head).obj_inverse = info.inverse;
        (*head).obj_shift = info.shift;
        (*head).capacity = CAPACITY[class];
    }
}

/// The index of the object starting at byte offset `off` of the slab, if
/// one does (one multiply, no table: see `classes::ClassInfo`).
///
/// # Safety
/// `slab` is a live slab's head descriptor and `off` is less than the
/// slab's size.
#[inline(always)]
pub unsafe fn object_index(slab: *const Page, off: usize) -> Option<usize> {
    // SAFETY: forwarded contract; the fields were set by init together.
    unsafe {
        super::classes::object_index(
            (*slab).obj_inverse,
            (*slab).obj_shift,
            (*slab).capacity,
            off,
        )
    }
}

/// Sets up an empty slab of the same order again for another `class`: its
/// objects are forgotten and carved anew from the untouched tail.
///
/// # Safety
/// `head` is a slab owned by the calling heap, with no live object, no
/// pending remote free, on no list, and `SLAB_ORDER[class]` is its order.
pub unsafe fn reinit(head: *mut Page, class: usize) {
    // SAFETY: the caller owns the slab; nobody else may touch its objects.
    unsafe {
        debug_assert_eq!((*head).aux, 0);
        debug_assert_eq!(super::classes::SLAB_ORDER[class], (*head).order);
        debug_assert_eq!((*head).thread_free.load(Relaxed), 0);
        set_class(head, class);
        (*head).reserved = 0;
        (*head).free = core::ptr::null_mut();
    }
}

/// Undoes [`init`] before the block goes back to the page allocator; the
/// head keeps only its order.
///
/// # Safety
/// `head` is a slab with no live objects, owned by the caller.
pub unsafe fn fini(head: *mut Page) {
    // SAFETY: the caller owns the slab and its descriptors.
    unsafe {
        let order = u32::from((*head).order);
        let base = page_addr(head);
        for i in 1..(1usize << order) {
            let t = desc_of(base + i * PAGE_SIZE);
            (*t).head.store(core::ptr::null_mut(), Relaxed);
            (*t).set_kind(PageKind::None);
        }
        (*head).reset();
        (*head).order = order as u8;
        (*head).flags = 0; // the memory was written: not clean
    }
}

/// Carves up to a page of objects from the untouched tail onto `free`.
/// Returns false if the slab has no untouched objects left.
///
/// # Safety
/// `slab` is a slab owned by the calling heap.
pub unsafe fn extend(slab: *mut Page) -> bool {
    // SAFETY: the owner has exclusive use of free/reserved and of the
    // never-handed-out objects it writes.
    unsafe {
        let class = (*slab).class as usize;
        let size = CLASS_SIZE[class] as usize;
        let cap = (*slab).capacity as usize;
        let first = (*slab).reserved as usize;
        if first >= cap {
            return false;
        }
        let n = (EXTEND_BYTES / size)
            .max(EXTEND_MIN_OBJECTS)
            .min(cap - first);
        let base = page_addr(slab) + first * size;
        // Link the new objects in address order, ending in the old list.
        // They get no free key: only a block that was handed out and freed
        // carries one (freeing a block never handed out is not detected).
        let mut next = (*slab).free;
        for i in (0..n).rev() {
            let obj = (base + i * size) as *mut usize;
            obj.write(next as usize);
            next = obj.cast();
        }
        (*slab).free = next;
        (*slab).reserved = (first + n) as u16;
        true
    }
}

/// Moves every remotely freed object onto `free` and returns how many.
///
/// # Safety
/// `slab` is a slab owned by the calling heap.
pub unsafe fn collect_thread_free(slab: *mut Page) -> u32 {
    // SAFETY: only the owner swaps thread_free out; the objects on it are
    // free and ours to relink.
    unsafe {
        if (*slab).thread_free.load(Relaxed) & !FULL_NOTIFY == 0 {
            return 0;
        }
        let list = (*slab).thread_free.swap(0, Acquire) & !FULL_NOTIFY;
        let mut n = 0u32;
        let mut p = list as *mut usize;
        let mut last = p;
        while !p.is_null() {
            n += 1;
            last = p;
            p = p.read() as *mut usize;
        }
        if n > 0 {
            last.write((*slab).free as usize);
            (*slab).free = list as *mut u8;
            (*slab).aux -= n;
        }
        n
    }
}

/// Pushes object `p` on the slab's remote list. Returns true if the slab
/// was marked full, in which case the caller must notify the owner.
///
/// # Safety
/// `p` is a live object of `slab` being freed by a thread that does not own
/// the slab.
#[inline]
pub unsafe fn push_remote(slab: *mut Page, p: *mut u8, free_key: usize) -> bool {
    // SAFETY: p is a live object of this slab (contract); after the CAS it
    // belongs to the list, which only the owner takes.
    unsafe {
        let obj = p as *mut usize;
        obj.add(1).write(free_key);
        let tf = &(*slab).thread_free;
        let mut old = tf.load(Relaxed);
        loop {
            obj.write(old & !FULL_NOTIFY);
            match tf.compare_exchange_weak(old, p as usize, Release, Relaxed) {
                Ok(_) => return old & FULL_NOTIFY != 0,
                Err(o) => old = o,
            }
        }
    }
}

/// Marks a slab full: sets FULL_NOTIFY if no remote free is pending.
/// Returns false if remote frees arrived (collect them instead).
///
/// # Safety
/// `slab` is owned by the calling heap, is on no list, and its `free` list
/// and untouched tail are empty.
pub unsafe fn mark_full(slab: *mut Page) -> bool {
    // SAFETY: owner-only fields; thread_free by CAS.
    unsafe {
        if (*slab)
            .thread_free
            .compare_exchange(0, FULL_NOTIFY, Release, Relaxed)
            .is_err()
        {
            return false;
        }
        (*slab).flags |= flags::IN_FULL;
        true
    }
}

/// Takes a full slab back after a local free: clears FULL_NOTIFY if no
/// remote free has claimed the notice. Returns false if a remote freer did,
/// in which case the slab is (or soon will be) on the delayed stack and
/// must stay marked IN_FULL until popped from there.
///
/// # Safety
/// `slab` is owned by the calling heap and marked IN_FULL.
pub unsafe fn unmark_full(slab: *mut Page) -> bool {
    // SAFETY: owner-only fields; thread_free by CAS.
    unsafe {
        if (*slab)
            .thread_free
            .compare_exchange(FULL_NOTIFY, 0, Acquire, Relaxed)
            .is_err()
        {
            return false;
        }
        (*slab).flags &= !flags::IN_FULL;
        true
    }
}

/// Whether `p` is on the slab's owner-side free list (double-free check).
///
/// # Safety
/// `slab` is owned by the calling heap.
pub unsafe fn on_free_list(slab: *mut Page, p: *mut u8) -> bool {
    // SAFETY: the owner's list is owner-only and well formed.
    unsafe {
        let mut q = (*slab).free;
        let mut steps = 0u32;
        while !q.is_null() {
            if q == p {
                return true;
            }
            q = (q as *mut usize).read() as *mut u8;
            steps += 1;
            if steps > u32::from((*slab).capacity) {
                return false; // a corrupted list: do not loop forever
            }
        }
        false
    }
}
