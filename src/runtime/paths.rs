//! The allocator's slow paths, which need the runtime: a thread's heap
//! made on demand, the tick when it is due, retries at the memory limit,
//! and the page-granular blocks.

use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::{LARGE_MAX, PAGE_SIZE};
use crate::heap::block_bins::BIN_MAX_BYTES;
use crate::heap::{self, Freed, Heap};
use crate::large::{self, Caller};
use crate::page::{LargeBlock, Page, PageKind};
use crate::slab::classes::CLASS_SIZE;
use crate::slab::Slab;
use crate::trace::Op;

use crate::heap_profile as profile;
use crate::sys;

use super::free_small::{free_small_remote, free_small_slow, slab_changed};
use super::process::pages_of;
use super::process::{self, HEAPS, HUGE, PAGES};
use super::thread::thread_heap;
use super::tls::current_heap;
use super::{hooks, late, reclaim, record, sampled, tick, tls, valgrind};

/// The small-object allocation slow path for `class`: the thread's heap is
/// set up if needed, the tick runs if due, and the heap refills; at the
/// memory limit every heap's parked slabs go back before it fails.
/// Null results set errno to ENOMEM (so `malloc` needs no test of its own
/// and its slow path is a tail call); success leaves errno alone.
///
/// While the heap profile samples, most calls are a bin's credit visit
/// (`sampled::recredit`), answered here with no stack frame; the rest
/// goes on in [`alloc_small_slower`].
#[cold]
#[inline(never)]
pub fn alloc_small_slow(class: usize) -> *mut u8 {
    // The common visit while sampling: a bin out of credit, objects on
    // it, no sample due. Not sampling, no sampler is ready (none drew for
    // the rate in force: `sampled::recredit`), which the refill's slow
    // path learns in two instructions more than a test of the rate.
    // SAFETY: the TLS heap is this thread's, or the empty heap; the
    // malloc path passes a class.
    let p = unsafe { sampled::recredit(tls::heap(), class) };
    if !p.is_null() {
        return p;
    }
    alloc_small_slower(class)
}

/// [`alloc_small_slow`] past the credit visit.
#[cold]
#[inline(never)]
fn alloc_small_slower(class: usize) -> *mut u8 {
    if valgrind::on() {
        return valgrind::allocation(false, || out_of_memory_if_null(alloc_small(class)));
    }
    out_of_memory_if_null(alloc_small(class))
}

fn alloc_small(class: usize) -> *mut u8 {
    if !process::is_ready() {
        hooks::keep_linked();
    }
    if tls::exited() {
        return late::alloc_small(class);
    }
    let h = thread_heap();
    if h.is_null() {
        return h.cast();
    }
    if record::every_op_slow() {
        return alloc_small_traced(h, class);
    }
    refill(h, class)
}

/// The heap's bin of `class` is empty (or, while the heap profile samples,
/// out of credit: `sampled.rs` decides).
fn refill(h: *mut Heap, class: usize) -> *mut u8 {
    if profile::sampling() {
        // SAFETY: h is this thread's heap.
        return unsafe {
            sampled::alloc_small(
                h,
                class,
                || refill_plain(h, class),
                alloc_sample_block,
                free_unserved,
            )
        };
    }
    refill_plain(h, class)
}

/// The page-granular block a sampled small object of `size` bytes is
/// served in (`sampled.rs`): from the thread's large bins first, where
/// its free puts it back. (Taken from the pages each time, the blocks
/// filled the bins and spilled them: 1,050 instructions a sample on
/// larson, 400 now.) Never changes errno.
fn alloc_sample_block(size: usize) -> *mut u8 {
    let saved = sys::errno();
    let p = alloc_big_unsampled(size, sampled::SAMPLE_ALIGN, false);
    if p.is_null() {
        sys::set_errno(saved);
    }
    p
}

/// Frees small object `p`, which the thread's heap took off a bin for the
/// program and did not hand out after all (`sampled.rs`): the free path,
/// as the program's free would take it.
fn free_unserved(p: *mut u8) {
    if let Some(v) = crate::slab::slab::lookup(p as usize) {
        // SAFETY: p is a live object of slab v, this thread's, never
        // handed out (so not freed).
        unsafe {
            let left = heap::free(p, v, tls::heap(), process::free_key());
            finish_free(p, v, left);
        }
    }
}

/// Refills the heap's empty bin of `class` (the tick first, if due;
/// everything the heap caches first if a reclaim asked for it; a reclaim
/// and one retry if it fails) and pops an object.
fn refill_plain(h: *mut Heap, class: usize) -> *mut u8 {
    tick::on_slow_path();
    // SAFETY: h is this thread's heap.
    unsafe {
        let pages = pages_of(&*h);
        collect_if_asked(h, &pages);
        reclaim::or_reclaim(
            h,
            PAGE_SIZE << crate::slab::classes::SLAB_ORDER,
            true,
            || (*h).owned().alloc_slow(class, &pages),
        )
    }
}

/// If a reclaim ran since heap `h` last looked, it gives back what it can
/// now (its owner is the only one who can).
///
/// # Safety
/// `h` is the calling thread's heap.
#[inline]
unsafe fn collect_if_asked(h: *mut Heap, pages: &crate::page_alloc::Pages<'_>) {
    let e = reclaim::epoch();
    // SAFETY: forwarded contract.
    unsafe {
        let mut o = (*h).owned();
        if o.local().reclaim_seen != e {
            o.local().reclaim_seen = e;
            o.collect(pages);
        }
    }
}

/// While tracing (or under valgrind), every small allocation comes here: the fast path's work
/// on the thread's real heap, then the record.
#[cold]
#[inline(never)]
fn alloc_small_traced(h: *mut Heap, class: usize) -> *mut u8 {
    // SAFETY: h is this thread's heap.
    let mut p = unsafe { Heap::alloc_fast(h, class) };
    if p.is_null() {
        p = refill(h, class);
    }
    if !p.is_null() {
        // SAFETY: heaps live forever.
        record::record(unsafe { &*h }, Op::Alloc, p, CLASS_SIZE[class] as usize, 0);
    }
    p
}

/// Finishes a free whose fast path (`slab::free` and its kin) left `left`
/// to do: the one place every free of the malloc API that reached a
/// descriptor ends.
///
/// # Safety
/// `v` is `slab::lookup`'s answer for `p` (in our sections) and `left`
/// what the fast path of the calling thread's free of `p` returned
/// (`SlabChanged` and `Remote` only when `v` is `p`'s live slab).
#[inline(always)]
pub unsafe fn finish_free(p: *mut u8, v: *mut Slab, left: Freed) {
    // SAFETY: forwarded contract.
    unsafe {
        match left {
            Freed::Done => {}
            Freed::SlabChanged => slab_changed(tls::heap(), v),
            Freed::Remote => free_small_remote(p, v),
            Freed::Slow => free_off_slab_or_slow(p),
        }
    }
}

/// The slow path of a free whose descriptor did not pass the object
/// check: a page-granular block (its page's `head` null), or a slab's
/// block that is bad or holds the free key.
///
/// # Safety
/// `p` lies in one of our sections; the caller is freeing it.
#[cold]
#[inline(never)]
unsafe fn free_off_slab_or_slow(p: *mut u8) {
    let d = crate::section::desc_of(p as usize);
    // SAFETY: descriptors of our sections are readable; forwarded contract.
    unsafe {
        let s = (*d).head.load(Relaxed).cast::<Slab>();
        if s.is_null() {
            free_block(p, d)
        } else {
            free_small_slow(p, s)
        }
    }
}

/// A large (≤ 4 MiB) or huge allocation of `size` bytes aligned to `align`
/// (a power of two ≥ the page size for large blocks); zeroed if `zero`.
/// Null results set errno to ENOMEM.
///
/// A request of at most 256 KiB is first sought in the thread's large bins
/// (`heap/block_bins/`): no CPU lookup, no lock, no atomic
/// read-modify-write.
#[inline(never)]
pub fn alloc_big(size: usize, align: usize, zero: bool) -> *mut u8 {
    if valgrind::on() || (profile::sampling() && !sampled::big_counted(size)) {
        return alloc_big_watched(size, align, zero);
    }
    alloc_big_unsampled(size, align, zero)
}

/// [`alloc_big`] under memcheck or while the heap profile samples: apart,
/// so that the plain path keeps nothing across a call (its only calls are
/// tail calls) and saves no registers.
#[cold]
#[inline(never)]
fn alloc_big_watched(size: usize, align: usize, zero: bool) -> *mut u8 {
    if valgrind::on() {
        return valgrind::allocation(zero, || alloc_big_unsampled(size, align, zero));
    }
    sampled::alloc_big(size, || alloc_big_unsampled(size, align, zero))
}

/// [`alloc_big`] itself, the heap profile aside.
#[inline(always)]
fn alloc_big_unsampled(size: usize, align: usize, zero: bool) -> *mut u8 {
    let h = tls::heap();
    // SAFETY: the TLS heap is this thread's, or the empty heap (no heap
    // yet, past the exit hook, or tracing), whose bins are never used.
    unsafe {
        if size <= BIN_MAX_BYTES && align <= PAGE_SIZE && !zero && !(*h).is_empty_heap() {
            let (p, tick_due) = (*h).alloc_from_bins_hit(size, PAGES.zone.epoch());
            if !p.is_null() {
                // Without a background thread, ticks run from allocations
                // (every so many): bin hits count as a slow path's call
                // once per so many bytes.
                if tick_due {
                    return tick::on_slow_path_then(p);
                }
                return p;
            }
        }
    }
    alloc_big_slow(size, align, zero)
}

/// [`alloc_big`] past a plain hit in the large bins: a huge block, or
/// the thread's heap goes down (its bins' whole path — a miss, a new tick,
/// a zeroed request — then the pages: `Heap::alloc_block`), under a
/// reclaim and one retry if that fails.
#[cold]
#[inline(never)]
fn alloc_big_slow(size: usize, align: usize, zero: bool) -> *mut u8 {
    let p = if size > LARGE_MAX || align > LARGE_MAX || tls::exited() {
        alloc_page_block(size, align, zero)
    } else {
        // The TLS heap is the empty heap while tracing (and before the
        // thread's first allocation): then the bins are left alone, as
        // its frees leave them.
        // SAFETY: the TLS heap is this thread's, or the empty heap.
        let binned = unsafe { !(*tls::heap()).is_empty_heap() };
        let h = thread_heap();
        if h.is_null() {
            return out_of_memory_if_null(h.cast());
        }
        // SAFETY: h is this thread's heap.
        unsafe {
            let pages = pages_of(&*h);
            collect_if_asked(h, &pages);
            let mut tick_due = true;
            let p = reclaim::or_reclaim(h, size.saturating_add(align), true, || {
                let (p, due) =
                    (*h).alloc_block(size, align, zero, binned, PAGES.zone.epoch(), &pages);
                tick_due = due;
                p
            });
            // The tick after the block, not before: a due tick's work
            // does not delay it.
            if tick_due || p.is_null() {
                tick::on_slow_path();
            }
            p
        }
    };
    if record::tracing() && !p.is_null() {
        let h = thread_heap();
        if !h.is_null() {
            let align = if align > PAGE_SIZE { align } else { 0 };
            // SAFETY: heaps live forever.
            record::record(unsafe { &*h }, Op::Alloc, p, size, align);
        }
    }
    out_of_memory_if_null(p)
}

/// ENOMEM when an allocation failed; errno is left alone when it did not
/// (nothing below changes it: the system calls of `sys` and the tick's
/// thread start keep it).
#[inline]
fn out_of_memory_if_null(p: *mut u8) -> *mut u8 {
    if p.is_null() {
        sys::set_errno(libc::ENOMEM);
    }
    p
}

fn alloc_page_block(size: usize, align: usize, zero: bool) -> *mut u8 {
    if size > LARGE_MAX || align > LARGE_MAX {
        if !process::ensure_init() {
            return core::ptr::null_mut();
        }
        tick::on_slow_path();
        let h = current_heap();
        return reclaim::or_reclaim(h, size.saturating_add(align), false, || {
            // Asked at each try: the retry after a reclaim is not advised
            // for huge pages (only a "yes" is dropped: never stays never).
            let thp = PAGES
                .zone
                .thp_advice()
                .filter(|&on| !on || !reclaim::under_pressure());
            HUGE.alloc(
                &PAGES.zone.budget,
                size,
                align,
                zero,
                thp,
                &PAGES.knobs(),
                PAGES.zone.below_high(),
            )
        });
    }
    if tls::exited() {
        return late::alloc_large(size, align, zero);
    }
    let h = thread_heap();
    if h.is_null() {
        return h.cast();
    }
    // SAFETY: h is this thread's heap.
    unsafe {
        tick::on_slow_path();
        let pages = pages_of(&*h);
        collect_if_asked(h, &pages);
        let p = reclaim::or_reclaim(h, size.saturating_add(align), true, || {
            large::alloc(&pages, size, align, zero)
        });
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
pub(crate) unsafe fn free_block(p: *mut u8, d: *mut Page) {
    if valgrind::on() {
        // SAFETY: forwarded contract.
        return unsafe { free_block_watched(p, d) };
    }
    // SAFETY: forwarded contract.
    unsafe { free_block_plain(p, d) }
}

/// [`free_block`] under memcheck: apart, so that the plain path saves no
/// registers.
///
/// # Safety
/// As [`free_block`].
#[cold]
#[inline(never)]
unsafe fn free_block_watched(p: *mut u8, d: *mut Page) {
    valgrind::freeing(p);
    // SAFETY: forwarded contract.
    unsafe { free_block_plain(p, d) };
    valgrind::freed();
}

/// [`free_block`]'s work.
///
/// # Safety
/// As [`free_block`].
#[inline(always)]
unsafe fn free_block_plain(p: *mut u8, d: *mut Page) {
    // SAFETY: forwarded contract; checked_block validates the rest.
    unsafe {
        let b = large::checked_block(p, d, Caller::Free);
        sampled::on_free(b);
        // A block of a binned class goes to this thread's large bins (the
        // empty heap — no heap, exited, tracing — has none).
        let h = tls::heap();
        if !(*h).is_empty_heap() && (*h).free_to_bins_fits(b, PAGES.zone.epoch()) {
            return;
        }
        free_block_slow(p, b);
    }
}

/// [`free_block`] past a plain put in the large bins: the bins' whole
/// path (a spill, a new tick), then the pages.
///
/// # Safety
/// `b` is the checked live block at `p`, which the caller frees.
#[cold]
#[inline(never)]
unsafe fn free_block_slow(p: *mut u8, b: *mut LargeBlock) {
    // SAFETY: forwarded contract.
    unsafe {
        let h = tls::heap();
        if !(*h).is_empty_heap() {
            match (*h).free_to_bins(b, PAGES.zone.epoch(), || pages_of(&*h)) {
                // The bins' spill went on to the zone: as any free that
                // leaves memory there, it may start the background thread
                // or run a due tick (a spill the pageset kept does not
                // wait there: the next miss on any CPU reuses it).
                Some(true) => return tick::memory_waiting(),
                Some(false) => return,
                None => {}
            }
        }
        // Past the bins: a huge block, a block of a class without a bin,
        // or a thread without a heap.
        let h = current_heap();
        if record::tracing() && !(*h).is_empty_heap() {
            record::record(&*h, Op::Free, p, 0, 0);
        }
        if (*b).kind() == PageKind::Huge {
            let saved = sys::errno();
            HUGE.free(&PAGES.zone.budget, b, PAGES.zone.epoch(), &PAGES.knobs());
            sys::set_errno(saved);
            tick::memory_waiting();
            return;
        }
        let bytes = large::usable_size(b);
        let to_zone = if (*h).is_empty_heap() {
            HEAPS.note_large_freed_elsewhere(bytes);
            large::free(&PAGES.through(core::ptr::null(), false), b)
        } else {
            (*h).note_large_freed(bytes);
            large::free(&pages_of(&*h), b)
        };
        // Only a free that reached the zone adds to what waits there: a
        // block kept on the pageset's list only lowers the keep a little,
        // which the next free that drains, or the next tick, looks at.
        if to_zone {
            tick::memory_waiting();
        }
    }
}

/// `free` of a pointer no section describes: the start of a huge block,
/// or not ours at all (reported, and the process aborts). Never changes
/// errno.
///
/// # Safety
/// `p` is non-null; the caller is freeing it.
#[cold]
#[inline(never)]
pub unsafe fn free_foreign(p: *mut u8, who: Caller) {
    let vg = valgrind::on();
    if vg {
        valgrind::freeing(p);
    }
    // SAFETY: forwarded contract.
    let b = unsafe { large::checked_huge(p, who) };
    // SAFETY: b is a live huge block the caller frees.
    unsafe { sampled::on_free(b) };
    let saved = sys::errno();
    // SAFETY: checked_huge returned a live huge block the caller frees.
    unsafe { HUGE.free(&PAGES.zone.budget, b, PAGES.zone.epoch(), &PAGES.knobs()) };
    tick::memory_waiting();
    sys::set_errno(saved);
    if vg {
        valgrind::freed();
    }
}

/// Resizes huge block `b` in place or by moving its pages; null if it
/// cannot.
///
/// # Safety
/// `b` is a live huge block of the caller's.
pub unsafe fn realloc_huge(b: *mut LargeBlock, size: usize) -> *mut u8 {
    let saved = sys::errno();
    // SAFETY: forwarded contract.
    let p = unsafe { HUGE.realloc(&PAGES.zone.budget, b, size) };
    sys::set_errno(saved);
    p
}
