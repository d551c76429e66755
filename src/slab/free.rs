//! The free path of small objects: the local push, the remote push, and
//! the checks that catch invalid pointers and double frees on the way.

use core::sync::atomic::Ordering::Relaxed;

use crate::pages::Pages;
use crate::report;
use crate::section::{desc_of, offset_in_block};

use super::heap::{Heap, Owned};
use super::slab::{self, Slab};

/// Frees object `p` of slab `s` from the thread whose heap is `h`, which
/// may not own `s`. Returns true when `s` needs its owner's slow path
/// afterwards ([`Owned::free_local_slow`]: the slab became empty, or was
/// full); false when the free is complete.
///
/// # Safety
/// `s` is the `head` of the descriptor of `p`'s page (non-null), `h` is the
/// calling thread's heap (or the empty heap), `key` the process's free
/// key, and the caller is freeing `p` (it may be invalid: that is checked
/// and reported).
#[inline(always)]
pub unsafe fn free(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) -> bool {
    // SAFETY: s is a live slab head (its page descriptor said so); the
    // object check proves p starts an object of it before we write.
    unsafe {
        if slab::object_index(s, offset_in_block(p as usize, s.cast())).is_some()
            && (p as *const usize).add(1).read() != key
            && (*s).owner.load(Relaxed) == h as *mut u8
        {
            return slab::push_local(s, p, key);
        }
        free_other(p, s, h, key)
    }
}

/// Every free of a small object but the plain local one: invalid pointers,
/// suspected double frees, and frees from threads that do not own the slab.
#[inline(never)]
unsafe fn free_other(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) -> bool {
    // SAFETY: as in `free`; the checks are repeated here in full.
    unsafe {
        if slab::object_index(s, p as usize - Slab::base(s)).is_none() {
            report::fatal("free(): invalid pointer (not the start of a block)", p);
        }
        let mine = (*s).owner.load(Relaxed) == h as *mut u8;
        if (p as *const usize).add(1).read() == key {
            free_suspect(p, s, mine);
        }
        if mine {
            slab::push_local(s, p, key)
        } else {
            if slab::push_remote(s, p, key) {
                Heap::notify_owner(s);
            }
            false
        }
    }
}

/// The block carries the free key: it is free already, unless its owner's
/// lists say otherwise (the key can only be there by coincidence if the
/// program wrote it). Aborts on a double free.
#[cold]
#[inline(never)]
unsafe fn free_suspect(p: *mut u8, s: *mut Slab, mine: bool) {
    // Another thread's lists cannot be walked safely; the key is 64 random
    // bits, so a live block holds it only if the program copied it out of
    // a freed block.
    // SAFETY: we own s when `mine`, so its lists are ours to walk.
    if !mine || unsafe { slab::on_free_list(s, p) || slab::on_thread_free(s, p) } {
        report::fatal("free(): double free detected", p);
    }
}

/// Checks a small block for realloc or malloc_usable_size: aborts with
/// `invalid` unless `p` starts an object of `s`, and — for realloc, which
/// must not resize a freed block — with "pointer already freed" when it is
/// confirmed free. Returns its usable size.
///
/// # Safety
/// `s` is the slab head of `p`'s page; `h` the calling thread's heap.
pub unsafe fn checked_size(
    p: *mut u8,
    s: *mut Slab,
    h: *const Heap,
    key: usize,
    invalid: &'static str,
    freed: Option<&'static str>,
) -> usize {
    // SAFETY: as in `free`.
    unsafe {
        if slab::object_index(s, p as usize - Slab::base(s)).is_none() {
            report::fatal(invalid, p);
        }
        if let Some(msg) = freed {
            if (p as *const usize).add(1).read() == key {
                let mine = (*s).owner.load(Relaxed) == h as *mut u8;
                if !mine || slab::on_free_list(s, p) || slab::on_thread_free(s, p) {
                    report::fatal(msg, p);
                }
            }
        }
        slab::object_size(s)
    }
}

/// Frees small object `p` as the owner of `o` would from its thread,
/// slow path included (tests and the replay, which drive heaps as values).
///
/// # Safety
/// `p` is a live small object of the page allocator behind `pages`, and
/// `o`'s heap is the freeing thread's.
pub unsafe fn free_owned(o: &mut Owned<'_>, p: *mut u8, key: usize, pages: &Pages<'_>) {
    // SAFETY: forwarded contract: p's page is a slab page.
    unsafe {
        let s = (*desc_of(p as usize)).head.load(Relaxed).cast::<Slab>();
        if free(p, s, o.heap(), key) {
            if let Some(e) = o.free_local_slow(s) {
                o.park_or_retire(e, pages);
            }
        }
    }
}
