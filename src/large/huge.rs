//! Huge blocks (> 4 MiB): each lives in a section of its own — a
//! section-aligned reservation whose descriptor area describes just the
//! block (see `section::create_huge`). So a huge block is found like any
//! other: the chunk map says the address is ours, its page descriptor says
//! `Huge` and how long it is. No side table, no lock on the free path.
//!
//! The memory limit covers huge blocks too: their bytes are charged to the
//! zone's budget.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::geometry::{MAX_ORDER_BYTES, PAGE_SIZE, SECTION_META_BYTES, SECTION_SIZE};
use crate::page::{LargeBlock, Page, PageKind};
use crate::section::{self, page_addr};
use crate::sys;
use crate::zone::Budget;

/// Counters of the huge blocks of one allocator.
pub struct HugeBlocks {
    live: AtomicUsize,
    bytes: AtomicUsize,
    allocs: AtomicU64,
}

/// Live huge blocks, their bytes, and huge blocks ever mapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugeUsage {
    /// Huge blocks live now.
    pub live: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Huge blocks ever mapped.
    pub allocs: u64,
}

/// Where a huge block aligned to `align` starts in its section, or `None`
/// for an alignment a section cannot give.
fn block_offset(align: usize) -> Option<usize> {
    let off = align
        .max(SECTION_META_BYTES)
        .next_multiple_of(MAX_ORDER_BYTES);
    (off < SECTION_SIZE).then_some(off)
}

/// Makes the head of a fresh huge section a live huge block of `len`
/// bytes.
///
/// # Safety
/// `head` heads a huge section the caller just made.
unsafe fn make_huge(head: *mut Page, len: usize) -> *mut LargeBlock {
    // SAFETY: forwarded contract.
    unsafe {
        let b = LargeBlock::make(head, 0, len / PAGE_SIZE, 0);
        (*b).len = len;
        (*b).set_kind(PageKind::Huge);
        b
    }
}

impl HugeBlocks {
    /// No huge block yet.
    pub const fn new() -> HugeBlocks {
        HugeBlocks {
            live: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            allocs: AtomicU64::new(0),
        }
    }

    /// Maps a huge block of `size` bytes aligned to `align` (a power of
    /// two), charging `budget`. Null when the limit, the alignment or the
    /// OS says no.
    pub fn alloc(&self, budget: &Budget, size: usize, align: usize) -> *mut u8 {
        let Some(len) = size.checked_next_multiple_of(PAGE_SIZE) else {
            return core::ptr::null_mut();
        };
        let Some(offset) = block_offset(align) else {
            return core::ptr::null_mut();
        };
        if len / PAGE_SIZE > u32::MAX as usize || !budget.try_charge(len) {
            return core::ptr::null_mut();
        }
        let Some(head) = section::create_huge(len, offset) else {
            budget.uncharge(len);
            return core::ptr::null_mut();
        };
        // SAFETY: a fresh huge section's head descriptor, ours.
        unsafe { make_huge(head, len) };
        self.live.fetch_add(1, Relaxed);
        self.bytes.fetch_add(len, Relaxed);
        self.allocs.fetch_add(1, Relaxed);
        page_addr(head) as *mut u8
    }

    /// Unmaps huge block `b`.
    ///
    /// # Safety
    /// `b` is a live huge block the caller frees.
    pub unsafe fn free(&self, budget: &Budget, b: *mut LargeBlock) {
        // SAFETY: forwarded contract.
        unsafe {
            let len = (*b).len;
            (*b).set_kind(PageKind::None);
            section::destroy_huge(b.cast());
            budget.uncharge(len);
            self.live.fetch_sub(1, Relaxed);
            self.bytes.fetch_sub(len, Relaxed);
        }
    }

    /// Resizes huge block `b` to `size` (> 4 MiB) bytes: in place when the
    /// address space after it is free, else by moving its pages (no copy)
    /// into a new section. Null if it cannot (the block is then
    /// untouched).
    ///
    /// # Safety
    /// `b` is a live huge block of the caller's.
    pub unsafe fn realloc(&self, budget: &Budget, b: *mut LargeBlock, size: usize) -> *mut u8 {
        let Some(new_len) = size.checked_next_multiple_of(PAGE_SIZE) else {
            return core::ptr::null_mut();
        };
        // SAFETY: b is a live huge block (contract).
        let old_len = unsafe { (*b).len };
        if new_len / PAGE_SIZE > u32::MAX as usize
            || (new_len > old_len && !budget.try_charge(new_len - old_len))
        {
            return core::ptr::null_mut();
        }
        let p = page_addr(b.cast());
        // SAFETY: as above; the caller owns the block.
        if unsafe { section::resize_huge(b.cast(), new_len) } {
            // SAFETY: as above.
            unsafe {
                (*b).len = new_len;
                (*b).pages = (new_len / PAGE_SIZE) as u32;
            }
            if new_len < old_len {
                budget.uncharge(old_len - new_len);
            }
            self.bytes.fetch_add(new_len, Relaxed);
            self.bytes.fetch_sub(old_len, Relaxed);
            return p as *mut u8;
        }
        if new_len < old_len {
            return p as *mut u8; // cannot shrink in place: keep it as it is
        }
        // Move: a new section, and the old pages remapped into it.
        let offset = p - section::section_base(p);
        let Some(head) = section::create_huge(new_len, offset) else {
            budget.uncharge(new_len - old_len);
            return core::ptr::null_mut();
        };
        let q = page_addr(head);
        if !sys::move_pages(p as *mut u8, old_len, q as *mut u8) {
            // SAFETY: the new section is ours and unused.
            unsafe { section::destroy_huge(head) };
            budget.uncharge(new_len - old_len);
            return core::ptr::null_mut();
        }
        // SAFETY: the new head is ours; the old block's pages now live in
        // the new section and the old section holds nothing.
        unsafe {
            make_huge(head, new_len);
            (*b).set_kind(PageKind::None);
            section::destroy_huge(b.cast());
        }
        self.bytes.fetch_add(new_len, Relaxed);
        self.bytes.fetch_sub(old_len, Relaxed);
        q as *mut u8
    }

    /// The counters.
    pub fn usage(&self) -> HugeUsage {
        HugeUsage {
            live: self.live.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            allocs: self.allocs.load(Relaxed),
        }
    }
}

impl Default for HugeBlocks {
    fn default() -> Self {
        Self::new()
    }
}
