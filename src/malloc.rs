//! The malloc family with C semantics, shared by the LD_PRELOAD library and
//! the Rust API: dispatch by size (small / large / huge) and by address,
//! POSIX error conventions, and the checks on bad input.
//!
//! Errors: out of memory (the limit, the OS, or an absurd size) gives NULL
//! with errno ENOMEM; `calloc`/`reallocarray` overflow likewise; a bad
//! alignment gives EINVAL with outputs untouched; `free(NULL)` does nothing
//! and `free` never changes errno; freeing a pointer that is not ours, that
//! points inside a block, or that is already free prints one line and
//! aborts (see `report.rs`).

use core::sync::atomic::Ordering::Relaxed;

use crate::config::{LARGE_MAX, PAGE_SIZE, SMALL_MAX};
use crate::large;
use crate::pcp::Pageset;
use crate::report;
use crate::section::{self, desc_of};
use crate::slab::{self, classes, heap};
use crate::state;

#[inline]
fn set_errno(e: i32) {
    // SAFETY: errno's location is valid for the calling thread.
    unsafe { *libc::__errno_location() = e };
}

/// Allocates `size` bytes with the default alignment; null on failure,
/// errno untouched.
#[inline(always)]
pub fn alloc(size: usize) -> *mut u8 {
    if size <= SMALL_MAX {
        slab::alloc(size)
    } else {
        alloc_big(size, PAGE_SIZE, false)
    }
}

/// Large or huge allocation.
#[cold]
#[inline(never)]
fn alloc_big(size: usize, align: usize, zero: bool) -> *mut u8 {
    if size <= LARGE_MAX && align <= LARGE_MAX {
        let h = heap::current_or_init();
        if h.is_null() {
            return core::ptr::null_mut();
        }
        // SAFETY: h is this thread's heap.
        let cached = unsafe { take_cached_block(h, size, align, zero) };
        if !cached.is_null() {
            return cached;
        }
        crate::maint::on_slow_path();
        // SAFETY: as above.
        let pcp = unsafe { (*h).pageset };
        let p = large::alloc_large(size, align, zero, pcp);
        if p.is_null() && heap::release_parked_everywhere() > 0 {
            // At the memory limit: the slabs other threads parked first.
            return large::alloc_large(size, align, zero, pcp);
        }
        p
    } else {
        if !state::ensure_init() {
            return core::ptr::null_mut();
        }
        large::alloc_huge(size, align)
    }
}

/// Allocates `size` bytes aligned to `align` (a power of two); zeroed if
/// `zero`. Null on failure, errno untouched.
pub fn alloc_aligned(align: usize, size: usize, zero: bool) -> *mut u8 {
    debug_assert!(align.is_power_of_two());
    let p = if align <= 8 && size <= SMALL_MAX {
        slab::alloc(size)
    } else if size <= SMALL_MAX {
        match classes::class_for_aligned(size, align) {
            Some(c) => slab::alloc_class(c),
            None => return alloc_big(size.max(SMALL_MAX + 1), align, zero),
        }
    } else {
        return alloc_big(size, align.max(PAGE_SIZE), zero);
    };
    if zero && !p.is_null() && size <= SMALL_MAX {
        // SAFETY: p holds at least size bytes.
        unsafe { core::ptr::write_bytes(p, 0, size) };
    }
    p
}

/// `malloc`.
#[inline]
pub fn malloc(size: usize) -> *mut u8 {
    let p = alloc(size);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `calloc`: overflow of `n * size` gives NULL with ENOMEM.
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let p = if total <= SMALL_MAX {
        let p = slab::alloc(total);
        if !p.is_null() {
            // SAFETY: p holds at least total bytes.
            unsafe { core::ptr::write_bytes(p, 0, total) };
        }
        p
    } else {
        alloc_big(total, PAGE_SIZE, true)
    };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

/// `free`. Never changes errno.
///
/// # Safety
/// `p` is null or was returned by this allocator and not freed since (a
/// violation is detected and reported where possible).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    let a = p as usize;
    if section::is_ours(a) {
        let d = desc_of(a);
        // SAFETY: descriptors of our sections are always readable.
        let s = unsafe { (*d).head.load(Relaxed) };
        if !s.is_null() {
            // SAFETY: s is the slab of p's page.
            unsafe { slab::free(p, s) };
            return;
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free_cold(p) };
}

/// Null, page-granular, huge and foreign pointers.
#[cold]
#[inline(never)]
unsafe fn free_cold(p: *mut u8) {
    let a = p as usize;
    if section::is_ours(a) {
        // SAFETY: p is in our section and not in a slab; free_large checks
        // the rest.
        unsafe { free_large_path(p, desc_of(a)) };
    } else if !p.is_null() {
        free_foreign(p);
    }
}

unsafe fn free_large_path(p: *mut u8, d: *mut crate::page::Page) {
    // Nothing on this path sets errno (the lock's futex calls restore it).
    if let Some(h) = slab::current_heap() {
        // SAFETY: h is this thread's heap; d is p's descriptor.
        if unsafe { cache_block(h, p, d) } {
            return;
        }
    }
    let pcp = heap_pageset();
    // SAFETY: forwarded.
    unsafe { large::free_large(p, d, pcp) };
}

/// Parks a large block of order ≤ 3 being freed in the heap's one-block
/// cache for its order, if that slot is free. Returns whether it did.
///
/// # Safety
/// `h` is this thread's heap, `d` the descriptor of `p`'s page.
#[inline]
unsafe fn cache_block(h: *mut slab::heap::Heap, p: *mut u8, d: *mut crate::page::Page) -> bool {
    use crate::page::{flags, PageKind};
    // SAFETY: descriptors of our sections are readable; h is ours.
    unsafe {
        if (*d).kind() != PageKind::Large || p as usize != section::page_addr(d) {
            return false; // let free_large report it
        }
        let order = usize::from((*d).order);
        if order >= (*h).block_cache.len()
            || (*d).flags & flags::TRIMMED != 0
            || !(*h).block_cache[order].is_null()
        {
            return false;
        }
        (*d).set_kind(PageKind::Cached);
        (*h).block_cache[order] = d;
        true
    }
}

/// Takes the heap's cached block if it fits this request.
///
/// # Safety
/// `h` is this thread's heap.
#[inline]
unsafe fn take_cached_block(
    h: *mut slab::heap::Heap,
    size: usize,
    align: usize,
    zero: bool,
) -> *mut u8 {
    use crate::page::PageKind;
    let pages = size.div_ceil(PAGE_SIZE).max(1);
    let order = crate::util::order_for_pages(pages) as usize;
    // SAFETY: h is ours; cached blocks are ours (kind Cached).
    unsafe {
        if order >= (*h).block_cache.len() || align > PAGE_SIZE << order {
            return core::ptr::null_mut();
        }
        let d = (*h).block_cache[order];
        if d.is_null() {
            return d.cast();
        }
        (*h).block_cache[order] = core::ptr::null_mut();
        (*d).flags = 0;
        (*d).aux = 1 << order;
        (*d).set_kind(PageKind::Large);
        let p = section::page_addr(d) as *mut u8;
        if zero {
            core::ptr::write_bytes(p, 0, size);
        }
        p
    }
}

/// The thread's pageset if it has a heap (never initialises one).
#[inline]
fn heap_pageset() -> *mut Pageset {
    match slab::current_heap() {
        // SAFETY: h is this thread's heap.
        Some(h) => unsafe { (*h).pageset },
        None => core::ptr::null_mut(),
    }
}

#[cold]
#[inline(never)]
fn free_foreign(p: *mut u8) {
    // SAFETY: errno location is valid.
    let saved = unsafe { *libc::__errno_location() };
    if !large::free_huge(p) {
        report::fatal("free(): invalid pointer", p);
    }
    set_errno(saved);
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
    unsafe { checked_usable(p, Caller::UsableSize).0 }
}

/// Checks `p` for realloc and returns its usable size and whether it is a
/// huge block.
///
/// # Safety
/// `p` is non-null.
unsafe fn realloc_usable(p: *mut u8) -> (usize, bool) {
    // SAFETY: forwarded contract.
    unsafe { checked_usable(p, Caller::Realloc) }
}

/// Who asks `checked_usable`, for its reports.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Caller {
    Realloc,
    UsableSize,
}

/// Validates live block `p` and returns its usable size and whether it is
/// huge; reports and aborts if `p` is not a live block of ours. For
/// realloc, a small block carrying the free key is checked like free()
/// checks it.
///
/// # Safety
/// `p` is non-null.
unsafe fn checked_usable(p: *mut u8, who: Caller) -> (usize, bool) {
    let (name, invalid) = match who {
        Caller::Realloc => ("realloc", "realloc(): invalid pointer"),
        Caller::UsableSize => (
            "malloc_usable_size",
            "malloc_usable_size(): invalid pointer",
        ),
    };
    let a = p as usize;
    if section::is_ours(a) {
        let d = desc_of(a);
        // SAFETY: descriptors of our sections are always readable.
        unsafe {
            let s = (*d).head.load(Relaxed);
            if !s.is_null() {
                if slab::slab::object_index(s, a - section::page_addr(s)).is_none() {
                    report::fatal(invalid, p);
                }
                if who == Caller::Realloc && (p as *const usize).add(1).read() == state::free_key()
                {
                    // A free block: confirm where we can, as free() does.
                    let mine = (*s).owner.load(Relaxed) == crate::slab::tls::heap().cast();
                    if !mine || slab::slab::on_free_list(s, p) {
                        report::fatal("realloc(): pointer already freed", p);
                    }
                }
                return (slab::usable_size(s), false);
            }
            large::check_large(p, d, name);
            return (large::large_pages(d) * PAGE_SIZE, false);
        }
    }
    match large::huge_len(p) {
        Some(len) => (len, true),
        None => report::fatal(invalid, p),
    }
}

/// `realloc` without the size-0 rule: keeps the block when the new size
/// fits it and does not waste more than half; otherwise moves. Null (old
/// block untouched) on failure, errno untouched.
///
/// # Safety
/// `p` is null or a live block of ours.
pub unsafe fn realloc_raw(p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() {
        return alloc(size);
    }
    // SAFETY: p is non-null (checked above).
    let (usable, huge) = unsafe { realloc_usable(p) };
    let fits = size <= usable && (size >= usable / 2 || usable <= 2 * classes::MIN_CLASS_SIZE);
    if fits && (!huge || size > LARGE_MAX) {
        return p;
    }
    if huge && size > LARGE_MAX {
        // SAFETY: p is a live huge block.
        let q = unsafe { large::realloc_huge(p, size) };
        if !q.is_null() {
            return q;
        }
    }
    let q = alloc(size);
    if q.is_null() {
        return q;
    }
    // SAFETY: both blocks are live and distinct; copy what both hold.
    unsafe {
        core::ptr::copy_nonoverlapping(p, q, usable.min(size));
        free(p);
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

/// Gives back everything cached: the calling thread's empty slabs, the
/// abandoned heaps' empty slabs, every pageset, and all free memory to the
/// OS. Returns the bytes released to the OS.
pub fn trim() -> usize {
    if !state::is_ready() {
        return 0;
    }
    if let Some(h) = slab::current_heap() {
        // SAFETY: h is this thread's heap.
        unsafe { heap::collect(h) };
    }
    heap::collect_abandoned();
    crate::pcp::pool::drain_all(&state::ZONE);
    state::ZONE.release_idle(0, 0)
}
