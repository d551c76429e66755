//! Sections: big aligned ranges of address space, each with the page
//! descriptors of all its pages, and the map that answers "is this address
//! ours, and what is its descriptor?" (the kernel's `pfn_valid` and
//! `virt_to_page`).
//!
//! A section is a 256 MiB aligned range. Its first MAX_ORDER block (4 MiB)
//! holds the 65536 descriptors of the section, 64 bytes each, so the
//! descriptor of page `i` is at `base + 64 * i` and no lookup table is
//! needed: address → descriptor and back are shifts and masks. The first
//! 64 KiB of that block describe the metadata pages themselves, which are
//! never handed out; the section header lives there. The remaining 63
//! blocks go to the zone one MAX_ORDER block at a time as it grows
//! (*online*), and back when the zone gives a whole free block back
//! (*offline*: the kernel's memory hot-remove).
//!
//! A section holds only the address space it has used, as the kernel's
//! sparse memory model populates only the sections that have memory: the
//! header, then each block — with its 64 KiB of descriptors — mapped when
//! it first goes online, and kept, inaccessible, while it is offline. A
//! small program's heap is its header and one block (4.1 MiB of address
//! space, not 256 MiB), so `mlockall` by an unprivileged process fits the
//! default `RLIMIT_MEMLOCK` (the kernel weighs all of a process's mappings
//! against it) as under glibc. So that the rest of a section stays free
//! for it, sections are placed far below where the kernel puts mappings
//! (`place`): the kernel hands out address space from the top down, the
//! highest hole that fits first, and reaches a section's holes only once
//! everything above them is taken. A block whose address something else
//! took anyway is *dead* for good. Where the OS will not have a section
//! there, the whole 256 MiB is reserved inaccessible where it puts it,
//! as before (`whole`).
//!
//! Whether an address is ours, and its descriptor, is `map.rs`'s: the
//! chunk map, and the primary section's window in front of it.
//! Sections themselves, with their descriptors, are never unmapped
//! (only test zones are destroyed): a free() racing with a removal would
//! read a descriptor that no longer exists — the race of seed 003 — so
//! descriptors stay readable for the life of the process, even for blocks
//! that went offline.
//!
//! Huge blocks (> 4 MiB, outside the zone) are no section's: each is one
//! mapping of its own, its length and one page before it for its header
//! and descriptor, found through the chunk map's byte for its first chunk
//! (`huge.rs`).

use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_ORDER_PAGES, PAGEBLOCK_ORDER, PAGES_PER_SECTION, PAGE_DESC_SIZE,
    PAGE_SHIFT, SECTION_BLOCKS, SECTION_META_BYTES, SECTION_SIZE,
};
use crate::page::{MigrateType, Page};
use crate::sys;

mod huge;
mod list;
mod map;
mod place;

use list::{claim_slot, list};
use place::{place, reserve_whole};

pub use huge::{
    create_huge, destroy_huge, huge_block_addr, huge_notes, move_huge, resize_huge,
    HUGE_NOTES_BYTES,
};
pub use map::{desc_of, huge_desc, is_ours, lookup, lookup_block, section_base};

const SECTION_MAGIC: u64 = 0x7063_7061_6c6c_6f63; // "pcpalloc"
/// Pageblocks per section.
pub(crate) const PAGEBLOCKS_PER_SECTION: usize = SECTION_SIZE >> (PAGE_SHIFT + PAGEBLOCK_ORDER);
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
    /// Blocks that can never be mapped: another mapping took their
    /// address, or their descriptors'. Zone lock.
    pub dead: u64,
    /// The whole section was reserved at once, where the OS put it: every
    /// block is held and every descriptor mapped from the start.
    pub whole: bool,
    /// Blocks whose address space the section holds: mapped by us when
    /// they first went online, accessible while online, inaccessible (and
    /// still held) while offline. Only grows. Zone lock.
    pub held: u64,
    /// Blocks whose descriptors are mapped (bit 0: the header's). Only
    /// grows: descriptors stay readable for good. Zone lock.
    pub described: u64,
    /// The migratetype of each pageblock (the kernel's pageblock_flags).
    /// Written under the zone lock; read racily by the pcp free path, as the
    /// kernel's get_pfnblock_migratetype does.
    pub pageblock_mt: [AtomicU8; PAGEBLOCKS_PER_SECTION],
    /// Pageblocks that may still be in 4 KiB pages though huge pages are
    /// asked for now (see `zone/thp.rs`), bit per pageblock of the
    /// section. Zone lock.
    pub collapse_pending: [u64; COLLAPSE_WORDS],
    /// Pageblocks whose huge-page advice was taken back when part of them
    /// went back to the OS (see `zone/thp.rs`), bit per pageblock of the
    /// section. Zone lock.
    pub unadvised: [u64; COLLAPSE_WORDS],
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

/// Makes `h`, the process heap's first section, the one [`lookup`](map::lookup)
/// answers for with a subtraction and a compare: over its first blocks,
/// as far as they run held without a gap (every address there is ours,
/// online or held inaccessible, never another mapping's, and its
/// descriptors are readable for good: they say `None` where nothing
/// lives), so the answer needs no chunk map. The window widens as blocks
/// go online ([`commit_block`]); a block past a dead one is left to the
/// chunk map.
///
/// # Safety
/// `h` is a live section header of the process heap's zone, which never
/// destroys its sections; the caller holds that zone's lock (growth is
/// serialised, so the check-then-store makes one section primary).
pub(crate) unsafe fn set_primary(h: *mut SectionHeader) {
    // SAFETY: a live header (contract); the zone lock serialises the
    // calls.
    unsafe {
        map::publish_primary(h as usize);
        map::widen_primary(h as usize, held_prefix(h));
    }
}

/// Blocks from block 1 on that the section holds, without a gap.
///
/// # Safety
/// `h` is a live section header; the caller holds its zone's lock.
unsafe fn held_prefix(h: *const SectionHeader) -> usize {
    // SAFETY: forwarded contract.
    let held = unsafe { (*h).held };
    ((held & BLOCK_BITS) >> 1).trailing_ones() as usize
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
pub(crate) fn header_of(addr: usize) -> *mut SectionHeader {
    section_base(addr) as *mut SectionHeader
}

/// The migratetype of the pageblock containing `addr`.
#[inline]
pub(crate) fn pageblock_mt(addr: usize) -> MigrateType {
    let h = header_of(addr);
    let pb = (addr - section_base(addr)) >> (PAGE_SHIFT + PAGEBLOCK_ORDER);
    // SAFETY: addr is in a live section (caller), whose header is committed
    // and initialised before the section became visible.
    let v = unsafe { (*h).pageblock_mt[pb].load(Ordering::Relaxed) };
    MigrateType::from_index(v as usize)
}

/// Sets the migratetype of the pageblock containing `addr`.
#[inline]
pub(crate) fn set_pageblock_mt(addr: usize, mt: MigrateType) {
    let h = header_of(addr);
    let pb = (addr - section_base(addr)) >> (PAGE_SHIFT + PAGEBLOCK_ORDER);
    // SAFETY: as in pageblock_mt.
    unsafe { (*h).pageblock_mt[pb].store(mt as u8, Ordering::Relaxed) };
}

/// Bytes of descriptors of one MAX_ORDER block (64 KiB); the header
/// lives in block 0's.
const BLOCK_DESC_BYTES: usize = MAX_ORDER_PAGES * PAGE_DESC_SIZE;

/// Makes a new section for the zone tagged `zone`: takes its address range
/// where sections go (see `place`), maps the header, writes it and
/// publishes the section in the list; its blocks are mapped as they go
/// online. `None` if the OS refuses or all section slots are taken.
pub(crate) fn create(zone: usize) -> Option<*mut SectionHeader> {
    let (list, slot) = claim_slot()?;
    let (base, whole) = match place(BLOCK_DESC_BYTES) {
        Some(b) => (b, false),
        None => match reserve_whole() {
            Some(b) => (b, true),
            None => {
                list.base[slot].store(0, Ordering::Release);
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
        ptr::addr_of_mut!((*h).whole).write(whole);
        ptr::addr_of_mut!((*h).held).write(if whole { BLOCK_BITS } else { 0 });
        ptr::addr_of_mut!((*h).described).write(if whole { BLOCK_BITS | 1 } else { 1 });
        ptr::addr_of_mut!((*h).collapse_pending).write([0; COLLAPSE_WORDS]);
        ptr::addr_of_mut!((*h).unadvised).write([0; COLLAPSE_WORDS]);
    }
    list.zone[slot].store(zone, Ordering::Relaxed);
    list.base[slot].store(base as usize, Ordering::Release);
    // The metadata block itself is not marked: nothing handed out lives
    // there, so a pointer into it is foreign.
    Some(h)
}

/// The lowest block of section `h` that could go online (not online, not
/// dead), if any.
///
/// # Safety
/// `h` is a live section header owned by the caller's zone, whose lock is
/// held.
pub(crate) unsafe fn free_block_slot(h: *const SectionHeader) -> Option<usize> {
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
pub(crate) fn online_block_addrs(base: usize, online: u64) -> impl Iterator<Item = usize> {
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
pub(crate) unsafe fn online_bits(h: *const SectionHeader) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { (*h).online.load(Ordering::Relaxed) }
}

/// Brings MAX_ORDER block `block` (1..) of the section at `h` online: makes
/// it accessible — mapping it, and its descriptors, the first time — and
/// marks it ours. False if the OS refuses; if another mapping took the
/// block's address (or its descriptors'), the block is then dead (see
/// [`is_dead`]).
///
/// # Safety
/// `h` is a live section header owned by the caller's zone, whose lock is
/// held; `block` is neither online nor dead.
pub(crate) unsafe fn commit_block(h: *mut SectionHeader, block: usize) -> bool {
    let addr = h as usize + block * MAX_ORDER_BYTES;
    let bit = 1u64 << block;
    // SAFETY: h is a live header, guarded by the lock we hold (contract).
    unsafe {
        debug_assert!(((*h).online.load(Ordering::Relaxed) | (*h).dead) & bit == 0);
        if (*h).held & bit != 0 {
            if !sys::commit(addr as *mut u8, MAX_ORDER_BYTES) {
                return false;
            }
        } else {
            let descs = h as usize + block * BLOCK_DESC_BYTES;
            let mapped = if (*h).described & bit != 0 {
                Ok(())
            } else {
                sys::map_at(descs as *mut u8, BLOCK_DESC_BYTES, true)
                    .inspect(|()| (*h).described |= bit)
            }
            .and_then(|()| sys::map_at(addr as *mut u8, MAX_ORDER_BYTES, true));
            match mapped {
                Ok(()) => (*h).held |= bit,
                Err(sys::MapAtError::Taken) => {
                    (*h).dead |= bit;
                    return false;
                }
                Err(sys::MapAtError::Refused) => return false,
            }
        }
        if !map::mark_chunk(addr, true) {
            // No memory for the chunk map's leaf: the block stays held,
            // inaccessible, and offline.
            sys::decommit(addr as *mut u8, MAX_ORDER_BYTES);
            return false;
        }
        (*h).online.fetch_or(bit, Ordering::Relaxed);
        map::widen_primary(h as usize, held_prefix(h));
        true
    }
}

/// Whether block `block` of the section at `h` is dead: another mapping
/// took its address, and it can never go online.
///
/// # Safety
/// `h` is a live section header owned by the caller's zone, whose lock is
/// held.
pub(crate) unsafe fn is_dead(h: *const SectionHeader, block: usize) -> bool {
    // SAFETY: forwarded contract.
    unsafe { (*h).dead & (1u64 << block) != 0 }
}

/// Takes online block `block` of the section at `h` offline: no longer
/// ours, its memory and commit charge back to the OS; the section keeps
/// its address space, inaccessible. Its descriptors must be `None` (they
/// stay readable). False if the OS refused (the block then stays online,
/// untouched).
///
/// # Safety
/// `h` is a live section header owned by the caller's zone; the block is
/// online and nobody uses its memory or will until it is online again.
/// The zone lock need not be held during the call, but the block must be
/// kept from going online meanwhile (it stays online until this returns).
pub(crate) unsafe fn decommit_block(h: *mut SectionHeader, block: usize) -> bool {
    let addr = h as usize + block * MAX_ORDER_BYTES;
    let ok = sys::decommit(addr as *mut u8, MAX_ORDER_BYTES);
    if ok {
        let _ = map::mark_chunk(addr, false);
    }
    ok
}

/// Records that block `block` of `h` went offline (after a successful
/// [`decommit_block`]).
///
/// # Safety
/// As [`commit_block`]: the zone lock is held.
pub(crate) unsafe fn set_offline(h: *mut SectionHeader, block: usize) {
    // SAFETY: forwarded contract.
    unsafe { (*h).online.fetch_and(!(1u64 << block), Ordering::Relaxed) };
}

/// Unmaps a section and frees its slot and map bit.
///
/// # Safety
/// Nothing may use any address in the section or its descriptors ever
/// again. Only test zones are destroyed.
pub(crate) unsafe fn destroy(h: *mut SectionHeader) {
    let base = h as usize;
    // SAFETY: h is a live header (contract).
    let (slot, online, whole, held, described) = unsafe {
        (
            (*h).slot,
            (*h).online.load(Ordering::Relaxed),
            (*h).whole,
            (*h).held,
            (*h).described,
        )
    };
    for b in 0..64 {
        if online & (1 << b) != 0 {
            let _ = map::mark_chunk(base + b * MAX_ORDER_BYTES, false);
        }
    }
    let Some(list) = list() else {
        return; // no section was ever made: h is not one
    };
    list.zone[slot].store(0, Ordering::Relaxed);
    list.base[slot].store(1, Ordering::Release); // still claimed until unmapped
    if whole {
        sys::unmap(base as *mut u8, SECTION_SIZE);
    } else {
        // Only what the section mapped: a dead block's address is
        // someone else's.
        for b in (0..64).rev() {
            if held & (1 << b) != 0 {
                sys::unmap((base + b * MAX_ORDER_BYTES) as *mut u8, MAX_ORDER_BYTES);
            }
            if described & (1 << b) != 0 {
                sys::unmap((base + b * BLOCK_DESC_BYTES) as *mut u8, BLOCK_DESC_BYTES);
            }
        }
    }
    list.base[slot].store(0, Ordering::Release);
}

/// Calls `f` with the header of every live section of zone `zone`. Only
/// the zone's own sections are touched, so another zone destroying its
/// sections concurrently (tests) cannot fault this walk.
pub(crate) fn for_each(zone: usize, mut f: impl FnMut(*mut SectionHeader)) {
    list::for_each_base(zone, |base| f(base as *mut SectionHeader));
}

/// Whether `h` is a well-formed header (for invariant checks).
///
/// # Safety
/// `h` is the header of a live section.
pub(crate) unsafe fn header_ok(h: *const SectionHeader) -> bool {
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
