//! The map that answers "is this address ours, and what is its
//! descriptor?" (the kernel's `pfn_valid` and `virt_to_page`).
//!
//! The chunk map is one byte per 4 MiB block of the 47-bit address space,
//! in two levels as the kernel's SPARSEMEM_EXTREME keeps its
//! `mem_section` roots: a root of 2048 pointers (16 KiB of the library's
//! data), each to a leaf of 16 KiB covering 64 GiB, taken from the
//! metadata arena the first time a block in its range is marked (until
//! then the entry points at one shared leaf of zeros).
//! (One flat level would be 32 MiB of `.bss`: address space that
//! `mlockall` faults in and locks, and that counts against an unprivileged
//! process's `RLIMIT_MEMLOCK`.) A byte is set, with Release ordering, only
//! once the block is mapped and described, so "is this address ours?"
//! never says yes for memory that merely falls in one of our 256 MiB
//! slots; it is cleared when a block goes offline. In front of it, the
//! process heap's first section is answered for by one subtraction and one
//! compare ([`lookup`]).

use core::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_PAGE_ORDER, NR_CHUNK_SLOTS, PAGES_PER_SECTION, PAGE_DESC_SIZE, PAGE_SHIFT,
    SECTION_META_BYTES, SECTION_SIZE,
};
use crate::page::Page;

/// log2 of a chunk (MAX_ORDER block).
const CHUNK_SHIFT: u32 = MAX_PAGE_ORDER + PAGE_SHIFT;
/// log2 of the chunks one leaf covers (16384: 64 GiB of address space).
const LEAF_SHIFT: u32 = 14;
/// Chunks (bytes) in a leaf.
const LEAF_CHUNKS: usize = 1 << LEAF_SHIFT;
/// Leaves the address space needs.
const NR_LEAVES: usize = NR_CHUNK_SLOTS >> LEAF_SHIFT;

/// A leaf of the chunk map: one byte per chunk of 64 GiB.
type Leaf = [AtomicU8; LEAF_CHUNKS];

/// The leaf of every range where nothing was ever ours: all zero, never
/// written. The root's entries start out pointing here rather than null,
/// so a lookup needs no null test.
static NO_LEAF: Leaf = [const { AtomicU8::new(0) }; LEAF_CHUNKS];

/// The chunk map's root: for each 64 GiB of address space, its leaf —
/// [`NO_LEAF`] while nothing in that range was ever ours; replaced once
/// (Release), never freed — biased by the range's first chunk number
/// (entry `i` is `leaf - i * LEAF_CHUNKS`), so the entry plus an
/// address's chunk number points at the address's byte: a lookup is two
/// loads, no null test and no mask. One entry more than the address space
/// needs, never replaced: with a length that is not a power of two the
/// compiler keeps `is_ours`'s bounds check as one compare of the index it
/// needs anyway, instead of a second shift of the address.
static ROOT: [AtomicPtr<AtomicU8>; NR_LEAVES + 1] = unused_roots();

/// [`NO_LEAF`] biased for root entry `i`.
const fn no_leaf_for(i: usize) -> *mut AtomicU8 {
    (&raw const NO_LEAF)
        .cast::<AtomicU8>()
        .wrapping_sub(i << LEAF_SHIFT)
        .cast_mut()
}

/// Every root entry at [`NO_LEAF`], biased.
const fn unused_roots() -> [AtomicPtr<AtomicU8>; NR_LEAVES + 1] {
    let mut roots = [const { AtomicPtr::new(core::ptr::null_mut()) }; NR_LEAVES + 1];
    let mut i = 0;
    while i < roots.len() {
        roots[i] = AtomicPtr::new(no_leaf_for(i));
        i += 1;
    }
    roots
}

/// Chunk-map value: the chunk is described by its section's descriptors.
const CHUNK_SECTION: u8 = 1;
/// Chunk-map value: the chunk starts a huge block, described by the
/// descriptor in the page before it (see [`create_huge`](super::create_huge)).
const CHUNK_HUGE: u8 = 2;

/// The chunk map's byte for the chunk at `addr` (in [`NO_LEAF`] where
/// nothing was ever ours); `None` past the address space.
#[inline(always)]
fn chunk(addr: usize) -> Option<&'static AtomicU8> {
    let biased = ROOT
        .get(addr >> (CHUNK_SHIFT + LEAF_SHIFT))?
        .load(Ordering::Acquire);
    // SAFETY: the entry is its range's leaf (NO_LEAF, or zeroed metadata
    // memory that lives for the process: see `chunk_or_make`) biased by
    // the range's first chunk number, and `addr`'s chunk number lies in
    // that range: the sum points into the leaf.
    Some(unsafe { &*biased.wrapping_add(addr >> CHUNK_SHIFT) })
}

/// The chunk map's value for the chunk at `addr`, 0 past the address
/// space: [`chunk`] without an `Option`, whose null test the compiler
/// would keep on the free path.
#[inline(always)]
fn chunk_value(addr: usize) -> u8 {
    match ROOT.get(addr >> (CHUNK_SHIFT + LEAF_SHIFT)) {
        Some(root) => {
            let biased = root.load(Ordering::Acquire);
            // SAFETY: as in `chunk`.
            unsafe { (*biased.wrapping_add(addr >> CHUNK_SHIFT)).load(Ordering::Acquire) }
        }
        None => 0,
    }
}

/// The chunk map's byte for the chunk at `addr`, in a leaf of its own,
/// made first if need be (never in [`NO_LEAF`]: that one is never
/// written); `None` if `addr` is past the address space or the metadata
/// memory for a leaf is refused.
fn chunk_or_make(addr: usize) -> Option<&'static AtomicU8> {
    let i = addr >> (CHUNK_SHIFT + LEAF_SHIFT);
    let root = ROOT[..NR_LEAVES].get(i)?;
    let none = no_leaf_for(i);
    if root.load(Ordering::Acquire) == none {
        let fresh = crate::meta::alloc(core::mem::size_of::<Leaf>(), 4096).cast::<AtomicU8>();
        if fresh.is_null() {
            return None;
        }
        // Two threads making the same leaf: one wins, the other's 16 KiB
        // of (never freed) metadata memory is wasted.
        let _ = root.compare_exchange(
            none,
            fresh.wrapping_sub(i << LEAF_SHIFT),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    chunk(addr)
}

/// Marks the chunk at `addr` as described by its section, or clears it.
/// False if marking needed a leaf and its memory was refused (nothing is
/// marked then); clearing never fails.
#[must_use]
pub(super) fn mark_chunk(addr: usize, on: bool) -> bool {
    set_chunk(addr, if on { CHUNK_SECTION } else { 0 })
}

/// Marks the chunk at `block` as the start of a huge block, or clears
/// it; false as [`mark_chunk`] (never once [`make_leaf`] said yes for
/// `block`).
#[must_use]
pub(super) fn mark_huge(block: usize, on: bool) -> bool {
    set_chunk(block, if on { CHUNK_HUGE } else { 0 })
}

/// Makes the chunk map's leaf for `addr` if it has none, so that marking
/// the chunk later cannot fail. False if its memory is refused.
#[must_use]
pub(super) fn make_leaf(addr: usize) -> bool {
    chunk_or_make(addr).is_some()
}

fn set_chunk(addr: usize, v: u8) -> bool {
    if v == 0 {
        // Clearing: a chunk that was marked has its leaf, and NO_LEAF's
        // bytes are zero already (and never written).
        if let Some(c) = chunk(addr).filter(|c| c.load(Ordering::Relaxed) != 0) {
            c.store(0, Ordering::Release);
        }
        return true;
    }
    match chunk_or_make(addr) {
        Some(c) => {
            c.store(v, Ordering::Release);
            true
        }
        None => false,
    }
}

/// Whether `addr` lies in one of our sections (the kernel's pfn_valid),
/// so that [`desc_of`] describes it. Lock-free: two loads, the leaf's
/// pointer and its byte. (The start of a huge block is ours too, but
/// found through [`huge_desc`].)
#[inline(always)]
pub fn is_ours(addr: usize) -> bool {
    // One shift and one bounds check cover addresses past ADDRESS_BITS.
    chunk_value(addr) == CHUNK_SECTION
}

/// The first address past the descriptor block of the process heap's
/// first section ([`set_primary`](super::set_primary)), 0 before there is
/// one. Written once, before [`PRIMARY_SPAN`] is first made non-zero.
static PRIMARY: AtomicUsize = AtomicUsize::new(0);
/// The bytes of that section past its descriptor block that are ours for
/// good: its first blocks, as far as they run without a gap, every one
/// mapped by us (and kept mapped, inaccessible, while offline) with its
/// descriptors — 0 while there is no primary section, so [`lookup`]'s
/// window is empty then, whatever the address (one compare with memory
/// instead of an immediate). It only grows (Release): a reader with an
/// older value asks the chunk map, which knows those blocks too.
static PRIMARY_SPAN: AtomicUsize = AtomicUsize::new(0);

/// Makes the section at `base` the primary one of [`lookup`] (see
/// `section::set_primary`, which says which section may be), with no
/// window yet. The first call wins.
///
/// # Safety
/// As `section::set_primary`: calls are serialised (the zone lock).
pub(super) unsafe fn publish_primary(base: usize) {
    if PRIMARY.load(Ordering::Relaxed) == 0 {
        PRIMARY.store(base + SECTION_META_BYTES, Ordering::Relaxed);
    }
}

/// Widens the primary window to the first `blocks` blocks past the
/// descriptor block, if the section at `base` is the primary one and the
/// window is narrower.
///
/// # Safety
/// Those blocks are ours for good, as [`PRIMARY_SPAN`] says, with their
/// descriptors; calls are serialised (the zone lock).
pub(super) unsafe fn widen_primary(base: usize, blocks: usize) {
    let span = blocks * MAX_ORDER_BYTES;
    if PRIMARY.load(Ordering::Relaxed) == base + SECTION_META_BYTES
        && span > PRIMARY_SPAN.load(Ordering::Relaxed)
    {
        debug_assert!(span <= SECTION_SIZE - SECTION_META_BYTES);
        PRIMARY_SPAN.store(span, Ordering::Release);
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

/// The descriptor of the huge block starting at `addr`, if a huge block
/// starts there (see [`create_huge`](super::create_huge)): a block starts
/// on a chunk boundary, and the chunk map's byte for that chunk says so.
/// Lock-free, as [`lookup`]: two loads.
#[inline]
pub fn huge_desc(addr: usize) -> Option<*mut Page> {
    if !addr.is_multiple_of(MAX_ORDER_BYTES) {
        return None;
    }
    (chunk_value(addr) == CHUNK_HUGE).then(|| (addr - PAGE_DESC_SIZE) as *mut Page)
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
