//! The free path of small objects: a push on the freeing thread's bin,
//! behind the checks that catch invalid pointers and double frees.
//!
//! The fast path (`free`) checks that the pointer starts an object of its
//! slab (one multiply) and does not carry the free key; the owner's object
//! then goes on the bin of its class, or — the bin full — straight back on
//! its slab's own list; another heap's object goes back to its slab's
//! remote list in a batch (`remote.rs`). Everything else is the slow path
//! (`free_slow`): a report and abort for a bad pointer or a double free.

use core::sync::atomic::Ordering::{Acquire, Relaxed};

use crate::alert;
use crate::page_alloc::Pages;
use crate::section::desc_of;

use super::heap::{Heap, Owned};
use crate::slab::marks;
use crate::slab::object::FreeObject;
use crate::slab::slab::{self, Slab};

/// What the free fast path leaves to do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Freed {
    /// Nothing: the object is on a bin, on its slab, or on its way back to
    /// another heap's slab.
    Done,
    /// The object went back onto its slab (its owner's bin was full), and
    /// the slab became empty or was full: the owner's
    /// [`Owned::slab_given_back`] must move it.
    SlabChanged,
    /// A valid object, without the free key, of another heap's slab:
    /// [`free_remote`] sends it back (no check left to repeat).
    Remote,
    /// The slow path must run: a pointer that is not a slab's object (a
    /// page-granular block, or a bad pointer), or a block holding the free
    /// key.
    Slow,
}

/// Frees `p` from the thread whose heap is `h`, given `v`,
/// [`slab::lookup`]'s answer for `p` (its slab, if `p` lies in one; some
/// descriptor otherwise): onto its bin when `h` owns the slab, or — the
/// bin full — straight back onto the slab's own list.
///
/// The object check reads `v` as a slab: only a live slab's head has a
/// non-zero `reserved`, so for any other block the check fails and the
/// caller's slow path sorts it out (a page-granular block, or a report).
/// The fast path needs no test of the kind for that.
///
/// # Safety
/// `v` is [`slab::lookup`]'s answer for `p` (in one of our sections), `h`
/// the calling thread's heap (or the empty heap), `key` the process's free
/// key, and the caller is freeing `p` (it may be invalid: the slow path
/// checks and reports).
#[inline(always)]
pub unsafe fn free(p: *mut u8, v: *mut Slab, h: *const Heap, key: usize) -> Freed {
    // SAFETY: v is readable (contract) and a live slab if the object check
    // passes (only those have carved objects); the check proves p starts
    // an object of it before we read p or write.
    unsafe {
        if slab::object_at(v, p).is_some() && !FreeObject::at(p).holds(key) {
            return free_checked(p, v, h, key);
        }
        Freed::Slow
    }
}

/// Frees object `p` of slab `v`, which the caller has checked already (it starts an object of the slab and does not hold
/// the free key: [`free`], [`free_sized`], realloc's lookup): only the
/// owner compare and the bin remain; another heap's object is left to
/// [`free_remote`].
///
/// A full bin does not send the object to the slow path: the owner puts
/// it straight on the slab's own list here (four stores), and only a slab
/// that became empty or was full needs more ([`Freed::SlabChanged`]).
///
/// # Safety
/// As [`free`], and `p` is a live object of slab `v` (checked).
#[inline(always)]
pub unsafe fn free_checked(p: *mut u8, v: *mut Slab, h: *const Heap, key: usize) -> Freed {
    // SAFETY: as in `free`; the caller vouches for the object checks. The
    // bin is the calling thread's own, and a full one (every bin of the
    // empty heap, which owns no slab) is not pushed on; the slab's own list
    // is written only by its owner, which `h` is. Owner, bin offset and
    // class are read from the slab's descriptor `v`, whose line the object
    // check loaded.
    unsafe {
        if Slab::fixed_owner(v) != h as *mut u8 {
            return Freed::Remote;
        }
        let bins = Heap::bins(h);
        let offset = usize::from((*v).bin_offset);
        if (*bins).has_room_at(offset) {
            (*bins).push_at(offset, p, key);
            return Freed::Done;
        }
        let class = (*v).class as usize;
        if Heap::give_back_to_slab(&*h, p, v, class, key) {
            return Freed::SlabChanged;
        }
        Freed::Done
    }
}

/// Frees object `p` of slab `v` whose size the caller knows (Rust's
/// `dealloc`; C's `free_sized` and C++'s sized delete trust nothing and
/// take [`free`]): `offset` is that size's bin offset
/// (`classes::bin_offset_of`, which grows with the class). A slab of that
/// class or larger holds a block at least that big, so the object-start
/// check is skipped; anything else takes [`free`]'s full checks.
///
/// # Safety
/// As [`free`], and `v` is a live slab (its `reserved` non-zero: a
/// page-granular block's class field would pass the size test).
#[inline(always)]
pub unsafe fn free_sized(
    p: *mut u8,
    v: *mut Slab,
    h: *const Heap,
    key: usize,
    offset: usize,
) -> Freed {
    // SAFETY: as in `free`; the caller vouches that p starts a block of at
    // least the size of `offset`'s class, which the slab's class confirms
    // holds.
    unsafe {
        if offset <= usize::from((*v).bin_offset) && !FreeObject::at(p).holds(key) {
            return free_checked(p, v, h, key);
        }
        free(p, v, h, key)
    }
}

/// The free slow path (see [`free`]), from the thread whose heap is `h`:
/// reports and aborts on an invalid pointer or a double free; else `p`
/// belongs to a slab of another heap and goes back to that slab's remote
/// list, in a batch (`remote.rs`; keeping it here to reuse would hand this
/// thread memory next to the owner's live objects: false sharing, which
/// cache-scratch measures). Returns what is left to do (a block of `h`'s
/// own that turned out valid goes as [`free_checked`] says).
///
/// A block carrying the free key is almost surely free — the key is 64
/// random bits written into every freed block and cleared when it is
/// handed out — but a live block can hold it too, if the program copied
/// it in with uninitialised bytes (a struct's padding copied from the
/// stack, where a register holding the key was once saved). So, as glibc
/// confirms its tcache key, the owner confirms by looking for the block on
/// the lists a free block of its slab can be on: its bin, the slab's own
/// list, the slab's remote list. Another thread's block cannot be looked
/// up (those lists are its owner's); there the key is trusted.
///
/// # Safety
/// As [`free`].
#[inline]
pub(crate) unsafe fn free_slow(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) -> Freed {
    // SAFETY: forwarded contract.
    unsafe {
        if try_free_remote(p, s, h, key) {
            return Freed::Done;
        }
        free_keyed_or_own(p, s, h, key)
    }
}

/// The common case of [`free_slow`], kept lean: aborts on a pointer that
/// does not start a block; else frees `p` and returns true when it is
/// another heap's block without the key. False leaves the rest to
/// [`free_keyed_or_own`].
///
/// # Safety
/// As [`free`].
#[inline(always)]
pub unsafe fn try_free_remote(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) -> bool {
    // SAFETY: as in `free`; the checks are repeated here in full.
    unsafe {
        // A slab holding a sampled object fails the plain check for every
        // object (`slab/marks.rs`); one marked since the caller looked
        // is asked again with the count it keeps.
        if slab::object_at(s, p).is_none() && marks::object_at_settled(s, p).is_none() {
            alert::fatal("free(): invalid pointer (not the start of a block)", p);
        }
        if !FreeObject::at(p).holds(key) && (*s).owner.load(Relaxed) != h as *mut u8 {
            free_remote(p, s, h, key);
            return true;
        }
        false
    }
}

/// `p`, a valid block of another heap's slab `s`, goes back to the slab's
/// remote list (in a batch, `remote.rs`) marked with `key`; the freeing
/// heap `h` counts its bytes.
///
/// # Safety
/// As [`free`]; `p` is a valid object of `s`, which is not `h`'s.
#[inline(always)]
pub unsafe fn free_remote(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) {
    // SAFETY: p is a block of s nobody uses (contract).
    unsafe {
        Heap::note_remote_freed(h, usize::from((*s).class));
        FreeObject::at(p).mark(key);
        Heap::free_remote(h, p, s);
    }
}

/// The rare rest of [`free_slow`]: `p` holds the key, or is the calling
/// heap `h`'s own (a fast path that could not take it).
///
/// # Safety
/// As [`free`]; `p` is a valid block of `s`.
#[cold]
#[inline(never)]
pub unsafe fn free_keyed_or_own(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) -> Freed {
    // SAFETY: as in `free`. The lists walked are h's own (owner == h).
    unsafe {
        let mine = (*s).owner.load(Relaxed) == h as *mut u8;
        if FreeObject::at(p).holds(key) {
            // Every allocation clears the key, so a block that holds it was
            // freed: on the owner's lists, on the slab's remote list, or
            // still waiting on another thread's batch of remote frees,
            // which the owner cannot walk (`remote.rs`). Only a program
            // that wrote the process's random 64-bit key into a live block
            // itself — after reading it from freed memory — gets here
            // otherwise. The owner's walk is kept for the message's sake:
            // it is the common double free, and proves the rest.
            if !mine || is_free_in(h, s, p) {
                alert::fatal("free(): double free detected", p);
            }
            alert::fatal("free(): double free detected (pending remote free)", p);
        }
        if mine {
            return free_checked(p, s, h, key);
        }
        free_remote(p, s, h, key);
        Freed::Done
    }
}

/// Whether `p` is on one of the lists of free objects of slab `s`, whose
/// owner is `h` (the calling thread's heap). Under the heap's lists: a
/// slab whose every object is free may otherwise be given back by another
/// thread while it is walked (`emptied.rs`) — then `p` was free anyway.
///
/// # Safety
/// `h` is the calling thread's heap, and owned `s` when the caller looked;
/// `p` is an object of `s`.
unsafe fn is_free_in(h: *const Heap, s: *mut Slab, p: *mut u8) -> bool {
    // SAFETY: the owner's own lists (contract), under its guard; remote
    // frees only push at the head of the remote list, so walking it from
    // its head is safe.
    unsafe {
        let _lists = (*h).lock_lists();
        if (*s).kind.load(Acquire) != crate::page::PageKind::Slab as u8
            || (*s).owner.load(Relaxed) != h as *mut u8
        {
            return true;
        }
        if (*Heap::bins(h)).contains((*s).class as usize, p) {
            return true;
        }
        let cap = usize::from(Slab::capacity(s));
        let mut q = (*s).free;
        let mut n = 0;
        while !q.is_null() && n <= cap {
            if q == p {
                return true;
            }
            q = FreeObject::at(q).next();
            n += 1;
        }
        let mut q = slab::tf_list((*s).thread_free.load(Acquire));
        n = 0;
        while !q.is_null() && n <= cap {
            if q == p {
                return true;
            }
            q = FreeObject::at(q).next();
            n += 1;
        }
        false
    }
}

/// Checks a small block for realloc or malloc_usable_size: aborts with
/// `invalid` unless `p` starts an object of `s`, and with `freed` (for
/// realloc, which must not resize a freed block) when it carries the free
/// key. Returns its usable size.
///
/// # Safety
/// `s` is the slab head of `p`'s page.
pub unsafe fn checked_size(
    p: *mut u8,
    s: *mut Slab,
    key: usize,
    invalid: &'static str,
    freed: Option<&'static str>,
) -> usize {
    // SAFETY: as in `free`.
    unsafe {
        // A slab holding a sampled object fails the plain check for every
        // object (`slab/marks.rs`).
        if slab::object_at(s, p).is_none() && marks::object_at_settled(s, p).is_none() {
            alert::fatal(invalid, p);
        }
        if let Some(msg) = freed {
            if FreeObject::at(p).holds(key) {
                alert::fatal(msg, p);
            }
        }
        slab::object_size(s)
    }
}

/// Finishes the free of object `p` of slab `s` by the thread whose heap
/// is `h`, once a fast path ([`free`], [`free_checked`],
/// [`free_keyed_or_own`]) returned `left`: the slow path's checks (a
/// report and abort for a bad pointer or a double free), the send back to
/// another heap's slab. Returns whether `h`'s owner must move the slab
/// ([`Freed::SlabChanged`]; the caller does, with the handle it has). The
/// slab layer's one dispatch of the outcomes; the runtime's `finish_free`
/// is the malloc API's, which adds page-granular blocks and threads
/// without a heap and keeps each outcome a tail call.
///
/// # Safety
/// As [`free`]; `s` is the slab head of `p`'s page, and `left` what a fast
/// path of this free returned.
pub unsafe fn finish(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize, left: Freed) -> bool {
    // SAFETY: forwarded contract.
    unsafe {
        let left = if left == Freed::Slow {
            free_slow(p, s, h, key)
        } else {
            left
        };
        match left {
            Freed::Remote => free_remote(p, s, h, key),
            Freed::SlabChanged => return true,
            Freed::Done | Freed::Slow => {}
        }
        false
    }
}

/// Frees object `p` of slab `s` from the thread whose heap is `h` by
/// every path a free may take ([`free`], then [`finish`]); true when `h`'s
/// owner must move the slab. For the frees that do not come through
/// `malloc::free`: a traced free, and the tests' and the replay's.
///
/// # Safety
/// As [`free`]; `s` is the slab head of `p`'s page.
pub unsafe fn free_by_every_path(p: *mut u8, s: *mut Slab, h: *const Heap, key: usize) -> bool {
    // SAFETY: forwarded contract.
    unsafe { finish(p, s, h, key, free(p, s, h, key)) }
}

/// Frees small object `p` as the owner of `o` would from its thread,
/// slow path included (tests and the replay, which drive heaps as values).
///
/// # Safety
/// `p` is a live small object of the page allocator behind `pages`, and
/// `o`'s heap is the freeing thread's.
// Called by the tests, through `internals`.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub unsafe fn free_owned(o: &mut Owned<'_>, p: *mut u8, key: usize, pages: &Pages<'_>) {
    // SAFETY: forwarded contract: p's page is a slab page.
    unsafe {
        let s = (*desc_of(p as usize)).head.load(Relaxed).cast::<Slab>();
        if free_by_every_path(p, s, o.heap(), key) {
            o.slab_given_back(s, pages);
        }
    }
}
