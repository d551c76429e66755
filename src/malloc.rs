//! The malloc family with C semantics, shared by the LD_PRELOAD library and
//! the Rust API: dispatch by size (small / large / huge) and by address,
//! POSIX error conventions, and the checks on bad input.
//!
//! Errors: out of memory (the limit, the OS, or an absurd size) gives NULL
//! with errno ENOMEM; `calloc`/`reallocarray` overflow likewise; a bad
//! alignment gives EINVAL with outputs untouched; `free(NULL)` does nothing
//! and `free` never changes errno; freeing a pointer that is not ours, that
//! points inside a block, or that is already free prints one line and
//! aborts (see `alert.rs`).

use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::{LARGE_MAX, PAGE_SIZE, SMALL_MAX};
use crate::heap::{self, Heap};
use crate::large::{self, Caller};
use crate::page::{LargeBlock, PageKind};
use crate::runtime::{self, tls};
use crate::section;
use crate::slab::{self, classes, Slab};

#[inline]
fn set_errno(e: i32) {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() = e };
}

/// Allocates an object of size class `class`.
#[inline(always)]
fn alloc_class(class: usize) -> *mut u8 {
    alloc_at(class << classes::BIN_SHIFT)
}

/// Allocates an object from the bin `offset` bytes in (a class's bin
/// offset): the fast path, else the slow path of its class.
#[inline(always)]
fn alloc_at(offset: usize) -> *mut u8 {
    // SAFETY: tls::heap is this thread's heap or the empty heap; the
    // offset is the bin of a valid class (the callers').
    let p = unsafe { Heap::alloc_fast_at(tls::heap(), offset) };
    if p.is_null() {
        runtime::alloc_small_slow(offset >> classes::BIN_SHIFT)
    } else {
        p
    }
}

/// The fast path alone for `size` ≤ SMALL_MAX: an object from the
/// thread's bin, or null (the caller takes a slow path).
#[inline(always)]
pub fn alloc_small_fast(size: usize) -> *mut u8 {
    // SAFETY: tls::heap is this thread's heap or the empty heap; the bin
    // offset of a size ≤ SMALL_MAX is a valid class's.
    unsafe { Heap::alloc_fast_at(tls::heap(), classes::bin_offset_of(size)) }
}

/// Allocates `size` bytes with the default alignment; null (errno ENOMEM)
/// on failure.
#[inline(always)]
pub fn alloc(size: usize) -> *mut u8 {
    if size <= SMALL_MAX {
        alloc_at(classes::bin_offset_of(size))
    } else {
        runtime::alloc_big(size, PAGE_SIZE, false)
    }
}

/// Allocates `size` bytes aligned to `align` (a power of two); zeroed if
/// `zero`. Null (errno ENOMEM) on failure.
pub fn alloc_aligned(align: usize, size: usize, zero: bool) -> *mut u8 {
    debug_assert!(align.is_power_of_two());
    let p = if align <= classes::QUANTUM && size <= SMALL_MAX {
        alloc(size)
    } else if size <= SMALL_MAX {
        match classes::class_for_aligned(size, align) {
            Some(c) => alloc_class(c),
            None => return runtime::alloc_big(size.max(SMALL_MAX + 1), align, zero),
        }
    } else {
        return runtime::alloc_big(size, align.max(PAGE_SIZE), zero);
    };
    if zero && !p.is_null() {
        // SAFETY: p holds at least size bytes.
        unsafe { core::ptr::write_bytes(p, 0, size) };
    }
    p
}

/// `malloc`: the slow paths set ENOMEM when they fail.
#[inline]
pub fn malloc(size: usize) -> *mut u8 {
    alloc(size)
}

/// `calloc`: overflow of `n * size` gives NULL with ENOMEM.
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let p = if total <= SMALL_MAX {
        let p = alloc(total);
        if !p.is_null() {
            // SAFETY: p holds at least total bytes.
            unsafe { core::ptr::write_bytes(p, 0, total) };
        }
        p
    } else {
        runtime::alloc_big(total, PAGE_SIZE, true)
    };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `free`. Never changes errno.
///
/// One lookup: the address is ours when it is in a section, and the
/// descriptor of the first page of its aligned group of a slab's size
/// says what it is — a slab's object (the object check passes on it), or
/// else, on the slow path, a page-granular block or a bad pointer.
///
/// # Safety
/// `p` is null or was returned by this allocator and not freed since (a
/// violation is detected and reported where possible).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    let a = p as usize;
    if let Some(v) = slab::slab::lookup(a) {
        // SAFETY: v is the descriptor of the first page of p's aligned
        // group of a slab's size in our section, readable; the fast path
        // leaves anything but a slab's object to the slow path, which
        // tells a page-granular block from a bad pointer.
        unsafe {
            let left = heap::free(p, v, tls::heap(), runtime::free_key());
            runtime::finish_free(p, v, left)
        };
    } else if !p.is_null() {
        // SAFETY: p is non-null; a huge block or not ours (reported).
        unsafe { runtime::free_foreign(p, Caller::Free) };
    }
}

/// Rust's `dealloc` of a block of `size` bytes: small blocks skip the
/// object-start check when the size agrees with their slab (see
/// `slab::free_sized`), which is sound only because Rust's `GlobalAlloc`
/// contract vouches for the pointer. C's `free_sized` and C++'s sized
/// delete trust nothing and take [`free`]'s checks.
///
/// # Safety
/// `p` was returned by this allocator for `size` bytes (or reallocated to
/// it) and is not freed since — as `GlobalAlloc::dealloc` requires.
#[inline(always)]
pub unsafe fn dealloc_sized(p: *mut u8, size: usize) {
    let a = p as usize;
    if size <= SMALL_MAX {
        let Some(v) = slab::slab::lookup(a) else {
            // SAFETY: forwarded contract.
            return unsafe { free(p) };
        };
        // SAFETY: descriptors of our sections are always readable; only a
        // live slab's head has objects carved (`Page::object_bound`).
        if unsafe { (*v).reserved } != 0 {
            let offset = classes::bin_offset_of(size);
            // SAFETY: v is the live slab holding p.
            unsafe {
                let left = heap::free_sized(p, v, tls::heap(), runtime::free_key(), offset);
                runtime::finish_free(p, v, left);
            }
            return;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free(p) }
}

/// What a live pointer turned out to be.
enum Block {
    /// An object of slab `.1`, with its usable size.
    Small(usize, *mut Slab),
    /// A large or huge block.
    Page(*mut LargeBlock),
}

/// Finds live block `p` for `who`: one lookup, as in [`free`]. Reports and
/// aborts if `p` is not a live block of ours; for realloc, a small block
/// already freed is reported as free() would.
///
/// # Safety
/// `p` is non-null.
unsafe fn lookup(p: *mut u8, who: Caller) -> Block {
    let Some(d) = section::lookup(p as usize) else {
        // SAFETY: p is non-null (contract).
        return Block::Page(unsafe { large::checked_huge(p, who) });
    };
    // SAFETY: descriptors of our sections are always readable.
    unsafe {
        let s = (*d).head.load(Relaxed).cast::<Slab>();
        if !s.is_null() {
            let freed = (who == Caller::Realloc).then_some(who.freed());
            let key = runtime::free_key();
            return Block::Small(heap::checked_size(p, s, key, who.invalid(), freed), s);
        }
        Block::Page(large::checked_block(p, d, who))
    }
}

/// The usable size of block `p` (0 for null).
///
/// # Safety
/// As [`free`].
pub unsafe fn usable_size(p: *mut u8) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: forwarded contract.
    match unsafe { lookup(p, Caller::UsableSize) } {
        Block::Small(n, _) => n,
        // SAFETY: lookup returned a live block.
        Block::Page(b) => unsafe { large::usable_size(b) },
    }
}

/// `realloc` without the size-0 rule: keeps the block when the new size
/// fits it and does not waste more than half; otherwise moves (huge blocks
/// resize in place or move their pages without copying). Null (old block
/// untouched) on failure, errno untouched.
///
/// # Safety
/// `p` is null or a live block of ours.
pub unsafe fn realloc_raw(p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() {
        return alloc(size);
    }
    // SAFETY: p is non-null (checked above).
    let (usable, huge, small) = match unsafe { lookup(p, Caller::Realloc) } {
        Block::Small(n, s) => (n, None, s),
        // SAFETY: lookup returned a live block.
        Block::Page(b) => unsafe {
            let huge = ((*b).kind() == PageKind::Huge).then_some(b);
            (large::usable_size(b), huge, core::ptr::null_mut())
        },
    };
    let fits = size <= usable && (size >= usable / 2 || usable <= 2 * classes::MIN_CLASS_SIZE);
    if fits && (huge.is_none() || size > LARGE_MAX) {
        return p;
    }
    if let Some(b) = huge {
        // Under valgrind a block that moves is a new block (memcheck is
        // told of the allocation and the free below).
        if size > LARGE_MAX && !runtime::valgrind::on() {
            // SAFETY: b is a live huge block of the caller's.
            let q = unsafe { runtime::realloc_huge(b, size) };
            if !q.is_null() {
                return q;
            }
        }
    }
    let q = alloc(size);
    if q.is_null() {
        return q;
    }
    // SAFETY: both blocks are live and distinct; copy what both hold.
    unsafe {
        core::ptr::copy_nonoverlapping(p, q, usable.min(size));
        // A slab holding a sampled object takes every free through the
        // slow path, which ends the sample (`slab/marks.rs`).
        if small.is_null() || (*small).reserved == 0 {
            free(p);
        } else {
            // lookup checked p: a live object of slab `small`.
            let left = heap::free_checked(p, small, tls::heap(), runtime::free_key());
            runtime::finish_free(p, small, left);
        }
    }
    q
}

/// `realloc`: size 0 frees and returns NULL (as glibc); failure leaves the
/// block untouched and sets ENOMEM.
///
/// # Safety
/// As [`realloc_raw`].
pub unsafe fn realloc(p: *mut u8, size: usize) -> *mut u8 {
    if size == 0 && !p.is_null() {
        // SAFETY: forwarded.
        unsafe { free(p) };
        return core::ptr::null_mut();
    }
    // SAFETY: forwarded.
    let q = unsafe { realloc_raw(p, size) };
    if q.is_null() {
        set_errno(libc::ENOMEM);
    }
    q
}

/// `reallocarray`: overflow gives NULL with ENOMEM and the block untouched.
///
/// # Safety
/// As [`realloc_raw`].
pub unsafe fn reallocarray(p: *mut u8, n: usize, size: usize) -> *mut u8 {
    match n.checked_mul(size) {
        // SAFETY: forwarded.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `posix_memalign`: EINVAL unless `align` is a power of two multiple of
/// the pointer size; ENOMEM on failure; `*out` is written only on success.
///
/// # Safety
/// `out` is valid for a write.
pub unsafe fn posix_memalign(out: *mut *mut u8, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || align < core::mem::size_of::<usize>() {
        return libc::EINVAL;
    }
    let p = alloc_aligned(align, size, false);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: out is valid (contract).
    unsafe { out.write(p) };
    0
}

/// `aligned_alloc`: EINVAL unless `align` is a power of two.
pub fn aligned_alloc(align: usize, size: usize) -> *mut u8 {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let p = alloc_aligned(align, size, false);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `memalign`: like glibc, a non-power-of-two alignment is rounded up; an
/// alignment past half the address space is EINVAL.
pub fn memalign(align: usize, size: usize) -> *mut u8 {
    if align > usize::MAX / 2 + 1 {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    let align = align.max(1).next_power_of_two();
    let p = alloc_aligned(align, size, false);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `valloc`: page-aligned.
pub fn valloc(size: usize) -> *mut u8 {
    memalign(PAGE_SIZE, size)
}

/// `pvalloc`: page-aligned, size rounded up to whole pages.
pub fn pvalloc(size: usize) -> *mut u8 {
    match size.max(1).checked_next_multiple_of(PAGE_SIZE) {
        Some(s) => memalign(PAGE_SIZE, s),
        None => {
            set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}
