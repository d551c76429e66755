//! A heap's way into its large bins (`block_bins/`, the thread cache of
//! the page-granular band): the entry points malloc and free call for
//! blocks of up to [`BIN_MAX_BYTES`], and the byte counts they keep. Apart
//! from `heap.rs`, which holds the small-object fast paths, so each file
//! reads in one sitting; the bins themselves, their tuning and their
//! locking are `block_bins/`'s.

use core::ptr;

use crate::geometry::PAGE_SIZE;
use crate::large;
use crate::page::{LargeBlock, PageKind};
use crate::page_alloc::block_classes::{class_of_small, class_pages};
use crate::page_alloc::Pages;

use super::block_bins::{BIN_CLASSES, BIN_MAX_BYTES};
use super::heap::Heap;

impl Heap {
    /// malloc's way into the owner's large bins, for a request of `size`
    /// bytes aligned to `align`: the live block (zeroed if `zero`), or null
    /// on a miss or a request the bins do not serve (over
    /// [`BIN_MAX_BYTES`], or aligned beyond a page); and whether the block
    /// should count for the tick (its bytes passed a multiple of the step:
    /// [`note_large_allocated_tick_due`](Self::note_large_allocated_tick_due)).
    /// The runtime's paths and the replay call this same function.
    ///
    /// # Safety
    /// The calling thread owns this heap (not the empty heap).
    #[inline(always)]
    pub unsafe fn alloc_from_bins<'p>(
        &self,
        size: usize,
        align: usize,
        zero: bool,
        epoch: u32,
        pages: impl Fn() -> Pages<'p>,
    ) -> (*mut u8, bool) {
        debug_assert!(!self.is_empty_heap());
        if size > BIN_MAX_BYTES || align > PAGE_SIZE {
            return (ptr::null_mut(), false);
        }
        let class = class_of_small(size.div_ceil(PAGE_SIZE));
        // SAFETY: forwarded contract.
        unsafe {
            let (head, class) = self.block_bins.take(class, epoch, pages);
            if head.is_null() {
                return (ptr::null_mut(), false);
            }
            let tick = self.note_large_allocated_tick_due(class_pages(class) * PAGE_SIZE);
            (large::make_of_class(head, class, size, zero), tick)
        }
    }

    /// malloc's way down for a block of at most 4 MiB once the bins' plain
    /// hit missed: the bins' whole path (`binned`: the thread allocates
    /// through its heap, not past its exit or while tracing), then the
    /// pages it is handed — the pageset's class list, another CPU's, the
    /// zone (`large::alloc`). The heap goes down on its own; null when
    /// out of memory. With it, whether the allocation should count as a
    /// slow path's call for the tick: a request of the bins' sizes counts
    /// by its bytes, as their hits do — where threads trade blocks of
    /// spread sizes, misses are common, and a call each wrote the tick's
    /// counter, which every thread shares; any other request counts every
    /// time.
    ///
    /// # Safety
    /// The calling thread owns this heap (not the empty heap); `size` and
    /// `align` are a large block's (at most `LARGE_MAX`, `align` a power
    /// of two).
    pub unsafe fn alloc_block(
        &self,
        size: usize,
        align: usize,
        zero: bool,
        binned: bool,
        epoch: u32,
        pages: &Pages<'_>,
    ) -> (*mut u8, bool) {
        // SAFETY: forwarded contract.
        unsafe {
            if binned {
                let (p, tick) = self.alloc_from_bins(size, align, zero, epoch, || *pages);
                if !p.is_null() {
                    return (p, tick);
                }
            }
            let p = large::alloc(pages, size, align, zero);
            let mut tick = true;
            if !p.is_null() {
                let b = crate::section::desc_of(p as usize).cast::<LargeBlock>();
                let bytes = large::usable_size(b);
                if binned && size <= BIN_MAX_BYTES && align <= PAGE_SIZE {
                    tick = self.note_large_allocated_tick_due(bytes);
                } else {
                    self.note_large_allocated(bytes);
                }
            }
            (p, tick)
        }
    }

    /// [`alloc_from_bins`](Self::alloc_from_bins)'s common case alone, for
    /// malloc's fast path: a request of at most [`BIN_MAX_BYTES`], aligned
    /// to a page at most and not zeroed, served by a plain hit
    /// ([`BlockBins::take_hit`]), and whether the hit should count for the
    /// tick ([`note_large_allocated_tick_due`](Self::note_large_allocated_tick_due)).
    /// Null when anything else is needed: the caller then takes the whole
    /// path, which does it.
    ///
    /// # Safety
    /// As `alloc_from_bins`; `size <= BIN_MAX_BYTES`.
    #[inline(always)]
    pub unsafe fn alloc_from_bins_hit(&self, size: usize, epoch: u32) -> (*mut u8, bool) {
        debug_assert!(!self.is_empty_heap() && size <= BIN_MAX_BYTES);
        let class = class_of_small(size.div_ceil(PAGE_SIZE));
        // SAFETY: forwarded contract.
        unsafe {
            let (head, class) = self.block_bins.take_hit(class, epoch);
            if head.is_null() {
                return (ptr::null_mut(), false);
            }
            let tick = self.note_large_allocated_tick_due(class_pages(class) * PAGE_SIZE);
            (large::make_of_class(head, class, size, false), tick)
        }
    }

    /// [`free_to_bins`](Self::free_to_bins)'s common case alone, for free's
    /// fast path: `b` of a binned class goes in without a spill
    /// ([`BlockBins::put_fits`]). False (nothing done) when anything else
    /// is needed.
    ///
    /// # Safety
    /// As `free_to_bins`.
    #[inline(always)]
    pub unsafe fn free_to_bins_fits(&self, b: *mut LargeBlock, epoch: u32) -> bool {
        debug_assert!(!self.is_empty_heap());
        // SAFETY: forwarded contract.
        unsafe {
            let class = usize::from((*b).order).wrapping_sub(1);
            if class >= BIN_CLASSES || !self.block_bins.put_fits(b, class, epoch) {
                return false;
            }
            self.note_large_freed(class_pages(class) * PAGE_SIZE);
            true
        }
    }

    /// free's way into the owner's large bins for `b`, a checked live
    /// large or huge block: `None` when its class has no bin (a huge block
    /// and a block aligned beyond a page are tagged 0, no class) and the
    /// caller frees it to the pages; else whether the bins' spill to make
    /// room sent pages on to the zone (memory a give-back may now find:
    /// [`BlockBins::put`](super::block_bins::BlockBins::put)).
    ///
    /// # Safety
    /// The calling thread owns this heap (not the empty heap) and frees
    /// `b`, a live large or huge block.
    #[inline(always)]
    pub unsafe fn free_to_bins<'p>(
        &self,
        b: *mut LargeBlock,
        epoch: u32,
        pages: impl Fn() -> Pages<'p>,
    ) -> Option<bool> {
        debug_assert!(!self.is_empty_heap());
        // SAFETY: forwarded contract.
        unsafe {
            let class = usize::from((*b).order).wrapping_sub(1);
            if class >= BIN_CLASSES {
                return None;
            }
            debug_assert_eq!(
                (*b).kind(),
                PageKind::Large,
                "a huge block with a class tag"
            );
            self.note_large_freed(class_pages(class) * PAGE_SIZE);
            Some(self.block_bins.put(b, class, epoch, pages))
        }
    }
}
