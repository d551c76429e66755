//! The page allocator front: blocks of order 0..=10 from the allocator's
//! zone, through a pageset for orders ≤ 3 (the kernel's `alloc_pages` /
//! `__free_pages`). The slab layer, large allocations and the public page
//! API all come through here.
//!
//! When the zone cannot grow any more (memory limit), pages cached on the
//! pagesets are drained to the zone and the allocation is retried once —
//! the kernel's drain_all_pages before reclaim — before failing.

use crate::config::{MAX_PAGE_ORDER, PAGE_ALLOC_COSTLY_ORDER};
use crate::page::{MigrateType, Page};
use crate::pcp::{pool, Pageset};
use crate::state::ZONE;
use crate::sys;
use crate::tunables;

/// The pageset to use: the given one (thread mode) or this CPU's.
#[inline]
fn pageset(pcp: *mut Pageset) -> &'static Pageset {
    if pcp.is_null() {
        pool::cpu_pageset(sys::current_cpu())
    } else {
        // SAFETY: thread pagesets live forever (pool).
        unsafe { &*pcp }
    }
}

/// Allocates a block of `order` for `mt`; `pcp` is the thread's pageset in
/// thread mode, null in CPU mode. Returns the head descriptor with kind
/// `None` (the caller gives it one) or null when out of memory.
#[inline]
pub fn alloc_pages(order: u32, mt: MigrateType, pcp: *mut Pageset) -> *mut Page {
    debug_assert!(order <= MAX_PAGE_ORDER);
    let p = if order <= PAGE_ALLOC_COSTLY_ORDER {
        pageset(pcp).alloc(&ZONE, order, mt, &tunables::knobs(), !pcp.is_null())
    } else {
        ZONE.alloc(order, mt)
    };
    if p.is_null() {
        alloc_pages_slow(order, mt)
    } else {
        p
    }
}

#[cold]
fn alloc_pages_slow(order: u32, mt: MigrateType) -> *mut Page {
    if pool::total_count() == 0 {
        return core::ptr::null_mut();
    }
    pool::drain_all(&ZONE);
    ZONE.count_drain_all();
    ZONE.alloc(order, mt)
}

/// Frees block `head` of `order` (its kind is overwritten).
///
/// # Safety
/// `head` heads a block of the allocator's zone of `order` that the caller
/// owns and no longer uses; its other descriptors are `None`.
#[inline]
pub unsafe fn free_pages(head: *mut Page, order: u32, pcp: *mut Pageset) {
    if order <= PAGE_ALLOC_COSTLY_ORDER {
        // SAFETY: forwarded contract.
        unsafe { pageset(pcp).free(&ZONE, head, order, &tunables::knobs(), !pcp.is_null()) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { ZONE.free(head, order) }
    }
}
