//! Running under valgrind's memcheck: it is told about every block, so
//! it sees their bounds, their leaks and their use after free in our heap
//! as it would in its own.
//!
//! Whether the process runs under memcheck is asked once (the first slow
//! path, or init) and kept; other tools (callgrind, which counts the fast
//! paths' instructions) see the allocator as it runs natively. Under
//! memcheck every allocation and every free takes a slow path, as while
//! tracing (`record.rs`): the thread's TLS heap pointer stays the empty
//! heap, so the fast paths miss and gain no test. There a block is
//! announced with its usable size once it is taken ([`allocation`]; the
//! Rust allocator then narrows it to the layout's size) and withdrawn
//! before it is given back ([`freeing`]). A freed block is not addressable
//! for memcheck, but our lists live in freed blocks: the slow paths' own
//! work runs with the thread's error reporting stopped, and so does the
//! allocator's work outside malloc and free ([`own_work`]). Objects carved
//! but never handed out are not addressable either (`slab::extend`).
//!
//! Word 1 of a small block (bytes 8 to 16) is always defined: the
//! allocator clears it when it hands the block out (it holds the free key
//! while the block is free), and free's fast path compares it.

use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::SMALL_MAX;
use crate::large::{self, Caller};
use crate::slab::{self, Slab};
use crate::sys::valgrind as vg;

/// Whether the process runs under memcheck (asked once): every block is
/// then announced.
#[inline]
pub(crate) fn on() -> bool {
    vg::memcheck()
}

/// Runs `f` (an allocator's slow path) with error reporting stopped.
#[inline]
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    vg::quiet(true);
    let r = f();
    vg::quiet(false);
    r
}

/// Runs `f` (the allocator's own work outside malloc and free: a thread's
/// exit, a flush, a trim, a tick) quietly under valgrind.
#[inline]
pub(crate) fn own_work<T>(f: impl FnOnce() -> T) -> T {
    if on() {
        quietly(f)
    } else {
        f()
    }
}

/// Runs allocation `f` quietly and announces the block it returns (zeroed
/// if `zeroed`) with its usable size.
pub(crate) fn allocation(zeroed: bool, f: impl FnOnce() -> *mut u8) -> *mut u8 {
    let p = quietly(f);
    if !p.is_null() {
        allocated(p, zeroed);
    }
    p
}

/// Announces block `p`, just taken, with its usable size.
fn allocated(p: *mut u8, zeroed: bool) {
    // SAFETY: p is a live block of ours, just allocated.
    let usable = quietly(|| unsafe { usable_size(p) });
    vg::malloclike_block(p, usable, zeroed);
    if usable <= SMALL_MAX {
        // SAFETY: every small class holds two words; word 1 was cleared.
        vg::make_mem_defined(unsafe { p.add(8) }, 8);
    }
}

/// The usable size of live block `p` (as `malloc_usable_size`, without
/// its checks: the block is one the allocator just handed out).
///
/// # Safety
/// `p` is a live block of ours.
unsafe fn usable_size(p: *mut u8) -> usize {
    // SAFETY: descriptors of our sections are readable; p is live.
    unsafe {
        let Some(d) = crate::section::lookup(p as usize) else {
            return large::usable_size(large::checked_huge(p, Caller::UsableSize));
        };
        let s = (*d).head.load(Relaxed).cast::<Slab>();
        if s.is_null() {
            large::usable_size(large::checked_block(p, d, Caller::UsableSize))
        } else {
            slab::slab::object_size(s)
        }
    }
}

/// Narrows block `p`, announced with its usable size, to the `size` bytes
/// the Rust allocator was asked for (a small block keeps its two words).
pub(crate) fn narrow(p: *mut u8, size: usize) {
    // SAFETY: p is a live block of ours.
    let usable = quietly(|| unsafe { usable_size(p) });
    let keep = if usable <= SMALL_MAX { 16 } else { 1 };
    let size = size.max(keep).min(usable);
    if size != usable {
        vg::resize_in_place_block(p, usable, size);
    }
}

/// Block `p` is about to be freed: withdrawn from memcheck (which reports
/// a pointer that is not a live block's start) and made quiet for the
/// free itself, which [`freed`] ends.
pub(crate) fn freeing(p: *mut u8) {
    vg::freelike_block(p);
    vg::quiet(true);
}

/// The free that [`freeing`] began is done.
pub(crate) fn freed() {
    vg::quiet(false);
}
