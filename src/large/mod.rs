//! Page-granular allocations: *large* blocks (8 KiB < size ≤ 4 MiB) come
//! from a page allocator as exact-size MOVABLE blocks, and *huge* blocks
//! (> 4 MiB) get a mapping of their own (`huge.rs`).
//!
//! A large block holds exactly the pages of its size class
//! (`page_alloc/block_classes.rs`: a quarter-power apart, so a 33 KiB request
//! holds 40 KiB, a 2.1 MiB one 2.5 MiB) and goes through the caller's
//! pageset's list of that class: a freed block serves the next request of
//! its class on that CPU as it is, without the zone lock, whichever thread
//! frees it. A block aligned beyond a page comes from the zone, a power of
//! two with its tail given back (the kernel's `alloc_pages_exact`), and
//! holds exactly the pages asked for. Every large block remembers its page
//! count and is freed as those pages.
//!
//! Both kinds are described by their head page descriptor, seen as a
//! [`LargeBlock`], so a pointer is validated and dispatched with the one
//! descriptor lookup every free makes (a huge block's, when the section
//! lookup misses, with the chunk map's second look: [`checked_huge`]).

pub(crate) mod huge;
mod huge_thp;

use core::sync::atomic::Ordering::Acquire;

use crate::alert;
use crate::geometry::{LARGE_MAX, PAGE_SHIFT, PAGE_SIZE};
use crate::page::{flags, LargeBlock, Page, PageKind};
use crate::page_alloc::{block_classes, Pages};
use crate::section::page_addr;

/// Pages a large block for `size` bytes aligned to `align` holds: its size
/// class's, or exactly what is asked for when aligned beyond a page.
#[cfg(feature = "internals")]
#[inline]
pub fn pages_for(size: usize, align: usize) -> usize {
    let npages = size.div_ceil(PAGE_SIZE).max(1);
    if align > PAGE_SIZE {
        npages
    } else {
        block_classes::class_pages(block_classes::class_of(npages))
    }
}

/// Allocates a large block for `size` bytes aligned to `align` (power of
/// two, at most 4 MiB) from `pages`; zeroed if `zero`. Null when out of
/// memory.
#[inline]
pub fn alloc(pages: &Pages<'_>, size: usize, align: usize, zero: bool) -> *mut u8 {
    debug_assert!(size <= LARGE_MAX && align <= LARGE_MAX);
    if align > PAGE_SIZE {
        return alloc_aligned(pages, size, align, zero);
    }
    let npages = size.div_ceil(PAGE_SIZE).max(1);
    let (head, class) = pages.alloc_large(block_classes::class_of(npages));
    if head.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: the block is ours; its other descriptors are None.
    unsafe { make_of_class(head, class, size, zero) }
}

/// Makes `head`, a block of `class_pages(class)` pages (from a pageset, or
/// taken out of a thread's large bins), the live block for a request of
/// `size` bytes (zeroed if `zero`). The block remembers its class (+ 1) in
/// its order byte, so its free needs no size computation. Returns its
/// address.
///
/// # Safety
/// The caller owns the block, of `class_pages(class)` pages; its other
/// descriptors are None.
#[inline(always)]
pub(crate) unsafe fn make_of_class(
    head: *mut Page,
    class: usize,
    size: usize,
    zero: bool,
) -> *mut u8 {
    // SAFETY: forwarded contract.
    unsafe {
        make(
            head,
            class as u32 + 1,
            block_classes::class_pages(class),
            size,
            zero,
        )
    }
}

/// [`alloc`] aligned beyond a page: exactly the pages asked for, from the
/// zone, tagged 0 (no class).
#[cold]
#[inline(never)]
fn alloc_aligned(pages: &Pages<'_>, size: usize, align: usize, zero: bool) -> *mut u8 {
    let npages = size.div_ceil(PAGE_SIZE).max(1);
    let align_order = align.trailing_zeros() - PAGE_SHIFT;
    let head = pages.alloc_exact_aligned(npages, align_order);
    if head.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: the block is ours; its other descriptors are None.
    unsafe { make(head, 0, npages, size, zero) }
}

/// Makes the block at `head` of `kept` pages a live large block tagged
/// `tag` (its class + 1, or 0), zeroing the first `size` bytes if `zero`
/// and the memory may not read as zero. Returns its address.
///
/// # Safety
/// The caller owns the block; its other descriptors are None.
#[inline(always)]
unsafe fn make(head: *mut Page, tag: u32, kept: usize, size: usize, zero: bool) -> *mut u8 {
    let addr = page_addr(head) as *mut u8;
    // SAFETY: forwarded contract.
    unsafe {
        // Only a zeroed request reads the head (a read of a cold line
        // stalls; the stores of `make` need not).
        let dirty = zero && (*head).flags & flags::CLEAN == 0;
        LargeBlock::make(head, tag, kept, flags::EXACT);
        if dirty {
            core::ptr::write_bytes(addr, 0, size);
        }
    }
    addr
}

/// Who asks for a block to be checked, for the one-line report.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller {
    /// `free` (and the C++ deletes).
    Free,
    /// `realloc`.
    Realloc,
    /// `malloc_usable_size`.
    UsableSize,
}

impl Caller {
    /// The report for a pointer that is not a live block of ours.
    pub(crate) fn invalid(self) -> &'static str {
        match self {
            Caller::Free => "free(): invalid pointer",
            Caller::Realloc => "realloc(): invalid pointer",
            Caller::UsableSize => "malloc_usable_size(): invalid pointer",
        }
    }

    /// The report for a block that is already free.
    pub(crate) fn freed(self) -> &'static str {
        match self {
            Caller::Free => "free(): double free detected",
            Caller::Realloc => "realloc(): pointer already freed",
            Caller::UsableSize => "malloc_usable_size(): pointer already freed",
        }
    }
}

/// The large block `p` (not in a slab) whose page descriptor is `d`,
/// checked: a live Large head whose first byte `p` is. (Huge blocks are
/// no section's: [`checked_huge`].)
/// Reports and aborts otherwise: a double free, a pointer inside a block,
/// or something that was never a block.
///
/// # Safety
/// `d` = `desc_of(p)` and `p` lies in one of our sections.
#[inline]
pub(crate) unsafe fn checked_block(p: *mut u8, d: *mut Page, who: Caller) -> *mut LargeBlock {
    // SAFETY: descriptors of our sections are always readable.
    let kind = PageKind::from_u8(unsafe { (*d).kind.load(Acquire) });
    // `d` describes p's page, so p starts it when p is page-aligned (a
    // test of p alone: no address made from the descriptor's).
    match kind {
        PageKind::Large if (p as usize).is_multiple_of(PAGE_SIZE) => d.cast(),
        PageKind::Large => alert::fatal(
            match who {
                Caller::Free => "free(): invalid pointer (inside a block)",
                _ => who.invalid(),
            },
            p,
        ),
        k if k.is_freed() => alert::fatal(who.freed(), p),
        _ => alert::fatal(who.invalid(), p),
    }
}

/// The huge block `p` (see `section::create_huge`), checked: a live
/// Huge block that `p` starts. Reports and aborts otherwise — `p` is not
/// ours, or no longer.
///
/// # Safety
/// `p` is non-null.
#[cold]
pub(crate) unsafe fn checked_huge(p: *mut u8, who: Caller) -> *mut LargeBlock {
    let Some(d) = crate::section::huge_desc(p as usize) else {
        alert::fatal(who.invalid(), p)
    };
    // SAFETY: a huge block's descriptor is mapped while its chunk is
    // marked.
    let kind = PageKind::from_u8(unsafe { (*d).kind.load(Acquire) });
    match kind {
        PageKind::Huge => d.cast(),
        k if k.is_freed() => alert::fatal(who.freed(), p),
        _ => alert::fatal(who.invalid(), p),
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
/// `b` is a live large block the caller frees. True when pages went on to
/// the zone (not only to the pageset's list).
pub unsafe fn free(pages: &Pages<'_>, b: *mut LargeBlock) -> bool {
    // SAFETY: the caller frees b: it is ours now.
    unsafe {
        let (n, tag) = ((*b).pages as usize, usize::from((*b).order));
        let head = LargeBlock::unmake(b);
        (*head).order = 0;
        if tag > 0 {
            pages.free_large(head, tag - 1)
        } else {
            pages.free_exact(head, n)
        }
    }
}
