//! `malloc_trim(0)` and `pcpalloc::trim`: everything cached goes back,
//! and what the heap's resident memory fell by is the answer.

use crate::page_alloc::zone::Shrink;

use super::process::{self, pages_of, HEAPS, HUGE, PAGES};
use super::tls::current_heap;
use super::valgrind;

/// Gives back everything cached: the calling thread's empty slabs and
/// cached blocks, the abandoned heaps' empty slabs, every other thread's
/// slabs whose every object is free (`heap/emptied.rs`), every thread's
/// large bins, every pageset, and all free memory to the OS. Returns the
/// resident bytes given back: how far the heap's resident memory (as
/// mincore counts it) fell across the trim — not the length of the
/// ranges released, of which pages never touched or already given back
/// held nothing. Other threads' allocations meanwhile count against it.
pub fn trim() -> usize {
    if !process::is_ready() {
        return 0;
    }
    valgrind::own_work(trim_now)
}

/// The heap's resident bytes now (mincore over the zone's online blocks
/// and the huge blocks).
fn resident_bytes() -> usize {
    PAGES.zone.resident_bytes() + HUGE.resident_bytes()
}

/// [`trim`]'s work.
fn trim_now() -> usize {
    let before = resident_bytes();
    give_back_everything();
    before.saturating_sub(resident_bytes())
}

/// Everything [`trim`] gives back.
fn give_back_everything() {
    let h = current_heap();
    // SAFETY: h is this thread's heap (or the empty heap, left alone).
    unsafe {
        if !(*h).is_empty_heap() {
            let pages = pages_of(&*h);
            (*h).owned().collect(&pages);
        }
    }
    let everywhere = PAGES.through(core::ptr::null(), false);
    HEAPS.collect_abandoned(&everywhere);
    HEAPS.collect_emptied_everywhere(h, &everywhere);
    HEAPS.drain_all_block_bins(&everywhere);
    HUGE.trim(&PAGES.zone.budget);
    PAGES.drain_all();
    PAGES.zone.shrink(Shrink::All, usize::MAX);
    PAGES.zone.release_idle(0, 0);
}
