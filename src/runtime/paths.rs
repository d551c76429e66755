//! The allocator's slow paths, which need the runtime: a thread's heap
//! made on demand, the tick when it is due, retries at the memory limit,
//! and the page-granular blocks.

use crate::geometry::{LARGE_MAX, NR_PCP_ORDERS};
use crate::large::{self, Caller};
use crate::page::{LargeBlock, Page, PageKind};
use crate::slab::{self, Slab};

use super::process::{self, HEAPS, HUGE, PAGES};
use super::thread::{pages_of, thread_heap};
use super::{tick, tls};

/// The small-object allocation slow path for `class`: the thread's heap is
/// set up if needed, the tick runs if due, and the heap refills; at the
/// memory limit every heap's parked slabs go back before it fails.
/// Null results set errno to ENOMEM (so `malloc` needs no test of its own
/// and its slow path is a tail call).
#[cold]
#[inline(never)]
pub fn alloc_small_slow(class: usize) -> *mut u8 {
    out_of_memory_if_null(alloc_small(class))
}

fn alloc_small(class: usize) -> *mut u8 {
    let h = thread_heap();
    if h.is_null() {
        return h.cast();
    }
    tick::on_slow_path();
    // SAFETY: h is this thread's heap.
    unsafe {
        let pages = pages_of(&*h);
        let p = (*h).owned().alloc_slow(class, &pages);
        if p.is_null() && release_cached(&pages) {
            return (*h).owned().alloc_slow(class, &pages);
        }
        p
    }
}

/// The free fast path found object `p` of slab `s` valid and this
/// thread's, but its bin full: it goes back on the slab.
///
/// # Safety
/// The calling thread's heap owns slab `s`; `p` is a live object of it
/// being freed.
#[cold]
#[inline(never)]
pub unsafe fn bin_full(p: *mut u8, s: *mut Slab) {
    let h = tls::heap();
    // SAFETY: slab::free said this thread's heap owns s and p is its.
    unsafe {
        let pages = pages_of(&*h);
        (*h).owned().give_back_one(p, s, process::free_key(), &pages);
    }
}

/// The small-object free slow path (see `slab::free_slow`): a bad
/// pointer, or an object of another thread's heap.
///
/// # Safety
/// `s` is the slab head of `p`'s page; the caller is freeing `p`.
#[cold]
#[inline(never)]
pub unsafe fn free_small_slow(p: *mut u8, s: *mut Slab) {
    // SAFETY: forwarded contract.
    unsafe { slab::free_slow(p, s, process::free_key()) }
}

/// A large (≤ 4 MiB) or huge allocation of `size` bytes aligned to `align`
/// (a power of two ≥ the page size for large blocks); zeroed if `zero`.
/// Null results set errno to ENOMEM.
#[cold]
#[inline(never)]
pub fn alloc_big(size: usize, align: usize, zero: bool) -> *mut u8 {
    out_of_memory_if_null(alloc_page_block(size, align, zero))
}

/// At the memory limit: every heap's parked slabs and the cached huge
/// blocks go back. Whether anything did (then an allocation is retried).
fn release_cached(pages: &crate::pages::Pages<'_>) -> bool {
    let slabs = HEAPS.release_parked_everywhere(pages);
    let huge = HUGE.trim(&PAGES.zone.budget);
    slabs > 0 || huge > 0
}

/// Sets errno to ENOMEM if `p` is null; returns `p`.
#[inline]
fn out_of_memory_if_null(p: *mut u8) -> *mut u8 {
    if p.is_null() {
        // SAFETY: errno's location is valid for the calling thread.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
    }
    p
}

fn alloc_page_block(size: usize, align: usize, zero: bool) -> *mut u8 {
    if size > LARGE_MAX || align > LARGE_MAX {
        if !process::ensure_init() {
            return core::ptr::null_mut();
        }
        tick::on_slow_path();
        return HUGE.alloc(&PAGES.zone.budget, size, align, zero);
    }
    let h = thread_heap();
    if h.is_null() {
        return h.cast();
    }
    let order = large::order_for(size, align) as usize;
    // SAFETY: h is this thread's heap.
    unsafe {
        if order < NR_PCP_ORDERS {
            let b = (*h).owned().take_cached_block(order);
            if !b.is_null() {
                (*h).note_large_allocated(large::usable_size(b));
                let p = crate::section::page_addr(b.cast()) as *mut u8;
                if zero {
                    core::ptr::write_bytes(p, 0, size);
                }
                return p;
            }
        }
        tick::on_slow_path();
        let pages = pages_of(&*h);
        let mut p = large::alloc(&pages, size, align, zero);
        if p.is_null() && release_cached(&pages) {
            p = large::alloc(&pages, size, align, zero);
        }
        if !p.is_null() {
            let b = crate::section::desc_of(p as usize).cast::<LargeBlock>();
            (*h).note_large_allocated(large::usable_size(b));
        }
        p
    }
}

/// Frees page-granular block `p` (large or huge) whose page descriptor is
/// `d`; reports and aborts if it is not a live block's start. Never
/// changes errno.
///
/// # Safety
/// `d` = `desc_of(p)`, `p` lies in one of our sections and not in a slab.
#[cold]
#[inline(never)]
pub unsafe fn free_block(p: *mut u8, d: *mut Page) {
    // SAFETY: forwarded contract; checked_block validates the rest.
    unsafe {
        let b = large::checked_block(p, d, Caller::Free);
        if (*b).kind() == PageKind::Huge {
            let saved = *libc::__errno_location();
            HUGE.free(&PAGES.zone.budget, b, PAGES.zone.epoch());
            tick::on_slow_path();
            *libc::__errno_location() = saved;
            return;
        }
        let h = tls::heap();
        let bytes = large::usable_size(b);
        if (*h).is_empty_heap() {
            HEAPS.note_large_freed_elsewhere(bytes);
            large::free(&PAGES.through(core::ptr::null(), false), b);
            return;
        }
        (*h).note_large_freed(bytes);
        if (*h).owned().cache_block(b) {
            return;
        }
        large::free(&pages_of(&*h), b);
    }
}

/// Resizes huge block `b` in place or by moving its pages; null if it
/// cannot.
///
/// # Safety
/// `b` is a live huge block of the caller's.
pub unsafe fn realloc_huge(b: *mut LargeBlock, size: usize) -> *mut u8 {
    // SAFETY: forwarded contract.
    unsafe { HUGE.realloc(&PAGES.zone.budget, b, size) }
}

/// Gives back everything cached: the calling thread's empty slabs and
/// cached blocks, the abandoned heaps' empty slabs, every pageset, and all
/// free memory to the OS. Returns the bytes released to the OS.
pub fn trim() -> usize {
    if !process::is_ready() {
        return 0;
    }
    let h = tls::heap();
    // SAFETY: h is this thread's heap (or the empty heap, left alone).
    unsafe {
        if !(*h).is_empty_heap() {
            let pages = pages_of(&*h);
            (*h).owned().collect(&pages);
        }
    }
    HEAPS.collect_abandoned(&PAGES.through(core::ptr::null(), false));
    HUGE.trim(&PAGES.zone.budget);
    PAGES.drain_all();
    PAGES.zone.release_idle(0, 0)
}
