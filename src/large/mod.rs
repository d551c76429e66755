//! Page-granular allocations: *large* blocks (8 KiB < size ≤ 4 MiB) come
//! from a page allocator as MOVABLE blocks — through the pagesets for
//! orders ≤ 3, from the zone above — and *huge* blocks (> 4 MiB) get a
//! section of their own (`huge.rs`).
//!
//! A large block of order > 3 whose request leaves a sizeable tail gives the
//! tail pages back to the buddy lists straight away (the kernel's
//! `alloc_pages_exact`): a 2.1 MiB request holds 2.1 MiB, not 4. Such a
//! block is marked TRIMMED and remembers its page count; it is freed as the
//! aligned power-of-two pieces that make up its range.
//!
//! Both kinds are described by their head page descriptor, seen as a
//! [`LargeBlock`], so a pointer is validated and dispatched with the one
//! descriptor lookup every free makes.

pub mod huge;

use core::sync::atomic::Ordering::Acquire;

use crate::geometry::{LARGE_MAX, MAX_PAGE_ORDER, PAGE_ALLOC_COSTLY_ORDER, PAGE_SHIFT, PAGE_SIZE};
use crate::page::{flags, LargeBlock, MigrateType, Page, PageKind};
use crate::page_alloc::Pages;
use crate::report;
use crate::section::page_addr;
use crate::util::order_for_pages;

/// Trim the tail of a large block when at least this many pages are unused.
const TRIM_MIN_PAGES: usize = 16;

/// The order of a large block for `size` bytes aligned to `align`.
#[inline]
pub fn order_for(size: usize, align: usize) -> u32 {
    let npages = size.div_ceil(PAGE_SIZE).max(1);
    let align_order = if align > PAGE_SIZE {
        align.trailing_zeros() - PAGE_SHIFT
    } else {
        0
    };
    order_for_pages(npages).max(align_order)
}

/// Allocates a large block for `size` bytes aligned to `align` (power of
/// two, at most 4 MiB) from `pages`; zeroed if `zero`. Null when out of
/// memory.
pub fn alloc(pages: &Pages<'_>, size: usize, align: usize, zero: bool) -> *mut u8 {
    debug_assert!(size <= LARGE_MAX && align <= LARGE_MAX);
    let npages = size.div_ceil(PAGE_SIZE).max(1);
    let order = order_for(size, align);
    if order > MAX_PAGE_ORDER {
        return core::ptr::null_mut();
    }
    let head = pages.alloc(order, MigrateType::Movable);
    if head.is_null() {
        return core::ptr::null_mut();
    }
    let addr = page_addr(head);
    // SAFETY: the block is ours; its tail descriptors are None.
    unsafe {
        let clean = (*head).flags & flags::CLEAN != 0;
        let total = 1usize << order;
        let (kept, fl) = if order > PAGE_ALLOC_COSTLY_ORDER && total - npages >= TRIM_MIN_PAGES {
            // A tail that came clean was never written: it goes back clean
            // and costs the budget nothing.
            let tail = addr + npages * PAGE_SIZE;
            pages.zone().lock().free_range(tail, total - npages, clean);
            (npages, flags::TRIMMED)
        } else {
            (total, 0)
        };
        LargeBlock::make(head, order, kept, fl);
        if zero && !clean {
            core::ptr::write_bytes(addr as *mut u8, 0, size);
        }
    }
    addr as *mut u8
}

/// Who asks for a block to be checked, for the one-line report.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `free` (and the C++ deletes).
    Free,
    /// `realloc`.
    Realloc,
    /// `malloc_usable_size`.
    UsableSize,
}

impl Caller {
    /// The report for a pointer that is not a live block of ours.
    pub fn invalid(self) -> &'static str {
        match self {
            Caller::Free => "free(): invalid pointer",
            Caller::Realloc => "realloc(): invalid pointer",
            Caller::UsableSize => "malloc_usable_size(): invalid pointer",
        }
    }

    /// The report for a block that is already free.
    pub fn freed(self) -> &'static str {
        match self {
            Caller::Realloc => "realloc(): pointer already freed",
            _ => "free(): double free detected",
        }
    }
}

/// The page-granular block `p` (not in a slab) whose page descriptor is
/// `d`, checked: a live Large or Huge head whose first byte `p` is.
/// Reports and aborts otherwise: a double free, a pointer inside a block,
/// or something that was never a block.
///
/// # Safety
/// `d` = `desc_of(p)` and `p` lies in one of our sections.
#[inline]
pub unsafe fn checked_block(p: *mut u8, d: *mut Page, who: Caller) -> *mut LargeBlock {
    // SAFETY: descriptors of our sections are always readable.
    let kind = PageKind::from_u8(unsafe { (*d).kind.load(Acquire) });
    match kind {
        PageKind::Large | PageKind::Huge if p as usize == page_addr(d) => d.cast(),
        PageKind::Large | PageKind::Huge => report::fatal(
            match who {
                Caller::Free => "free(): invalid pointer (inside a block)",
                _ => who.invalid(),
            },
            p,
        ),
        k if k.is_freed() => report::fatal(who.freed(), p),
        _ => report::fatal(who.invalid(), p),
    }
}

/// The giant block `p` (see `section::create_giant`), checked: a live
/// Huge block that `p` starts. Reports and aborts otherwise — `p` is not
/// ours, or no longer.
///
/// # Safety
/// `p` is non-null.
#[cold]
pub unsafe fn checked_giant(p: *mut u8, who: Caller) -> *mut LargeBlock {
    let Some(d) = crate::section::giant_desc(p as usize) else {
        report::fatal(who.invalid(), p)
    };
    // SAFETY: a giant block's descriptor is mapped while its chunk is
    // marked.
    let kind = PageKind::from_u8(unsafe { (*d).kind.load(Acquire) });
    match kind {
        PageKind::Huge => d.cast(),
        k if k.is_freed() => report::fatal(who.freed(), p),
        _ => report::fatal(who.invalid(), p),
    }
}

/// Bytes the caller may use in live block `b`.
///
/// # Safety
/// `b` is a live large or huge block.
#[inline]
pub unsafe fn usable_size(b: *const LargeBlock) -> usize {
    // SAFETY: forwarded contract.
    unsafe { (*b).pages as usize * PAGE_SIZE }
}

/// Frees large block `b` (kind Large) to `pages`.
///
/// A plain check, not a CAS, stands between a block and a second free: two
/// threads freeing the same block at the same instant is a race in the
/// program that no malloc catches; a double free in sequence is caught by
/// [`checked_block`].
///
/// # Safety
/// `b` is a live large block the caller frees.
pub unsafe fn free(pages: &Pages<'_>, b: *mut LargeBlock) {
    // SAFETY: the caller frees b: it is ours now.
    unsafe {
        let order = u32::from((*b).order);
        let (trimmed, n) = ((*b).flags & flags::TRIMMED != 0, (*b).pages as usize);
        let head = LargeBlock::unmake(b);
        if trimmed {
            pages.zone().lock().free_range(page_addr(head), n, false);
        } else {
            pages.free(head, order);
        }
    }
}
