//! Blocks of pages straight from the allocator's page layer, as the
//! kernel's `alloc_pages` / `__free_pages`: through this CPU's pageset, or
//! straight from the zone under its lock (the "PCP off" baseline). Call
//! `internals::ensure_init()` first.
//!
//! Both directions take the same path (`internals::free_pages` was once
//! malloc's `free`, whose blocks went where `alloc_pages` never looks:
//! every allocation refilled from a zone that grew without end).

use pcpalloc::internals::{self, MigrateType, Page};

/// A block of `2^order` pages (order ≤ 3) through the calling CPU's
/// pageset when `pcp`, else from the zone; null when out of memory.
#[inline]
pub fn alloc(order: u32, pcp: bool) -> *mut Page {
    let pa = internals::page_allocator();
    if pcp {
        pa.through(std::ptr::null(), false)
            .alloc(order, MigrateType::Movable)
    } else {
        pa.zone.alloc(order, MigrateType::Movable)
    }
}

/// The first byte of block `head`.
#[inline]
pub fn addr(head: *mut Page) -> *mut u8 {
    internals::page_addr(head) as *mut u8
}

/// Frees block `head` of `order` the way it came: to the calling CPU's
/// pageset when `pcp`, else to the zone.
///
/// # Safety
/// `head` came from [`alloc`] with this `order` and is not used again.
#[inline]
pub unsafe fn free(head: *mut Page, order: u32, pcp: bool) {
    let pa = internals::page_allocator();
    // SAFETY: forwarded contract; the block's descriptors are as the page
    // layer handed them out (kind None).
    unsafe {
        if pcp {
            pa.through(std::ptr::null(), false).free(head, order)
        } else {
            pa.zone.free(head, order)
        }
    }
}
