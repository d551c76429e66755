//! Geometry: the fixed shape of pages, orders, pageblocks and sections.
//!
//! These are the kernel's constants with the kernel's names (see
//! `include/linux/mmzone.h`): `MAX` is inclusive, `NR` is a count. Runtime
//! knobs live in `page_alloc/knobs.rs` and `settings/`; nothing here changes at run time.

/// log2 of the page size. The whole design assumes 4 KiB pages; the system
/// layer checks the real page size once at start-up.
pub const PAGE_SHIFT: u32 = 12;
/// Bytes in a page.
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;

/// Largest buddy order: 2^10 pages = 4 MiB (the kernel's MAX_PAGE_ORDER).
pub const MAX_PAGE_ORDER: u32 = 10;
/// Number of buddy orders, 0..=MAX_PAGE_ORDER.
pub const NR_PAGE_ORDERS: usize = MAX_PAGE_ORDER as usize + 1;
/// Bytes in a MAX_PAGE_ORDER block: the zone's unit of growth.
pub const MAX_ORDER_BYTES: usize = PAGE_SIZE << MAX_PAGE_ORDER;
/// Pages in a MAX_PAGE_ORDER block.
pub const MAX_ORDER_PAGES: usize = 1 << MAX_PAGE_ORDER;

/// A pageblock is 2^9 pages = 2 MiB and carries one migratetype.
pub const PAGEBLOCK_ORDER: u32 = 9;
/// Pages in a pageblock.
pub const PAGEBLOCK_NR_PAGES: usize = 1 << PAGEBLOCK_ORDER;

/// Orders above this are "costly" and bypass the per-CPU lists
/// (the kernel's PAGE_ALLOC_COSTLY_ORDER).
pub const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;
/// Orders cached on per-CPU lists: 0..=PAGE_ALLOC_COSTLY_ORDER.
pub const NR_PCP_ORDERS: usize = PAGE_ALLOC_COSTLY_ORDER as usize + 1;

/// A section is a 256 MiB aligned reservation of address space.
pub const SECTION_SHIFT: u32 = 28;
/// Bytes in a section.
pub const SECTION_SIZE: usize = 1 << SECTION_SHIFT;
/// Pages in a section.
pub const PAGES_PER_SECTION: usize = SECTION_SIZE >> PAGE_SHIFT;
/// Bytes of one page descriptor (our `struct page`).
pub const PAGE_DESC_SIZE: usize = 64;
/// The descriptors of a section sit in its first bytes: exactly one
/// MAX_PAGE_ORDER block, so the rest of the section is whole buddy blocks.
pub const SECTION_META_BYTES: usize = PAGES_PER_SECTION * PAGE_DESC_SIZE;
/// MAX_PAGE_ORDER blocks a section holds for the zone (the first is metadata).
pub const SECTION_BLOCKS: usize = SECTION_SIZE / MAX_ORDER_BYTES - 1;
/// Upper bound on user-space addresses we map (x86-64 and aarch64 with 4-level
/// page tables; mmap never returns higher addresses without a hint).
pub const ADDRESS_BITS: u32 = 47;
/// MAX_ORDER blocks the address space can hold; the chunk map has one byte
/// each, in leaves of 64 GiB made where we map (see `section/map.rs`).
pub const NR_CHUNK_SLOTS: usize = 1 << (ADDRESS_BITS - MAX_PAGE_ORDER - PAGE_SHIFT);
/// Sections one process may own (1 TiB of heap).
pub const MAX_SECTIONS: usize = 4096;

/// Small objects are at most this size and live in slabs.
pub const SMALL_MAX: usize = 8 << 10;
/// Page-granular "large" allocations are at most this size (one
/// MAX_PAGE_ORDER block); anything bigger is "huge" and gets its own mmap.
pub const LARGE_MAX: usize = MAX_ORDER_BYTES;

/// The alignment `malloc` guarantees for every request (max_align_t's, as
/// glibc gives; the size classes are multiples of it). The tests check it.
#[cfg(feature = "internals")]
pub const MALLOC_ALIGN: usize = 16;

const _: () = assert!(PAGEBLOCK_ORDER <= MAX_PAGE_ORDER);
const _: () = assert!(PAGE_ALLOC_COSTLY_ORDER < PAGEBLOCK_ORDER);
const _: () = assert!(SECTION_META_BYTES == MAX_ORDER_BYTES);
const _: () = assert!(SMALL_MAX < LARGE_MAX);
