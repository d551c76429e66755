//! A huge block resized (`realloc` past 4 MiB): within its mapping when
//! it is long enough, in place when the address space after it is free,
//! else by moving its pages — never a copy. The block stays off the list
//! of every block and the huge-page watch while its links would point at
//! its old place.

use core::sync::atomic::Ordering::Relaxed;

use super::{block_addr, HugeBlocks, State};
use crate::geometry::PAGE_SIZE;
use crate::page::{flags, LargeBlock};
use crate::page_alloc::zone::Budget;
use crate::section;

impl HugeBlocks {
    /// Resizes huge block `b` to `size` (> 4 MiB) bytes: within its mapping
    /// when it is long enough, in place when the address space after it is
    /// free, else by moving its pages (no copy) to a new place. Null if
    /// it cannot (the block is then untouched; a giant block never can).
    ///
    /// # Safety
    /// `b` is a live huge block of the caller's.
    pub unsafe fn realloc(&self, budget: &Budget, b: *mut LargeBlock, size: usize) -> *mut u8 {
        let Some(new_len) = size.checked_next_multiple_of(PAGE_SIZE) else {
            return core::ptr::null_mut();
        };
        // SAFETY: b is a live huge block (contract).
        let (old_len, old_pages, giant) = unsafe {
            (
                (*b).len,
                (*b).pages as usize,
                (*b).flags & flags::GIANT != 0,
            )
        };
        if giant || new_len / PAGE_SIZE > u32::MAX as usize {
            return core::ptr::null_mut();
        }
        let p = block_addr(b);
        let set_pages = |b: *mut LargeBlock, pages: usize| {
            // SAFETY: the caller owns the block.
            unsafe { (*b).pages = pages as u32 };
            self.live_bytes.fetch_add(pages * PAGE_SIZE, Relaxed);
            self.live_bytes.fetch_sub(old_pages * PAGE_SIZE, Relaxed);
        };
        if new_len <= old_len && new_len * 2 >= old_len {
            set_pages(b, new_len / PAGE_SIZE);
            return p as *mut u8;
        }
        let charge = if new_len > old_len {
            match budget.charge(new_len - old_len) {
                Some(c) => Some(c),
                None => return core::ptr::null_mut(),
            }
        } else {
            None
        };
        // SAFETY: as above; the caller owns the block.
        if unsafe { self.resize_watched(b, new_len) } {
            match charge {
                Some(c) => c.keep(),
                None => budget.uncharge(old_len - new_len),
            }
            // SAFETY: as above.
            unsafe { (*b).len = new_len };
            set_pages(b, new_len / PAGE_SIZE);
            self.bytes.fetch_add(new_len, Relaxed);
            self.bytes.fetch_sub(old_len, Relaxed);
            return p as *mut u8;
        }
        let Some(charge) = charge else {
            return p as *mut u8; // cannot shrink in place: keep it as it is
        };
        // Move: the block with its header page, to a place with room, its
        // descriptor with it (off the list and the watch meanwhile: their
        // links would point at the old place).
        // SAFETY: the caller owns the block; on failure it stays as it was
        // and is put back.
        let moved = unsafe { self.move_watched(&mut self.state.lock(), b, new_len) };
        let Some(nb) = moved else {
            return core::ptr::null_mut(); // the charge goes back
        };
        charge.keep();
        // SAFETY: the moved block is ours.
        unsafe { (*nb).len = new_len };
        set_pages(nb, new_len / PAGE_SIZE);
        self.bytes.fetch_add(new_len, Relaxed);
        self.bytes.fetch_sub(old_len, Relaxed);
        block_addr(nb) as *mut u8
    }

    /// [`section::resize_huge`] with the watch kept off the block meanwhile.
    ///
    /// # Safety
    /// As `section::resize_huge`.
    pub(super) unsafe fn resize_watched(&self, b: *mut LargeBlock, len: usize) -> bool {
        // SAFETY: forwarded contract.
        unsafe {
            self.watch.forget(b);
            let ok = section::resize_huge(b.cast(), len);
            self.watch.resume(b);
            ok
        }
    }

    /// [`section::move_huge`] with the block off the list of every block
    /// and the watch meanwhile (their links would point at its old
    /// place), and back on them at its new one. Returns the moved block,
    /// or `None` (the block then untouched, and back on them).
    ///
    /// # Safety
    /// As `section::move_huge`; `c` is the locked state.
    pub(super) unsafe fn move_watched(
        &self,
        c: &mut State,
        b: *mut LargeBlock,
        len: usize,
    ) -> Option<*mut LargeBlock> {
        // SAFETY: forwarded contract.
        unsafe {
            c.unlink(b);
            self.watch.forget(b);
            let moved = section::move_huge(b.cast(), len).map(|h| h.cast::<LargeBlock>());
            let nb = moved.unwrap_or(b);
            c.link(nb);
            self.watch.resume(nb);
            moved
        }
    }
}
