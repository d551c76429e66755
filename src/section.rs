//! Sections: big aligned reservations of address space, each with the page
//! descriptors of all its pages, and the map that answers "is this address
//! ours, and what is its descriptor?" (the kernel's `pfn_valid` and
//! `virt_to_page`).
//!
//! A section is a 256 MiB aligned reservation. Its first MAX_ORDER block
//! (4 MiB) holds the 65536 descriptors of the section, 64 bytes each, so the
//! descriptor of page `i` is at `base + 64 * i` and no lookup table is
//! needed: address → descriptor and back are shifts and masks. The first
//! 64 KiB of that block describe the metadata pages themselves, which are
//! never handed out; the section header lives there. The remaining 63 blocks
//! are committed to the zone one MAX_ORDER block at a time as it grows.
//!
//! Address space is taken in one of two ways. Normally the whole 256 MiB is
//! reserved inaccessible up front and blocks are made accessible as the
//! zone grows. When the OS refuses that much address space (`ulimit -v`),
//! only the descriptor block is mapped, at an aligned address picked by
//! hand, and each later block is mapped in place if that address is still
//! free — the section simply ends where something else lives.
//!
//! The chunk map is one byte per 4 MiB block of the 47-bit address space
//! (32 MiB of zero-initialised memory, untouched except around our
//! sections, so it costs address space, not memory): a byte is set,
//! with Release ordering, only once the block is mapped and described, so
//! "is this address ours?" never says yes for memory that merely falls in
//! one of our 256 MiB slots. Bits are cleared only by [`destroy`] (tests).
//! Production sections are never unmapped: a free() racing with a removal
//! would read a descriptor that no longer exists — the race of seed 003 —
//! so ours simply never go away.

use core::ptr;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_ORDER_PAGES, MAX_PAGE_ORDER, MAX_SECTIONS, NR_CHUNK_SLOTS,
    PAGEBLOCK_ORDER, PAGES_PER_SECTION, PAGE_DESC_SIZE, PAGE_SHIFT, SECTION_META_BYTES,
    SECTION_SIZE,
};
use crate::page::{MigrateType, Page};
use crate::sys;

const SECTION_MAGIC: u64 = 0x7063_7061_6c6c_6f63; // "pcpalloc"
/// Pageblocks per section.
pub const PAGEBLOCKS_PER_SECTION: usize = SECTION_SIZE >> (PAGE_SHIFT + PAGEBLOCK_ORDER);

/// The header of a section, stored in the descriptor slots of its own
/// metadata pages.
#[repr(C)]
pub struct SectionHeader {
    magic: u64,
    /// Slot in the global section list.
    pub slot: usize,
    /// The zone that owns the section (opaque; used for assertions).
    pub zone: AtomicUsize,
    /// MAX_ORDER blocks of this section committed so far (block 0 is the
    /// metadata itself). Guarded by the owning zone's lock.
    pub committed_blocks: usize,
    /// The whole section was reserved up front (else blocks are mapped one
    /// by one where the address space allows).
    pub reserved: bool,
    /// Without a reservation: blocks already mapped (the first one comes
    /// with the descriptor block).
    pub mapped_blocks: usize,
    /// Huge sections: bytes mapped for the block (see [`create_huge`]).
    pub huge_len: usize,
    /// The migratetype of each pageblock (the kernel's pageblock_flags).
    /// Written under the zone lock; read racily by the pcp free path, as the
    /// kernel's get_pfnblock_migratetype does.
    pub pageblock_mt: [AtomicU8; PAGEBLOCKS_PER_SECTION],
}

const _: () = assert!(core::mem::size_of::<SectionHeader>() <= 1024 * PAGE_DESC_SIZE);

/// One byte per MAX_ORDER block of the address space.
static CHUNK_MAP: [AtomicU8; NR_CHUNK_SLOTS] = [const { AtomicU8::new(0) }; NR_CHUNK_SLOTS];
/// log2 of a chunk (MAX_ORDER block).
const CHUNK_SHIFT: u32 = MAX_PAGE_ORDER + PAGE_SHIFT;

fn mark_chunk(addr: usize, on: bool) {
    CHUNK_MAP[addr >> CHUNK_SHIFT].store(u8::from(on), Ordering::Release);
}
/// Every live section's base address (0 = free slot).
static SECTIONS: [AtomicUsize; MAX_SECTIONS] = [const { AtomicUsize::new(0) }; MAX_SECTIONS];
/// The zone tag of each slot's section, so iteration can filter without
/// touching another zone's (possibly just destroyed) header.
static SECTION_ZONE: [AtomicUsize; MAX_SECTIONS] = [const { AtomicUsize::new(0) }; MAX_SECTIONS];
/// Highest slot index ever used + 1 (bounds iteration).
static SECTIONS_HIGH: AtomicUsize = AtomicUsize::new(0);

/// The base of the section slot containing `addr`.
#[inline(always)]
pub fn section_base(addr: usize) -> usize {
    addr & !(SECTION_SIZE - 1)
}

/// Whether `addr` lies in one of our sections (the kernel's pfn_valid).
/// Lock-free: one load from the section map.
#[inline(always)]
pub fn is_ours(addr: usize) -> bool {
    // One shift and one bounds check cover addresses past ADDRESS_BITS.
    match CHUNK_MAP.get(addr >> CHUNK_SHIFT) {
        Some(c) => c.load(Ordering::Acquire) != 0,
        None => false,
    }
}

/// The descriptor of the page containing `addr` (virt_to_page). Pure
/// arithmetic; meaningful only if `is_ours` holds.
#[inline(always)]
pub fn desc_of(addr: usize) -> *mut Page {
    let base = section_base(addr);
    let index = (addr >> PAGE_SHIFT) & (PAGES_PER_SECTION - 1);
    (base + index * PAGE_DESC_SIZE) as *mut Page
}

/// The address of the page a descriptor describes (page_address).
#[inline(always)]
pub fn page_addr(desc: *const Page) -> usize {
    let d = desc as usize;
    let base = section_base(d);
    base + (d - base) * (1 << PAGE_SHIFT) / PAGE_DESC_SIZE
}

/// The header of the section containing `addr`.
#[inline]
pub fn header_of(addr: usize) -> *mut SectionHeader {
    section_base(addr) as *mut SectionHeader
}

/// The migratetype of the pageblock containing `addr`.
#[inline]
pub fn pageblock_mt(addr: usize) -> MigrateType {
    let h = header_of(addr);
    let pb = (addr - section_base(addr)) >> (PAGE_SHIFT + PAGEBLOCK_ORDER);
    // SAFETY: addr is in a live section (caller), whose header is committed
    // and initialised before the section became visible.
    let v = unsafe { (*h).pageblock_mt[pb].load(Ordering::Relaxed) };
    MigrateType::from_index(v as usize)
}

/// Sets the migratetype of the pageblock containing `addr`.
#[inline]
pub fn set_pageblock_mt(addr: usize, mt: MigrateType) {
    let h = header_of(addr);
    let pb = (addr - section_base(addr)) >> (PAGE_SHIFT + PAGEBLOCK_ORDER);
    // SAFETY: as in pageblock_mt.
    unsafe { (*h).pageblock_mt[pb].store(mt as u8, Ordering::Relaxed) };
}

/// Reserves a new section for the zone tagged `zone`: maps the address
/// range inaccessible, commits the descriptor block, writes the header and
/// publishes the section in the map. `None` if the OS refuses or all
/// section slots are taken.
pub fn create(zone: usize) -> Option<*mut SectionHeader> {
    let slot = claim_slot()?;
    let (base, reserved) = match reserve_whole() {
        Some(b) => (b, true),
        None => match map_meta_and_first_block() {
            Some(b) => (b, false),
            None => {
                SECTIONS[slot].store(0, Ordering::Release);
                return None;
            }
        },
    };
    let h = base as *mut SectionHeader;
    // SAFETY: the header area was just mapped and is ours alone until the
    // section is published below. Fresh memory is zero, so pageblock types
    // start as Unmovable; new blocks set theirs as they are committed.
    unsafe {
        ptr::addr_of_mut!((*h).magic).write(SECTION_MAGIC);
        ptr::addr_of_mut!((*h).slot).write(slot);
        (*h).zone.store(zone, Ordering::Relaxed);
        ptr::addr_of_mut!((*h).committed_blocks).write(1);
        ptr::addr_of_mut!((*h).reserved).write(reserved);
        ptr::addr_of_mut!((*h).mapped_blocks).write(if reserved { 0 } else { 2 });
    }
    SECTION_ZONE[slot].store(zone, Ordering::Relaxed);
    SECTIONS[slot].store(base as usize, Ordering::Release);
    mark_chunk(base as usize, true);
    Some(h)
}

/// Reserves a whole aligned section inaccessible and opens its descriptor
/// block.
fn reserve_whole() -> Option<*mut u8> {
    let base = sys::reserve(SECTION_SIZE, SECTION_SIZE)?;
    if !sys::commit(base, SECTION_META_BYTES) {
        sys::unmap(base, SECTION_SIZE);
        return None;
    }
    Some(base)
}

/// When the whole section cannot be reserved: maps the descriptor block
/// and the first block (so the section is usable at all) at a
/// section-aligned address picked by hand.
fn map_meta_and_first_block() -> Option<*mut u8> {
    map_aligned_by_hand(SECTION_META_BYTES + MAX_ORDER_BYTES)
}

/// The zone tag of huge sections (a zone's tag is its address, never 1).
pub const HUGE_TAG: usize = 1;

/// Creates a huge section: one block of `len` bytes (a multiple of the page
/// size) at `offset` bytes from the section's start (a multiple of
/// MAX_ORDER_BYTES, at least the descriptor area and below SECTION_SIZE,
/// so the block is aligned to `offset`'s lowest bit), in its own
/// section-aligned reservation, and returns the block's head descriptor
/// (kind `None`, ours to set). Only the block's first MAX_ORDER chunk is
/// marked ours, and only its descriptors are made readable: a pointer
/// further in is not the start of a block and reads as foreign. `None` if
/// the OS refuses.
pub fn create_huge(len: usize, offset: usize) -> Option<*mut Page> {
    debug_assert!(len.is_multiple_of(crate::geometry::PAGE_SIZE) && len > 0);
    debug_assert!(offset.is_multiple_of(MAX_ORDER_BYTES));
    debug_assert!((SECTION_META_BYTES..SECTION_SIZE).contains(&offset));
    let total = offset.checked_add(len)?;
    let (base, reserved) = match sys::reserve(total, SECTION_SIZE) {
        Some(b) => (b, true),
        None => (map_aligned_by_hand(total)?, false),
    };
    let descs = (base as usize + (offset >> PAGE_SHIFT) * PAGE_DESC_SIZE) as *mut u8;
    if reserved
        && !(sys::commit(base, crate::geometry::PAGE_SIZE)
            && sys::commit(descs, MAX_ORDER_PAGES * PAGE_DESC_SIZE)
            && sys::commit((base as usize + offset) as *mut u8, len))
    {
        sys::unmap(base, total);
        return None;
    }
    let h = base as *mut SectionHeader;
    // SAFETY: the header page was just mapped and is ours alone until the
    // block's chunk is published below.
    unsafe {
        ptr::addr_of_mut!((*h).magic).write(SECTION_MAGIC);
        ptr::addr_of_mut!((*h).slot).write(usize::MAX);
        (*h).zone.store(HUGE_TAG, Ordering::Relaxed);
        ptr::addr_of_mut!((*h).committed_blocks).write(0);
        ptr::addr_of_mut!((*h).reserved).write(reserved);
        ptr::addr_of_mut!((*h).mapped_blocks).write(0);
        ptr::addr_of_mut!((*h).huge_len).write(len);
    }
    let block = base as usize + offset;
    mark_chunk(block, true);
    Some(desc_of(block))
}

/// Resizes the huge block headed by `head` to `new_len` bytes in place
/// (never moving it). False if the address space after it is taken.
///
/// # Safety
/// `head` heads a huge block of ours that the caller owns.
pub unsafe fn resize_huge(head: *mut Page, new_len: usize) -> bool {
    let block = page_addr(head);
    let h = header_of(block);
    // SAFETY: a live huge section's header (contract).
    let old = unsafe { (*h).huge_len };
    if new_len == old {
        return true;
    }
    if !sys::resize_in_place(block as *mut u8, old, new_len) {
        return false;
    }
    // SAFETY: as above; the caller owns the section.
    unsafe { (*h).huge_len = new_len };
    true
}

/// Unmaps a huge section.
///
/// # Safety
/// `head` heads a huge block of ours that nobody will use again.
pub unsafe fn destroy_huge(head: *mut Page) {
    let block = page_addr(head);
    let base = section_base(block);
    // SAFETY: a live huge section's header (contract).
    let len = unsafe { (*header_of(block)).huge_len };
    mark_chunk(block, false);
    sys::unmap(base as *mut u8, block - base + len);
}

/// When the OS will not reserve a section-aligned range (`ulimit -v`):
/// maps `len` read-write bytes at a section-aligned address picked by hand,
/// below where the OS places mappings.
fn map_aligned_by_hand(len: usize) -> Option<*mut u8> {
    let probe = sys::map(crate::geometry::PAGE_SIZE)?;
    sys::unmap(probe, crate::geometry::PAGE_SIZE);
    let top = (probe as usize) & !(SECTION_SIZE - 1);
    let span = len.div_ceil(SECTION_SIZE);
    for k in 1..64 {
        let Some(cand) = top.checked_sub((k + span - 1) * SECTION_SIZE) else {
            break;
        };
        if cand == 0 {
            break;
        }
        if sys::map_fixed(cand as *mut u8, len) {
            return Some(cand as *mut u8);
        }
    }
    None
}

/// Takes a free slot in the section list (marking it busy with 1).
fn claim_slot() -> Option<usize> {
    for (i, s) in SECTIONS.iter().enumerate() {
        if s.load(Ordering::Relaxed) == 0
            && s.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            SECTIONS_HIGH.fetch_max(i + 1, Ordering::Relaxed);
            return Some(i);
        }
    }
    None
}

/// Commits MAX_ORDER block `block` (1..) of the section at `h`.
///
/// # Safety
/// `h` is a live section header owned by the caller's zone, whose lock is
/// held; `block` is not committed yet.
pub unsafe fn commit_block(h: *mut SectionHeader, block: usize) -> bool {
    let addr = h as usize + block * MAX_ORDER_BYTES;
    // SAFETY: h is a live header (contract).
    let (reserved, mapped) = unsafe { ((*h).reserved, (*h).mapped_blocks) };
    let ok = if reserved {
        sys::commit(addr as *mut u8, MAX_ORDER_BYTES)
    } else if block < mapped {
        true // mapped along with the descriptor block
    } else {
        sys::map_fixed(addr as *mut u8, MAX_ORDER_BYTES)
    };
    if ok {
        mark_chunk(addr, true);
    }
    ok
}

/// Unmaps a section and frees its slot and map bit.
///
/// # Safety
/// Nothing may use any address in the section or its descriptors ever
/// again. Only test zones are destroyed.
pub unsafe fn destroy(h: *mut SectionHeader) {
    let base = h as usize;
    // SAFETY: h is a live header (contract).
    let (slot, blocks, reserved, mapped) = unsafe {
        (
            (*h).slot,
            (*h).committed_blocks,
            (*h).reserved,
            (*h).mapped_blocks,
        )
    };
    for b in 0..blocks {
        mark_chunk(base + b * MAX_ORDER_BYTES, false);
    }
    SECTION_ZONE[slot].store(0, Ordering::Relaxed);
    SECTIONS[slot].store(1, Ordering::Release); // still claimed until unmapped
    if reserved {
        sys::unmap(base as *mut u8, SECTION_SIZE);
    } else {
        sys::unmap(base as *mut u8, blocks.max(mapped) * MAX_ORDER_BYTES);
    }
    SECTIONS[slot].store(0, Ordering::Release);
}

/// Calls `f` with the header of every live section of zone `zone`. Only
/// the zone's own sections are touched, so another zone destroying its
/// sections concurrently (tests) cannot fault this walk.
pub fn for_each(zone: usize, mut f: impl FnMut(*mut SectionHeader)) {
    let high = SECTIONS_HIGH.load(Ordering::Acquire);
    for (i, s) in SECTIONS[..high].iter().enumerate() {
        if SECTION_ZONE[i].load(Ordering::Relaxed) != zone {
            continue;
        }
        let base = s.load(Ordering::Acquire);
        if base > 1 {
            f(base as *mut SectionHeader);
        }
    }
}

/// Whether `h` is a well-formed header (for invariant checks).
///
/// # Safety
/// `h` is the header of a live section.
pub unsafe fn header_ok(h: *const SectionHeader) -> bool {
    // SAFETY: the caller passes the header of a live section.
    unsafe { (*h).magic == SECTION_MAGIC }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_descriptor_round_trip() {
        let h = create(0xdead).expect("reserve a section");
        let base = h as usize;
        assert_eq!(base % SECTION_SIZE, 0);
        assert!(is_ours(base + 12345));
        assert!(!is_ours(base + SECTION_SIZE));
        assert!(!is_ours(usize::MAX - 5));
        for page in [1024usize, 1025, 4096, PAGES_PER_SECTION - 1] {
            let addr = base + (page << PAGE_SHIFT);
            let d = desc_of(addr + 17);
            assert_eq!(d as usize, base + page * PAGE_DESC_SIZE);
            assert_eq!(page_addr(d), addr);
        }
        // SAFETY: h was just created and is live.
        assert!(unsafe { header_ok(h) });
        // SAFETY: nothing else uses this test section.
        unsafe { destroy(h) };
        assert!(!is_ours(base + 12345));
    }
}
