//! Huge blocks' mappings: each huge block (> 4 MiB) is one mapping of its
//! own — the block, and the one page before it that holds its header (at
//! the page's start), the large-block layer's notes on it, and its page
//! descriptor (at the page's end) — as glibc's mmap'd chunks are one
//! mapping with their header in front. The block starts on a MAX_ORDER
//! boundary (or the caller's larger alignment), so the chunk map's byte
//! for its first chunk says "a huge block starts here" and its descriptor
//! is the 64 bytes just before it: found from a pointer with no lock and
//! no table, as a section's pages are. A pointer further in reads as
//! foreign.
//!
//! The alignment costs no address space that stays: the mapping is placed
//! by reserving the block's length plus one alignment and trimming the
//! rest at once (`sys::reserve_offset`); where the address space is too
//! scarce even for that moment (`ulimit -v`), by hand, below where the
//! kernel would put it. A block costs its length and one page of address
//! space, and one line of `/proc/self/maps`.

use crate::geometry::{MAX_ORDER_BYTES, PAGE_DESC_SIZE, PAGE_SIZE};
use crate::page::Page;
use crate::sys;

use super::map;

/// A huge block's header starts with this ("pcpalloc", as a section's).
const HUGE_MAGIC: u64 = 0x7063_7061_6c6c_6f63;

/// The header of a huge block: the start of the page before it.
#[repr(C)]
struct HugeHeader {
    magic: u64,
    /// Bytes of the block (the mapping is one page more).
    len: usize,
}

/// Bytes at the start of the header page that are the header's.
const HEADER_BYTES: usize = 64;
const _: () = assert!(core::mem::size_of::<HugeHeader>() <= HEADER_BYTES);

/// Bytes of the header page left for the large-block layer's notes on the
/// block ([`huge_notes`]): between the header and the descriptor.
pub const HUGE_NOTES_BYTES: usize = PAGE_SIZE - HEADER_BYTES - PAGE_DESC_SIZE;

/// Aligned addresses tried, downwards, when placing a block by hand.
const HAND_TRIES: usize = 16;

/// The address of the huge block whose descriptor is `head`.
#[inline]
pub fn huge_block_addr(head: *const Page) -> usize {
    head as usize + PAGE_DESC_SIZE
}

/// The header of the huge block whose descriptor is `head`.
fn header(head: *const Page) -> *mut HugeHeader {
    (huge_block_addr(head) - PAGE_SIZE) as *mut HugeHeader
}

/// Creates a huge block: `len` bytes (a multiple of the page size, > 0)
/// aligned to `align` (a power of two; at least MAX_ORDER_BYTES is given),
/// read-write and reading as zero, in one mapping with its header page.
/// Marks its first chunk so [`huge_desc`](super::huge_desc) finds it.
/// Returns its descriptor (kind `None`, ours to set), or `None` if the OS
/// refuses.
pub fn create_huge(len: usize, align: usize) -> Option<*mut Page> {
    debug_assert!(len.is_multiple_of(PAGE_SIZE) && len > 0);
    debug_assert!(align.is_power_of_two());
    let total = len.checked_add(PAGE_SIZE)?;
    let start = map_block(len, align.max(MAX_ORDER_BYTES))?;
    let block = start + PAGE_SIZE;
    let h = start as *mut HugeHeader;
    // SAFETY: the header page was just mapped read-write and is ours alone
    // until the block's chunk is published below.
    unsafe {
        h.write(HugeHeader {
            magic: HUGE_MAGIC,
            len,
        })
    };
    if !map::mark_huge(block, true) {
        sys::unmap(start as *mut u8, total);
        return None;
    }
    Some((block - PAGE_DESC_SIZE) as *mut Page)
}

/// Maps `PAGE_SIZE + len` read-write bytes so that the address a page in
/// is aligned to `align`; returns the start.
fn map_block(len: usize, align: usize) -> Option<usize> {
    let total = len + PAGE_SIZE;
    if let Some(start) = sys::reserve_offset(PAGE_SIZE, len, align) {
        if sys::commit(start, total) {
            return Some(start as usize);
        }
        // Refused memory (overcommit), not address space: no other
        // placement would have it either.
        sys::unmap(start, total);
        return None;
    }
    map_block_by_hand(total, align)
}

/// When even a moment's `align` more address space is refused (`ulimit
/// -v`): asks the kernel where `total` bytes would go, and maps them at
/// the first aligned place at or below it that is free.
fn map_block_by_hand(total: usize, align: usize) -> Option<usize> {
    let probe = sys::map(total)? as usize;
    sys::unmap(probe as *mut u8, total);
    let mut block = (probe + PAGE_SIZE) & !(align - 1);
    for _ in 0..HAND_TRIES {
        if block < align {
            break;
        }
        match sys::map_at((block - PAGE_SIZE) as *mut u8, total, true) {
            Ok(()) => return Some(block - PAGE_SIZE),
            Err(sys::MapAtError::Taken) => block -= align,
            Err(sys::MapAtError::Refused) => break,
        }
    }
    None
}

/// The large-block layer's notes on the huge block whose descriptor is
/// `head`: [`HUGE_NOTES_BYTES`] bytes of its header page, 64-byte aligned,
/// zero when the block was created, moving with the block.
///
/// # Safety
/// `head` is the descriptor of a live huge block of ours; the notes are
/// used only while it is.
pub unsafe fn huge_notes(head: *const Page) -> *mut u8 {
    (huge_block_addr(head) - PAGE_SIZE + HEADER_BYTES) as *mut u8
}

/// Resizes the huge block headed by `head` to `new_len` bytes in place
/// (never moving it). False if the address space after it is taken.
///
/// # Safety
/// `head` heads a huge block of ours that the caller owns.
pub unsafe fn resize_huge(head: *mut Page, new_len: usize) -> bool {
    let h = header(head);
    // SAFETY: a live block's header (contract).
    let old = unsafe { (*h).len };
    if new_len == old {
        return true;
    }
    if !sys::resize_in_place(h.cast(), old + PAGE_SIZE, new_len + PAGE_SIZE) {
        return false;
    }
    // SAFETY: as above; the caller owns the block.
    unsafe { (*h).len = new_len };
    true
}

/// Moves the huge block headed by `head`, with its header page, to a new
/// place, resized to `new_len` bytes: its pages move (no copy) and the
/// ones past its old length are fresh. Returns its new descriptor — the
/// old one's bytes, moved — or `None` (the block then untouched) if the
/// OS refuses.
///
/// # Safety
/// `head` heads a huge block of ours that the caller owns; nothing else
/// holds its descriptor's address (it changes).
pub unsafe fn move_huge(head: *mut Page, new_len: usize) -> Option<*mut Page> {
    let old_block = huge_block_addr(head);
    let h = header(head);
    // SAFETY: a live block's header (contract).
    let old = unsafe { (*h).len };
    let to = sys::reserve_offset(PAGE_SIZE, new_len, MAX_ORDER_BYTES)?;
    let new_block = to as usize + PAGE_SIZE;
    // The new chunk's leaf first, so that marking it cannot fail once the
    // pages have moved; the old chunk cleared before they go, so that no
    // lookup reads a descriptor that is not there.
    if !map::make_leaf(new_block) {
        sys::unmap(to, new_len + PAGE_SIZE);
        return None;
    }
    let _ = map::mark_huge(old_block, false);
    if !sys::move_mapping(h.cast(), old + PAGE_SIZE, to, new_len + PAGE_SIZE) {
        sys::unmap(to, new_len + PAGE_SIZE);
        let _ = map::mark_huge(old_block, true);
        return None;
    }
    let nh = to.cast::<HugeHeader>();
    // SAFETY: the header page moved with the block and is the caller's.
    unsafe { (*nh).len = new_len };
    let _ = map::mark_huge(new_block, true);
    Some((new_block - PAGE_DESC_SIZE) as *mut Page)
}

/// Unmaps a huge block.
///
/// # Safety
/// `head` heads a huge block of ours that nobody will use again.
pub unsafe fn destroy_huge(head: *mut Page) {
    let block = huge_block_addr(head);
    let h = header(head);
    // SAFETY: a live block's header (contract).
    let (magic, len) = unsafe { ((*h).magic, (*h).len) };
    debug_assert_eq!(magic, HUGE_MAGIC);
    let _ = map::mark_huge(block, false);
    sys::unmap(h.cast(), len + PAGE_SIZE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::section::{huge_desc, is_ours};

    /// Bytes of the huge block whose descriptor is `head`.
    ///
    /// # Safety
    /// `head` is the descriptor of a live huge block of ours.
    unsafe fn huge_len(head: *const Page) -> usize {
        // SAFETY: a live block's header page is mapped (contract).
        unsafe { (*header(head)).len }
    }

    #[test]
    fn a_huge_block_is_one_mapping_found_from_its_start() {
        let len = 5 << 20;
        let head = create_huge(len, PAGE_SIZE).expect("map a huge block");
        let block = huge_block_addr(head);
        assert_eq!(block % MAX_ORDER_BYTES, 0);
        assert_eq!(huge_desc(block), Some(head));
        assert_eq!(huge_desc(block + PAGE_SIZE), None);
        assert!(!is_ours(block));
        // SAFETY: the block is ours and live.
        unsafe {
            assert_eq!(huge_len(head), len);
            (block as *mut u8).write(7);
            ((block + len - 1) as *mut u8).write(9);
            let moved = move_huge(head, len + (4 << 20)).expect("move it");
            let nb = huge_block_addr(moved);
            assert_eq!(huge_desc(nb), Some(moved));
            assert_eq!(huge_desc(block), None);
            assert_eq!((nb as *const u8).read(), 7);
            assert_eq!(((nb + len - 1) as *const u8).read(), 9);
            assert_eq!(((nb + len) as *const u8).read(), 0);
            assert_eq!(huge_len(moved), len + (4 << 20));
            destroy_huge(moved);
            assert_eq!(huge_desc(nb), None);
        }
        let aligned = create_huge(len, 1 << 30).expect("map an aligned block");
        assert_eq!(huge_block_addr(aligned) % (1 << 30), 0);
        // SAFETY: ours, unused.
        unsafe { destroy_huge(aligned) };
    }
}
