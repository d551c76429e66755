//! The small-object free's slow paths (`finish_free` in `paths.rs`
//! dispatches to them): another heap's object sent back in a batch, a
//! slab of the thread's that became empty or was full, a bad pointer or a
//! double free reported, a slab holding a sampled object
//! (`slab/marks.rs`), and every free while tracing or under valgrind.

use core::sync::atomic::Ordering::Relaxed;

use crate::heap::{self, Heap};
use crate::heap_profile as profile;
use crate::slab::Slab;
use crate::trace::Op;

use super::process::{self, pages_of};
use super::thread::thread_heap;
use super::{record, tick, tls, valgrind};

/// Slab `s` of this thread's heap `h` became empty, or was full.
///
/// # Safety
/// The calling thread owns `h`, which owns `s`.
#[cold]
#[inline(never)]
pub(super) unsafe fn slab_changed(h: *mut Heap, s: *mut Slab) {
    // SAFETY: forwarded contract.
    unsafe {
        let pages = pages_of(&*h);
        (*h).owned().slab_given_back(s, &pages);
    }
    // An emptied slab went back to the pages: as any free that leaves
    // memory there, it may give back what waits (no thread, see
    // `give_back.rs`) or start the background thread.
    tick::memory_waiting();
}

/// A valid object of another heap's slab `s`, checked by the fast path:
/// it goes back to its slab in a batch (`heap/remote.rs`). Apart from the
/// free fast path, which it leaves as it was (the own free falls
/// through), and a leaf in the common case — the object joins its slab's
/// chain — so it saves no registers; everything else is
/// [`free_small_remote_slow`]'s.
///
/// # Safety
/// `p` is a live object of slab `s`, without the free key, that the
/// caller frees.
#[inline(never)]
pub(super) unsafe fn free_small_remote(p: *mut u8, s: *mut Slab) {
    // SAFETY: forwarded contract; the TLS heap is this thread's (or the
    // empty heap, which the hit turns away).
    unsafe {
        if !Heap::free_remote_hit(tls::heap(), p, s, process::free_key()) {
            free_small_remote_slow(p, s)
        }
    }
}

/// [`free_small_remote`] past the hit: a chain to flush or start, a thread
/// without a heap yet (a consumer gets one here), tracing.
///
/// # Safety
/// As [`free_small_remote`].
#[cold]
#[inline(never)]
unsafe fn free_small_remote_slow(p: *mut u8, s: *mut Slab) {
    if record::every_op_slow() {
        // SAFETY: forwarded contract.
        return unsafe { free_small_traced(p, s) };
    }
    let h = freeing_heap();
    // SAFETY: forwarded contract; h is this thread's heap (or the empty
    // heap), which does not own s (the fast path compared).
    unsafe { heap::free_remote(p, s, h, process::free_key()) };
}

/// The calling thread's heap for a free: a thread that frees before it
/// ever allocates (a consumer) gets its heap now, so its remote frees go
/// back in batches (`heap/remote.rs`) instead of one CAS each. The empty
/// heap for a thread past its exit hook.
#[inline]
fn freeing_heap() -> *mut Heap {
    let h = tls::heap();
    // SAFETY: h is this thread's heap or the static empty heap.
    if unsafe { (*h).is_empty_heap() } {
        let t = thread_heap();
        if !t.is_null() {
            return t;
        }
    }
    h
}

/// The small-object free slow path (see `slab::free_slow`): a bad
/// pointer, or a block holding the free key.
///
/// # Safety
/// `s` is the slab head of `p`'s page; the caller is freeing `p`.
#[cold]
#[inline(never)]
pub(super) unsafe fn free_small_slow(p: *mut u8, s: *mut Slab) {
    // SAFETY: s is a live slab head (contract); a `reserved` of zero is a
    // slab with nothing carved or one holding a sampled object.
    if unsafe { (*s).reserved == 0 && crate::slab::marks::is_marked(s) } {
        // SAFETY: forwarded contract.
        return unsafe { free_in_marked(p, s) };
    }
    if record::every_op_slow() {
        // SAFETY: forwarded contract.
        return unsafe { free_small_traced(p, s) };
    }
    let h = freeing_heap();
    let key = process::free_key();
    // SAFETY: forwarded contract; h is this thread's heap (or the empty
    // heap, which owns no slab).
    unsafe {
        if !heap::try_free_remote(p, s, h, key) {
            free_small_rare(p, s, h, key);
        }
    }
}

/// [`free_small_slow`] for a slab holding sampled objects
/// (`slab/marks.rs`), whose every free comes here: the object check with
/// the count kept apart, the sample's end if `p` is one, then the free as
/// the fast path or the remote path would do it.
///
/// # Safety
/// As [`free_small_slow`].
#[cold]
#[inline(never)]
unsafe fn free_in_marked(p: *mut u8, s: *mut Slab) {
    use crate::slab::marks;
    // SAFETY: forwarded contract; the checks come before any write.
    unsafe {
        if marks::object_at(s, p).is_none() && marks::object_at_settled(s, p).is_none() {
            crate::alert::fatal("free(): invalid pointer (not the start of a block)", p);
        }
        if let Some(i) = marks::slot_of(s, p) {
            let r = marks::release_slot(s, i, p);
            if r != 0 {
                profile::remove_sample(r as *mut crate::heap_profile::Record);
            }
        }
        let h = freeing_heap();
        let key = process::free_key();
        if crate::slab::object::FreeObject::at(p).holds(key)
            || (*s).owner.load(Relaxed) == h as *mut u8
        {
            // A double free (reported), or the thread's own object.
            free_small_rare(p, s, h, key);
        } else {
            heap::free_remote(p, s, h, key);
        }
    }
}

/// The rest of [`free_small_slow`]: `p` holds the free key, or is the
/// thread's own block (see `slab::free_keyed_or_own`).
///
/// # Safety
/// As [`free_small_slow`]; `h` is this thread's heap and `key` the free key.
#[cold]
#[inline(never)]
unsafe fn free_small_rare(p: *mut u8, s: *mut Slab, h: *mut Heap, key: usize) {
    // SAFETY: forwarded contract.
    unsafe {
        if heap::finish(p, s, h, key, heap::free_keyed_or_own(p, s, h, key)) {
            slab_changed(h, s);
        }
    }
}

/// While tracing (or under valgrind), every small free comes here: the
/// record, then the fast path's work on the thread's real heap.
///
/// # Safety
/// As [`free_small_slow`].
#[cold]
#[inline(never)]
unsafe fn free_small_traced(p: *mut u8, s: *mut Slab) {
    if valgrind::on() {
        valgrind::freeing(p);
        // SAFETY: forwarded contract.
        unsafe { free_small_traced_plain(p, s) };
        return valgrind::freed();
    }
    // SAFETY: forwarded contract.
    unsafe { free_small_traced_plain(p, s) }
}

/// [`free_small_traced`]'s work.
///
/// # Safety
/// As [`free_small_slow`].
unsafe fn free_small_traced_plain(p: *mut u8, s: *mut Slab) {
    let mut h = thread_heap();
    if h.is_null() {
        h = core::ptr::addr_of!(crate::heap::heap::EMPTY_HEAP) as *mut Heap;
    } else {
        // SAFETY: heaps live forever.
        record::record(unsafe { &*h }, Op::Free, p, 0, 0);
    }
    // The key is loaded after the record's calls, not kept across them: a
    // value held across a call can be saved on the stack, where a program
    // may pick it up in uninitialised bytes (see `slab::free_slow`).
    let key = process::free_key();
    // SAFETY: forwarded contract for the free; h is this thread's heap.
    unsafe {
        if heap::free_by_every_path(p, s, h, key) {
            slab_changed(h, s);
        }
    }
}
