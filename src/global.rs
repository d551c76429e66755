//! The Rust face: `#[global_allocator] static GLOBAL: PcpAlloc = PcpAlloc;`
//! and the page-level API.

use core::alloc::{GlobalAlloc, Layout};

use crate::config::{LARGE_MAX, MAX_PAGE_ORDER, SMALL_MAX};
use crate::malloc;
use crate::page::{MigrateType, PageKind};
use crate::pages;
use crate::section::{desc_of, page_addr};
use crate::slab;
use crate::state::{self, ZONE};

/// pcpalloc as a Rust global allocator.
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;
/// ```
pub struct PcpAlloc;

// SAFETY: every method returns blocks of at least the layout's size and
// alignment, or null; dealloc/realloc accept exactly what alloc returned.
unsafe impl GlobalAlloc for PcpAlloc {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() <= 8 && l.size() <= SMALL_MAX {
            slab::alloc(l.size())
        } else {
            malloc::alloc_aligned(l.align(), l.size(), false)
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _l: Layout) {
        // SAFETY: p came from this allocator (GlobalAlloc contract).
        unsafe { malloc::free(p) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.align() <= 8 {
            malloc::calloc(1, l.size())
        } else {
            malloc::alloc_aligned(l.align(), l.size(), true)
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if l.align() <= 8 {
            // SAFETY: p is a live block of ours (GlobalAlloc contract).
            return unsafe { malloc::realloc_raw(p, new_size) };
        }
        // Over-aligned: keep the block if it still fits, else move.
        // SAFETY: p is a live block of ours.
        let usable = unsafe { malloc::usable_size(p) };
        if new_size <= usable && new_size >= usable / 2 {
            return p;
        }
        let q = malloc::alloc_aligned(l.align(), new_size, false);
        if !q.is_null() {
            // SAFETY: both blocks are live and distinct.
            unsafe {
                core::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                malloc::free(p);
            }
        }
        q
    }
}

/// Allocates a naturally aligned block of `2^order` pages of migratetype
/// `mt` from the page allocator (through this CPU's pageset for orders ≤ 3).
/// Null when out of memory. Free it with [`free_pages`].
pub fn alloc_pages(order: u32, mt: MigrateType) -> *mut u8 {
    if order > MAX_PAGE_ORDER {
        return core::ptr::null_mut();
    }
    let h = slab::heap::current_or_init();
    if h.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: h is this thread's heap.
    let head = pages::alloc_pages(order, mt, unsafe { (*h).pageset });
    page_out(head, order)
}

/// Like [`alloc_pages`] but straight from the zone, bypassing the pagesets
/// (every call takes the zone lock): the "PCP off" baseline.
pub fn alloc_pages_zone(order: u32, mt: MigrateType) -> *mut u8 {
    if order > MAX_PAGE_ORDER || !state::ensure_init() {
        return core::ptr::null_mut();
    }
    page_out(ZONE.alloc(order, mt), order)
}

fn page_out(head: *mut crate::page::Page, order: u32) -> *mut u8 {
    if head.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: the block is ours.
    unsafe {
        (*head).order = order as u8;
        (*head).flags = 0;
        (*head).aux = 1 << order;
        (*head).set_kind(PageKind::Large);
    }
    page_addr(head) as *mut u8
}

/// Frees a block from [`alloc_pages`] (or [`alloc_pages_zone`]).
///
/// # Safety
/// `p` came from `alloc_pages*` with this `order` and is not used again.
pub unsafe fn free_pages(p: *mut u8, order: u32) {
    // SAFETY: forwarded contract; free handles a Large head.
    unsafe { malloc::free(p) };
    let _ = order;
}

/// Frees a block straight to the zone (the "PCP off" baseline).
///
/// # Safety
/// As [`free_pages`].
pub unsafe fn free_pages_zone(p: *mut u8, order: u32) {
    let d = desc_of(p as usize);
    // SAFETY: p heads a Large block of ours with this order (contract).
    unsafe {
        (*d).set_kind(PageKind::None);
        (*d).flags = 0;
        (*d).aux = 0;
        ZONE.free(d, order);
    }
}

/// Gives everything cached back: empty slabs, pagesets, and all free memory
/// to the OS. Returns the bytes released to the OS.
pub fn trim() -> usize {
    malloc::trim()
}

const _: () = assert!(LARGE_MAX > SMALL_MAX);
