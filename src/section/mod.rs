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
//! zone grows (*online*), and inaccessible again when the zone gives a
//! whole free block back (*offline*: the kernel's memory hot-remove). When
//! the OS refuses that much address space (`ulimit -v`), only the
//! descriptor block is mapped, at an aligned address picked by hand, and
//! each later block is mapped in place if that address is still free — a
//! block whose address something else took is *dead* for good.
//!
//! Whether an address is ours, and its descriptor, is `map.rs`'s: the
//! chunk map, and the primary section's window in front of it.
//! Sections themselves, with their descriptor blocks, are never unmapped
//! (only test zones are destroyed): a free() racing with a removal would
//! read a descriptor that no longer exists — the race of seed 003 — so
//! descriptors stay readable for the life of the process, even for blocks
//! that went offline.

use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_ORDER_PAGES, MAX_SECTIONS, PAGEBLOCK_ORDER, PAGES_PER_SECTION,
    PAGE_DESC_SIZE, PAGE_SHIFT, SECTION_BLOCKS, SECTION_META_BYTES, SECTION_SIZE,
};
use crate::page::{MigrateType, Page};
use crate::sys;

mod map;

pub use map::{desc_of, giant_desc, is_ours, lookup, lookup_block, section_base};

const SECTION_MAGIC: u64 = 0x7063_7061_6c6c_6f63; // "pcpalloc"
/// Pageblocks per section.
pub const PAGEBLOCKS_PER_SECTION: usize = SECTION_SIZE >> (PAGE_SHIFT + PAGEBLOCK_ORDER);
/// Words of a bitmap with a bit per pageblock of a section.
const COLLAPSE_WORDS: usize = PAGEBLOCKS_PER_SECTION.div_ceil(64);

/// The header of a section, stored in the descriptor slots of its own
/// metadata pages.
#[repr(C)]
pub struct SectionHeader {
    magic: u64,
    /// Slot in the global section list.
    pub slot: usize,
    /// The zone that owns the section (opaque; used for assertions).
    pub zone: AtomicUsize,
    /// MAX_ORDER blocks online — committed and managed by the zone — bit
    /// `b` for block `b`; bit 0 is the metadata block, always set. Guarded
    /// by the owning zone's lock for writing; read without it (the stats).
    pub online: AtomicU64,
    /// Blocks that can never be mapped: in a section without a
    /// reservation, another mapping took their address. Zone lock.
    pub dead: u64,
    /// The whole section was reserved up front (else blocks are mapped one
    /// by one where the address space allows).
    pub reserved: bool,
    /// Without a reservation: blocks mapped but not online yet (the first
    /// one comes with the descriptor block). Zone lock.
    pub premapped: u64,
    /// Huge sections: bytes mapped for the block (see [`create_huge`]).
    pub huge_len: usize,
    /// The migratetype of each pageblock (the kernel's pageblock_flags).
    /// Written under the zone lock; read racily by the pcp free path, as the
    /// kernel's get_pfnblock_migratetype does.
    pub pageblock_mt: [AtomicU8; PAGEBLOCKS_PER_SECTION],
    /// Pageblocks that may still be in 4 KiB pages though huge pages are
    /// asked for now (see `zone/thp.rs`), bit per pageblock of the
    /// section. Zone lock.
    pub collapse_pending: [u64; COLLAPSE_WORDS],
    /// One bit per page: the page is charged to the budget — handed out
    /// since it was last given back to the OS, so it may be resident (see
    /// `zone/budget.rs`). Zone sections only, under the zone lock.
    pub charged: [u64; PAGES_PER_SECTION / 64],
}

// The header lives in the descriptors of the metadata pages themselves,
// which describe nothing that is ever handed out.
const _: () = assert!(
    core::mem::size_of::<SectionHeader>() <= (SECTION_META_BYTES >> PAGE_SHIFT) * PAGE_DESC_SIZE
);

/// Every live section's base address (0 = free slot).
static SECTIONS: [AtomicUsize; MAX_SECTIONS] = [const { AtomicUsize::new(0) }; MAX_SECTIONS];
/// The zone tag of each slot's section, so iteration can filter without
/// touching another zone's (possibly just destroyed) header.
static SECTION_ZONE: [AtomicUsize; MAX_SECTIONS] = [const { AtomicUsize::new(0) }; MAX_SECTIONS];
/// Highest slot index ever used + 1 (bounds iteration).
static SECTIONS_HIGH: AtomicUsize = AtomicUsize::new(0);

/// The header of a giant block: the start of the page before it.
#[repr(C)]
struct GiantHeader {
    magic: u64,
    /// The reservation holding the header page and the block.
    base: usize,
    /// Bytes of the reservation.
    total: usize,
}

/// Creates a giant block: `len` bytes (a multiple of the page size)
/// aligned to `align` (a power of two ≥ a section, which no section can
/// hold: every such address is itself a section's start). The block gets a
/// reservation of its own; its descriptor sits at the end of the page
/// just before it, and its chunk is marked so [`giant_desc`] finds it.
/// Returns the descriptor (kind `None`, ours to set), or `None` if the OS
/// refuses.
pub fn create_giant(len: usize, align: usize) -> Option<*mut Page> {
    debug_assert!(align.is_power_of_two() && align >= SECTION_SIZE);
    let total = align.checked_add(len)?;
    let base = sys::reserve(total, align)? as usize;
    let block = base + align;
    let header = block - crate::geometry::PAGE_SIZE;
    if !(sys::commit(header as *mut u8, crate::geometry::PAGE_SIZE)
        && sys::commit(block as *mut u8, len))
    {
        sys::unmap(base as *mut u8, total);
        return None;
    }
    let g = header as *mut GiantHeader;
    // SAFETY: the header page was just committed and is ours alone.
    unsafe {
        g.write(GiantHeader {
            magic: SECTION_MAGIC,
            base,
            total,
        })
    };
    map::mark_giant(block, true);
    Some((block - PAGE_DESC_SIZE) as *mut Page)
}

/// Unmaps a giant block.
///
/// # Safety
/// `head` is the descriptor of a giant block of ours that nobody will use
/// again.
pub unsafe fn destroy_giant(head: *mut Page) {
    let block = head as usize + PAGE_DESC_SIZE;
    let g = (block - crate::geometry::PAGE_SIZE) as *const GiantHeader;
    // SAFETY: a live giant block's header (contract).
    let (magic, base, total) = unsafe { ((*g).magic, (*g).base, (*g).total) };
    debug_assert_eq!(magic, SECTION_MAGIC);
    map::mark_giant(block, false);
    sys::unmap(base as *mut u8, total);
}

/// Makes `h`, the process heap's first section, the one [`lookup`](map::lookup)
/// answers for with a subtraction and a compare. Only a section reserved
/// whole qualifies: every address in its span is either ours, or
/// inaccessible and never handed out, and its descriptors are readable
/// for good (they say `None` where nothing lives), so the answer needs no
/// chunk map. A section mapped block by block (`ulimit -v`) may have a
/// foreign mapping in a dead block, and is left to the chunk map.
///
/// # Safety
/// `h` is a live section header of the process heap's zone, which never
/// destroys its sections; the caller holds that zone's lock (growth is
/// serialised, so the check-then-store makes one section primary).
pub unsafe fn set_primary(h: *mut SectionHeader) {
    // SAFETY: a live header (contract); the zone lock serialises the
    // calls.
    unsafe {
        if (*h).reserved {
            map::publish_primary(h as usize);
        }
    }
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
        ptr::addr_of_mut!((*h).online).write(AtomicU64::new(1));
        ptr::addr_of_mut!((*h).dead).write(0);
        ptr::addr_of_mut!((*h).reserved).write(reserved);
        ptr::addr_of_mut!((*h).premapped).write(if reserved { 0 } else { 1 << 1 });
        ptr::addr_of_mut!((*h).collapse_pending).write([0; COLLAPSE_WORDS]);
    }
    SECTION_ZONE[slot].store(zone, Ordering::Relaxed);
    SECTIONS[slot].store(base as usize, Ordering::Release);
    // The metadata block itself is not marked: nothing handed out lives
    // there, so a pointer into it is foreign.
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
        ptr::addr_of_mut!((*h).online).write(AtomicU64::new(0));
        ptr::addr_of_mut!((*h).dead).write(0);
        ptr::addr_of_mut!((*h).reserved).write(reserved);
        ptr::addr_of_mut!((*h).premapped).write(0);
        ptr::addr_of_mut!((*h).huge_len).write(len);
    }
    let block = base as usize + offset;
    map::mark_chunk(block, true);
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
    map::mark_chunk(block, false);
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

/// The lowest block of section `h` that could go online (not online, not
/// dead), if any.
///
/// # Safety
/// `h` is a live section header owned by the caller's zone, whose lock is
/// held.
pub unsafe fn free_block_slot(h: *const SectionHeader) -> Option<usize> {
    // SAFETY: h is a live header (contract).
    let taken = unsafe { (*h).online.load(Ordering::Relaxed) | (*h).dead } | 1;
    let free = !taken & BLOCK_BITS;
    (free != 0).then(|| free.trailing_zeros() as usize)
}

/// Bits of the blocks a section holds for the zone (1..=SECTION_BLOCKS).
const BLOCK_BITS: u64 = if SECTION_BLOCKS >= 63 {
    !1
} else {
    ((1u64 << (SECTION_BLOCKS + 1)) - 1) & !1
};

/// The addresses of the online blocks of the section at `base` whose
/// online bitmap is `online`, in address order.
pub fn online_block_addrs(base: usize, online: u64) -> impl Iterator<Item = usize> {
    let mut bits = online & BLOCK_BITS;
    core::iter::from_fn(move || {
        if bits == 0 {
            return None;
        }
        let b = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        Some(base + b * MAX_ORDER_BYTES)
    })
}

/// The online bitmap of section `h` (a racy read without the zone lock:
/// a block may go online or offline meanwhile).
///
/// # Safety
/// `h` is a live section header.
pub unsafe fn online_bits(h: *const SectionHeader) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { (*h).online.load(Ordering::Relaxed) }
}

/// Brings MAX_ORDER block `block` (1..) of the section at `h` online: makes
/// it accessible and marks it ours. False if the OS refuses; in a section
/// without a reservation whose address another mapping took, the block is
/// then dead.
///
/// # Safety
/// `h` is a live section header owned by the caller's zone, whose lock is
/// held; `block` is neither online nor dead.
pub unsafe fn commit_block(h: *mut SectionHeader, block: usize) -> bool {
    let addr = h as usize + block * MAX_ORDER_BYTES;
    let bit = 1u64 << block;
    // SAFETY: h is a live header, guarded by the lock we hold (contract).
    unsafe {
        debug_assert!(((*h).online.load(Ordering::Relaxed) | (*h).dead) & bit == 0);
        let ok = if (*h).reserved {
            sys::commit(addr as *mut u8, MAX_ORDER_BYTES)
        } else if (*h).premapped & bit != 0 {
            (*h).premapped &= !bit;
            true
        } else if sys::map_fixed(addr as *mut u8, MAX_ORDER_BYTES) {
            true
        } else {
            (*h).dead |= bit;
            false
        };
        if ok {
            (*h).online.fetch_or(bit, Ordering::Relaxed);
            map::mark_chunk(addr, true);
        }
        ok
    }
}

/// Takes online block `block` of the section at `h` offline: no longer
/// ours, its memory and commit charge back to the OS. Its descriptors
/// must be `None` (they stay readable). False if the OS refused (the
/// block then stays online, untouched).
///
/// # Safety
/// `h` is a live section header owned by the caller's zone; the block is
/// online and nobody uses its memory or will until it is online again.
/// The zone lock need not be held during the call, but the block must be
/// kept from going online meanwhile (it stays online until this returns).
pub unsafe fn decommit_block(h: *mut SectionHeader, block: usize) -> bool {
    let addr = h as usize + block * MAX_ORDER_BYTES;
    // SAFETY: h is a live header (contract).
    let reserved = unsafe { (*h).reserved };
    let ok = if reserved {
        sys::decommit(addr as *mut u8, MAX_ORDER_BYTES)
    } else {
        sys::unmap(addr as *mut u8, MAX_ORDER_BYTES);
        true
    };
    if ok {
        map::mark_chunk(addr, false);
    }
    ok
}

/// Records that block `block` of `h` went offline (after a successful
/// [`decommit_block`]).
///
/// # Safety
/// As [`commit_block`]: the zone lock is held.
pub unsafe fn set_offline(h: *mut SectionHeader, block: usize) {
    // SAFETY: forwarded contract.
    unsafe { (*h).online.fetch_and(!(1u64 << block), Ordering::Relaxed) };
}

/// Unmaps a section and frees its slot and map bit.
///
/// # Safety
/// Nothing may use any address in the section or its descriptors ever
/// again. Only test zones are destroyed.
pub unsafe fn destroy(h: *mut SectionHeader) {
    let base = h as usize;
    // SAFETY: h is a live header (contract).
    let (slot, online, reserved, premapped) = unsafe {
        (
            (*h).slot,
            (*h).online.load(Ordering::Relaxed),
            (*h).reserved,
            (*h).premapped,
        )
    };
    for b in 0..64 {
        if online & (1 << b) != 0 {
            map::mark_chunk(base + b * MAX_ORDER_BYTES, false);
        }
    }
    SECTION_ZONE[slot].store(0, Ordering::Relaxed);
    SECTIONS[slot].store(1, Ordering::Release); // still claimed until unmapped
    if reserved {
        sys::unmap(base as *mut u8, SECTION_SIZE);
    } else {
        for b in 0..64 {
            if (online | premapped) & (1 << b) != 0 {
                sys::unmap((base + b * MAX_ORDER_BYTES) as *mut u8, MAX_ORDER_BYTES);
            }
        }
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
        // The metadata block is not ours to hand out; block 2 is once it
        // goes online, and again not once it goes offline.
        assert!(!is_ours(base + 12345));
        let b2 = base + 2 * MAX_ORDER_BYTES;
        assert!(!is_ours(b2 + 12345));
        // SAFETY: a test section nobody else uses (no zone lock needed).
        unsafe {
            assert_eq!(free_block_slot(h), Some(1));
            assert!(commit_block(h, 2));
            assert_eq!(free_block_slot(h), Some(1));
            assert!(is_ours(b2 + 12345));
            (b2 as *mut u8).write(7);
            assert!(decommit_block(h, 2));
            set_offline(h, 2);
            assert!(!is_ours(b2 + 12345));
            assert!(commit_block(h, 2));
            assert_eq!(
                (b2 as *const u8).read(),
                0,
                "offline memory comes back zero"
            );
            assert_eq!(online_bits(h), 1 | 1 << 2);
        }
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
        assert!(!is_ours(b2 + 12345));
    }
}
