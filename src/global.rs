//! The Rust face: `#[global_allocator] static GLOBAL: PcpAlloc = PcpAlloc;`.

use core::alloc::{GlobalAlloc, Layout};

use crate::geometry::SMALL_MAX;
use crate::malloc;

/// pcpalloc as a Rust global allocator.
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: pcpalloc::PcpAlloc = pcpalloc::PcpAlloc;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct PcpAlloc;

// SAFETY: every method returns blocks of at least the layout's size and
// alignment, or null; dealloc/realloc accept exactly what alloc returned.
unsafe impl GlobalAlloc for PcpAlloc {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() <= 8 && l.size() <= SMALL_MAX {
            malloc::alloc(l.size())
        } else {
            malloc::alloc_aligned(l.align(), l.size(), false)
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: p came from this allocator with this layout (GlobalAlloc
        // contract). An over-aligned small block may sit in a larger class
        // than its size's: the slab's class is checked against it.
        unsafe { malloc::free_sized(p, l.size()) }
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
