//! A slab's remote list: the `thread_free` word of its descriptor, which
//! other threads push their frees of the slab's objects onto with CAS,
//! and the flags it carries for the owner (the slab itself is `slab.rs`).
//!
//! The word holds the list's first object, in its top 16 bits how many
//! objects the list holds (above the 47 bits of a user address: the owner
//! takes list and count with one swap and need not walk the list,
//! snmalloc's counted batches in one word), and two flags in its low bits
//! (objects are 16-byte aligned): FULL_NOTIFY and QUEUED.
//!
//! Full slabs are on no list. Before it stops looking at a full slab the
//! owner sets FULL_NOTIFY in `thread_free` (only when `thread_free` is
//! empty, by CAS); the first remote free that finds the flag clears it and
//! pushes the slab on the owner heap's delayed stack, so the owner learns
//! the slab has room again without ever scanning its full slabs (mimalloc's
//! delayed free, simplified: heaps live forever, so the push is always
//! safe).
//!
//! A slab whose every object is free but whose owner does not come back
//! for that class would stay with its owner for good. So whoever frees the
//! last live object of a slab tells the owner heap: the owner's own free
//! (the bin full, `slab::give_back`) sees `used` reach the remote list's count
//! and takes the slow path; a remote free whose push leaves `used` objects
//! on the remote list (`used` read before its CAS, while its objects keep
//! the slab alive) sets [`QUEUED`] in the same CAS and pushes the slab on
//! the owner heap's *emptied* stack, linked through its second page's
//! descriptor ([`emptied_link`]: the slab's own `next` may be on the
//! partial list). The owner takes the stack on its next slow path, or —
//! the owner idle — the tick, a trim or a reclaim does (`emptied.rs`).
//!
//! Invariant: a slab with [`QUEUED`] set is on its owner's emptied stack
//! (or its pusher is about to put it there) and is never parked or given
//! back: it stays current, partial or full until the stack's reader clears
//! the bit. Only that reader clears it; [`collect_thread_free`],
//! [`mark_full`] and [`unmark_full`] keep it.

use core::sync::atomic::AtomicU16;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use super::classes;
use super::object::FreeObject;
use super::slab::{
    list_len, set_in_full, set_used, tf_count, tf_list, used, Slab, FULL_NOTIFY, QUEUED,
    TF_COUNT_SHIFT, TF_FLAGS, TF_PTR_MASK,
};

/// Whether every object of slab `s` is free — on its own list or its
/// remote list, none live, on a bin or on a chain: `used` equals the
/// remote list's count. Exact for the owner; from another thread holding
/// the heap's lists (the owner's frees can then only lower `used`, the
/// remote list only grow) `used` is read first, so a yes is never stale:
/// `used` now lies between what was read and the count read after it.
///
/// # Safety
/// `s` is a live slab of a heap whose lists the caller holds.
#[inline]
pub(crate) unsafe fn all_free(s: *const Slab) -> bool {
    // SAFETY: atomic views of a live descriptor (contract).
    unsafe {
        let u = AtomicU16::from_ptr(core::ptr::addr_of!((*s).used).cast_mut()).load(Acquire);
        u32::from(u) == tf_count((*s).thread_free.load(Acquire))
    }
}

/// Whether slab `s` is QUEUED (on its owner's emptied stack).
///
/// # Safety
/// `s` is a live slab.
#[inline]
pub(crate) unsafe fn is_queued(s: *const Slab) -> bool {
    // SAFETY: an atomic of a live descriptor.
    unsafe { (*s).thread_free.load(Acquire) & QUEUED != 0 }
}

/// Clears QUEUED: slab `s` was taken off its owner's emptied stack (read
/// its link first: from here on a remote free may push it again).
///
/// # Safety
/// The caller holds the heap's lists and took `s` off the emptied stack.
#[inline]
pub(crate) unsafe fn clear_queued(s: *mut Slab) {
    // SAFETY: an atomic of a live descriptor.
    unsafe { (*s).thread_free.fetch_and(!QUEUED, AcqRel) };
}

/// Where slab `s` is linked on its owner's emptied stack: the `next`
/// field of its second page's descriptor (a tail's links are otherwise
/// unused; the slab's own `next` may hold the partial list). Written by
/// the freer that set QUEUED, read by whoever takes the stack.
#[inline(always)]
pub(crate) fn emptied_link(s: *mut Slab) -> *mut *mut Slab {
    const _: () = assert!(classes::SLAB_PAGES > 1);
    // The descriptors of a slab's pages are consecutive (`free_view`).
    let t = Slab::page(s).wrapping_add(1);
    // SAFETY: only an address is computed.
    unsafe { core::ptr::addr_of_mut!((*t).next).cast() }
}

/// Moves every remotely freed object onto `free` and returns how many.
///
/// # Safety
/// `s` is a slab owned by the calling heap.
pub(crate) unsafe fn collect_thread_free(s: *mut Slab) -> u32 {
    // SAFETY: only the owner swaps thread_free out; the objects on it are
    // free and ours to relink.
    unsafe {
        if (*s).thread_free.load(Relaxed) & !TF_FLAGS == 0 {
            return 0;
        }
        // The list and its count, in one atomic step; QUEUED stays (the
        // slab may be on the emptied stack). FULL_NOTIFY is never set here:
        // a slab is collected when current, partial, or off the delayed
        // stack (whose pusher cleared it).
        let tf = (*s).thread_free.fetch_and(QUEUED, Acquire);
        debug_assert_eq!(tf & FULL_NOTIFY, 0);
        let (list, n) = (tf_list(tf), tf_count(tf));
        debug_assert_eq!(list_len(list, Slab::capacity(s)), n as usize);
        if n > 0 {
            // The count came with the list: only a non-empty own list
            // needs the remote list's last object (the common callers
            // collect when their own list ran dry, or the slab was full).
            if !(*s).free.is_null() {
                let mut last = list;
                for _ in 1..n {
                    last = FreeObject::at(last).next();
                }
                FreeObject::at(last).set_next((*s).free);
            }
            (*s).free = list;
            set_used(s, used(s) - n as u16);
        }
        n
    }
}

/// What a push on a slab's remote list asks of its pusher: the
/// `thread_free` flag bits the push took over ([`Pushed::NONE`] in the
/// common case, so the caller tests one word).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Pushed(usize);

impl Pushed {
    /// Nothing to do.
    pub const NONE: Pushed = Pushed(0);

    /// The slab was marked full: the owner must hear of it (the delayed
    /// stack, `Heap::notify_owner`).
    #[inline]
    pub fn full(self) -> bool {
        self.0 & FULL_NOTIFY != 0
    }

    /// The push left every object of the slab free and set QUEUED: the
    /// slab goes on its owner's emptied stack.
    #[inline]
    pub fn emptied(self) -> bool {
        self.0 & QUEUED != 0
    }
}

/// Pushes the chain `first ..= last` of `n` objects of `s` (linked through
/// word 0, each carrying the free key) on the slab's remote list with one
/// CAS, which also adds `n` to the list's count — and sets QUEUED when the
/// count then reaches `used` (read before the CAS, while the chain keeps
/// the slab alive: a guess the emptied stack's reader checks; see the
/// module docs). Returns what the caller must do next.
///
/// # Safety
/// The objects are objects of `s` the slab counts as in use, freed by a
/// thread that does not own the slab, and nobody uses them; `n` counts
/// them.
#[inline]
pub(crate) unsafe fn push_remote(s: *mut Slab, first: *mut u8, last: *mut u8, n: u32) -> Pushed {
    debug_assert!(first as usize & !TF_PTR_MASK == 0);
    // SAFETY: the chain is ours (contract); after the CAS it belongs to
    // the list, which only the owner takes.
    unsafe {
        let tf = &(*s).thread_free;
        let mut old = tf.load(Relaxed);
        loop {
            // The list holds distinct objects of the slab: its count stays
            // within the capacity, far below 2^16.
            let count = tf_count(old) + n;
            // A flag to keep or act on (the first remote free of a full
            // slab, a slab already queued), or every object free after
            // this push? Rare: out of line, so the common push pays a load
            // and two tests.
            if old & TF_FLAGS != 0 || count as u16 == used(s) {
                return push_remote_flagged(s, first, last, n);
            }
            FreeObject::at(last).set_next(tf_list(old));
            let new = first as usize | (count as usize) << TF_COUNT_SHIFT;
            match tf.compare_exchange_weak(old, new, Release, Relaxed) {
                Ok(_) => return Pushed::NONE,
                Err(o) => old = o,
            }
        }
    }
}

/// [`push_remote`] when the remote list carries a flag or the push looks
/// like leaving every object of the slab free: the same loop, keeping
/// QUEUED, taking FULL_NOTIFY's notice, and setting QUEUED when every
/// object is free and nobody was told.
///
/// # Safety
/// As [`push_remote`].
#[cold]
#[inline(never)]
unsafe fn push_remote_flagged(s: *mut Slab, first: *mut u8, last: *mut u8, n: u32) -> Pushed {
    // SAFETY: as in `push_remote`.
    unsafe {
        let tf = &(*s).thread_free;
        let mut old = tf.load(Relaxed);
        loop {
            let count = tf_count(old) + n;
            let notice = if count as u16 == used(s) && old & TF_FLAGS == 0 {
                QUEUED
            } else {
                old & FULL_NOTIFY
            };
            FreeObject::at(last).set_next(tf_list(old));
            let new = first as usize
                | (count as usize) << TF_COUNT_SHIFT
                | (old & QUEUED)
                | (notice & QUEUED);
            match tf.compare_exchange_weak(old, new, Release, Relaxed) {
                Ok(_) => return Pushed(notice),
                Err(o) => old = o,
            }
        }
    }
}

/// Marks a slab full: sets FULL_NOTIFY if no remote free is pending.
/// Returns false if remote frees arrived (collect them instead).
///
/// # Safety
/// `s` is owned by the calling heap, is on no list, and its `free` list
/// and untouched tail are empty.
pub(crate) unsafe fn mark_full(s: *mut Slab) -> bool {
    // SAFETY: owner-only fields; thread_free by CAS. QUEUED may be set (a
    // slab refilled from while on the emptied stack) and stays; only the
    // stack's reader clears it, under the lists the caller holds.
    unsafe {
        let tf = &(*s).thread_free;
        let old = tf.load(Relaxed);
        if old & !QUEUED != 0
            || tf
                .compare_exchange(old, old | FULL_NOTIFY, Release, Relaxed)
                .is_err()
        {
            return false;
        }
        set_in_full(s, true);
        true
    }
}

/// Takes a full slab back after a local free: clears FULL_NOTIFY if no
/// remote free has claimed the notice. Returns false if a remote freer did,
/// in which case the slab is (or soon will be) on the delayed stack and
/// must stay marked IN_FULL until popped from there.
///
/// # Safety
/// `s` is owned by the calling heap and marked IN_FULL.
pub(crate) unsafe fn unmark_full(s: *mut Slab) -> bool {
    // SAFETY: owner-only fields; thread_free by CAS (QUEUED kept, as in
    // `mark_full`).
    unsafe {
        let tf = &(*s).thread_free;
        let old = tf.load(Relaxed);
        if old & !QUEUED != FULL_NOTIFY
            || tf
                .compare_exchange(old, old & QUEUED, Acquire, Relaxed)
                .is_err()
        {
            return false;
        }
        set_in_full(s, false);
        true
    }
}
