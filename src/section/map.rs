//! The map that answers "is this address ours, and what is its
//! descriptor?" (the kernel's `pfn_valid` and `virt_to_page`).
//!
//! The chunk map is one byte per 4 MiB block of the 47-bit address space
//! (32 MiB of zero-initialised memory, untouched except around our
//! sections, so it costs address space, not memory): a byte is set,
//! with Release ordering, only once the block is mapped and described, so
//! "is this address ours?" never says yes for memory that merely falls in
//! one of our 256 MiB slots; it is cleared when a block goes offline. In
//! front of it, the process heap's first section is answered for by one
//! subtraction and one compare ([`lookup`]).

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_PAGE_ORDER, NR_CHUNK_SLOTS, PAGES_PER_SECTION, PAGE_DESC_SIZE, PAGE_SHIFT,
    SECTION_META_BYTES, SECTION_SIZE,
};
use crate::page::Page;

/// One byte per MAX_ORDER block of the address space, and one more that
/// is never set: with a length that is not a power of two the compiler
/// keeps `is_ours`'s bounds check as one compare of the index it needs
/// anyway, instead of a second shift of the address (one instruction
/// fewer on every free).
static CHUNK_MAP: [AtomicU8; NR_CHUNK_SLOTS + 1] = [const { AtomicU8::new(0) }; NR_CHUNK_SLOTS + 1];
/// log2 of a chunk (MAX_ORDER block).
const CHUNK_SHIFT: u32 = MAX_PAGE_ORDER + PAGE_SHIFT;

/// Chunk-map value: the chunk is described by its section's descriptors.
const CHUNK_SECTION: u8 = 1;
/// Chunk-map value: the chunk starts a giant block, described by the
/// descriptor in the page before it (see [`create_giant`](super::create_giant)).
const CHUNK_GIANT: u8 = 2;

/// Marks the chunk at `addr` as described by its section, or clears it.
pub(super) fn mark_chunk(addr: usize, on: bool) {
    let v = if on { CHUNK_SECTION } else { 0 };
    CHUNK_MAP[addr >> CHUNK_SHIFT].store(v, Ordering::Release);
}
/// Marks the chunk at `block` as the start of a giant block, or clears it.
pub(super) fn mark_giant(block: usize, on: bool) {
    let v = if on { CHUNK_GIANT } else { 0 };
    CHUNK_MAP[block >> CHUNK_SHIFT].store(v, Ordering::Release);
}

/// Whether `addr` lies in one of our sections (the kernel's pfn_valid),
/// so that [`desc_of`] describes it. Lock-free: one load from the section
/// map. (The start of a giant block is ours too, but found through
/// [`giant_desc`].)
#[inline(always)]
pub fn is_ours(addr: usize) -> bool {
    // One shift and one bounds check cover addresses past ADDRESS_BITS.
    match CHUNK_MAP.get(addr >> CHUNK_SHIFT) {
        Some(c) => c.load(Ordering::Acquire) == CHUNK_SECTION,
        None => false,
    }
}

/// The first address past the descriptor block of the process heap's
/// first section, if that section was reserved whole
/// ([`set_primary`](super::set_primary)).
/// Written once, before [`PRIMARY_SPAN`].
static PRIMARY: AtomicUsize = AtomicUsize::new(0);
/// The bytes of that section past its descriptor block
/// ([`SECTION_SIZE`] - [`SECTION_META_BYTES`]), or 0 while there is no
/// primary section — so [`lookup`]'s window is empty then, whatever the
/// address (one compare with memory instead of an immediate).
static PRIMARY_SPAN: AtomicUsize = AtomicUsize::new(0);

/// Makes the section at `base` the primary one of [`lookup`] (see
/// `section::set_primary`, which says which section may be). The first
/// call wins; the span goes last, so a reader that sees it sees the base
/// too.
///
/// # Safety
/// As `section::set_primary`: calls are serialised (the zone lock).
pub(super) unsafe fn publish_primary(base: usize) {
    if PRIMARY_SPAN.load(Ordering::Relaxed) == 0 {
        PRIMARY.store(base + SECTION_META_BYTES, Ordering::Relaxed);
        PRIMARY_SPAN.store(SECTION_SIZE - SECTION_META_BYTES, Ordering::Release);
    }
}

/// The descriptor of the page containing `addr` if `addr` lies in one of
/// our sections (`is_ours` and `desc_of` in one): the primary section by
/// a subtraction and a compare — the descriptor then being a shift and a
/// mask of the same offset — any other through the chunk map. The free
/// path's first step: 13 instructions to the slab pointer, from 16.
#[inline(always)]
pub fn lookup(addr: usize) -> Option<*mut Page> {
    // A pointer of the primary section reached the caller after the
    // section was published (its block was handed out later); any other
    // address misses whichever values are read (a span of 0 misses all).
    let span = PRIMARY_SPAN.load(Ordering::Acquire);
    let first = PRIMARY.load(Ordering::Relaxed);
    let off = addr.wrapping_sub(first);
    if off < span {
        // Page (off + META) >> PAGE_SHIFT of the section at first - META.
        let index_bytes = (off >> PAGE_SHIFT) * PAGE_DESC_SIZE;
        let base = first - SECTION_META_BYTES + (SECTION_META_BYTES >> PAGE_SHIFT) * PAGE_DESC_SIZE;
        return Some((base + index_bytes) as *mut Page);
    }
    if is_ours(addr) {
        Some(desc_of(addr))
    } else {
        None
    }
}

/// The descriptor of the head page of the naturally aligned block of
/// `1 << order` pages that contains `addr`, if `addr` lies in one of our
/// sections: [`lookup`] for that block instead of the page (the kernel's
/// `pfn & ~((1 << order) - 1)` before `pfn_to_page`). The descriptor
/// array starts on a section boundary, so the head's descriptor is the
/// page's with its address rounded down to `PAGE_DESC_SIZE << order`
/// bytes: in the primary section one mask of the offset, folded into the
/// same shift and add as the page's (no instruction more than
/// [`lookup`], where masking the page's descriptor afterwards costs two).
/// The free path's first step: a slab is such a block, and its head
/// descriptor all a free reads.
#[inline(always)]
pub fn lookup_block(addr: usize, order: u32) -> Option<*mut Page> {
    let span = PRIMARY_SPAN.load(Ordering::Acquire);
    let first = PRIMARY.load(Ordering::Relaxed);
    let off = addr.wrapping_sub(first);
    if off < span {
        // As in `lookup`; the section's data starts on a MAX_ORDER
        // boundary, so `off` is aligned as the address is.
        let index_bytes = (off >> order_shift(order)) * (PAGE_DESC_SIZE << order);
        let base = first - SECTION_META_BYTES + (SECTION_META_BYTES >> PAGE_SHIFT) * PAGE_DESC_SIZE;
        return Some((base + index_bytes) as *mut Page);
    }
    if is_ours(addr) {
        let d = desc_of(addr) as usize;
        Some((d & !((PAGE_DESC_SIZE << order) - 1)) as *mut Page)
    } else {
        None
    }
}

/// The shift from a byte offset to a block index of `order`.
#[inline(always)]
const fn order_shift(order: u32) -> u32 {
    PAGE_SHIFT + order
}

const _: () = assert!(SECTION_META_BYTES.is_multiple_of(MAX_ORDER_BYTES));

/// The descriptor of the giant block starting at `addr`, if a giant block
/// starts there (see [`create_giant`](super::create_giant)).
#[inline]
pub fn giant_desc(addr: usize) -> Option<*mut Page> {
    if !addr.is_multiple_of(MAX_ORDER_BYTES) {
        return None;
    }
    let c = CHUNK_MAP.get(addr >> CHUNK_SHIFT)?;
    (c.load(Ordering::Acquire) == CHUNK_GIANT).then(|| (addr - PAGE_DESC_SIZE) as *mut Page)
}

/// The base of the section slot containing `addr`.
#[inline(always)]
pub fn section_base(addr: usize) -> usize {
    addr & !(SECTION_SIZE - 1)
}

/// The descriptor of the page containing `addr` (virt_to_page). Pure
/// arithmetic; meaningful only if `is_ours` holds.
#[inline(always)]
pub fn desc_of(addr: usize) -> *mut Page {
    let base = section_base(addr);
    let index = (addr >> PAGE_SHIFT) & (PAGES_PER_SECTION - 1);
    (base + index * PAGE_DESC_SIZE) as *mut Page
}
