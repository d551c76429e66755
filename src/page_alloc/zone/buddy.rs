//! The buddy allocator proper: `free_area[order][migratetype]`, split
//! (`expand`) on allocation and merge with the buddy on free.
//!
//! A free block of order `o` starts at an address aligned to `4 KiB << o`;
//! its buddy is the block at `addr ^ (4 KiB << o)`. Freeing merges with the
//! buddy while the buddy is itself a free block of the same order, up to
//! MAX_PAGE_ORDER, exactly as the essay above the kernel's
//! `__free_one_page` describes. Blocks never cross a MAX_ORDER block, and a
//! section commits whole MAX_ORDER blocks, so a buddy is always committed.
//!
//! Everything here runs under the zone lock: the functions take
//! `&mut ZoneInner`, which only the lock guard hands out.

use crate::geometry::{
    MAX_PAGE_ORDER, NR_PAGE_ORDERS, PAGEBLOCK_NR_PAGES, PAGEBLOCK_ORDER, PAGE_SIZE,
};
use crate::page::{flags, MigrateType, Page, PageKind, PageList, MIGRATE_TYPES};
use crate::section::{desc_of, page_addr, SectionHeader};

/// Event counters of a zone, written under the zone lock. Names follow
/// /proc/vmstat and the mm_page_alloc_extfrag tracepoint.
#[derive(Clone, Copy, Default, Debug)]
pub struct ZoneCounters {
    /// Pages handed out by the buddy allocator (directly or to pagesets).
    pub pgalloc: u64,
    /// Pages given back to the buddy allocator.
    pub pgfree: u64,
    /// Allocations that found no memory even after growing (at the limit).
    pub alloc_fail: u64,
    /// Times the zone mapped more memory.
    pub grow_events: u64,
    /// Pages added by growth.
    pub grow_pages: u64,
    /// Fallback allocations (extfrag events).
    pub extfrag_fallback: u64,
    /// Fallbacks that split a block smaller than a pageblock, per requested
    /// migratetype ("Extfrag fragmenting for unmovable", ...).
    pub extfrag_fragmenting: [u64; MIGRATE_TYPES],
    /// Fragmenting fallbacks of each requested type that were placed in a
    /// MOVABLE pageblock ("unmovable placed with movable").
    pub extfrag_in_movable: [u64; MIGRATE_TYPES],
    /// Fallbacks that took over (claimed) the pageblock for the requester.
    pub pageblock_claims: u64,
    /// Bytes given back to the OS with madvise.
    pub released_bytes: u64,
    /// Blocks given back to the OS.
    pub release_events: u64,
    /// Frees that found the resident free memory past the dirty limit and
    /// looked for pageblocks to give back (`dirty.rs`).
    pub balance_dirty: u64,
    /// Bytes those gave back (part of `released_bytes`).
    pub balance_dirty_bytes: u64,
    /// Times ZONE_BELOW_HIGH was set.
    pub below_high_set: u64,
    /// Times ZONE_BELOW_HIGH was cleared.
    pub below_high_clear: u64,
    /// Times all pagesets were drained to satisfy an allocation.
    pub drain_all: u64,
    /// Times the pagesets' large lists were drained because an exact
    /// block fit nowhere in the free lists, before the zone grew.
    pub drain_before_grow: u64,
    /// Allocations refused because the budget could not take the pages
    /// of a free block (at a user-set limit).
    pub charge_fail: u64,
    /// Exact blocks carved from a run of adjacent free blocks (instead of
    /// growing for want of a block of the order).
    pub exact_runs: u64,
    /// Times whole free MAX_ORDER blocks went offline.
    pub shrink_events: u64,
    /// Pages taken offline.
    pub shrink_pages: u64,
    /// Most pages moved between a pageset and the zone in one lock hold
    /// (refill or bulk free) since this was last reset: what
    /// BATCH_SCALE_MAX bounds.
    pub bulk_max: u64,
}

/// The state behind the zone lock.
///
/// Invariants (checked by `Zone::check_invariants`):
/// - every block on `free_area[o][mt]` is a `Buddy` head of order `o` with
///   `migratetype == mt`, aligned to its size, inside committed memory;
/// - `nr_free[o]` = blocks on all lists of order `o`;
///   `free` = Σ nr_free[o] << o; `clean_free` = pages of CLEAN free blocks;
/// - no free block has a free buddy of the same order (merging is maximal),
///   except at MAX_PAGE_ORDER;
/// - free blocks of pageblock order or more lie in pageblocks whose type is
///   their list's migratetype;
/// - `managed` = free + isolated + pages in pagesets + pages handed out;
/// - on each list the CLEAN blocks come last, from `clean_from`.
pub struct ZoneInner {
    /// Free blocks per order and migratetype.
    pub free_area: [[PageList; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    /// The first CLEAN block of each list (null: none); every block after
    /// it is CLEAN too, every block before it is not. A release looks for
    /// resident blocks from the one before it towards the front, and so
    /// never walks the blocks it gave back before (a storm's give-backs
    /// walked past 950,000 of them, a cache miss each under the lock).
    clean_from: [[*mut Page; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    /// Free blocks per order (all migratetypes).
    pub nr_free: [usize; NR_PAGE_ORDERS],
    /// Free pages.
    pub free: usize,
    /// Free pages whose memory is not resident (fresh or released).
    pub clean_free: usize,
    /// Pages the zone manages (committed MAX_ORDER blocks × 1024).
    pub managed: usize,
    /// Pages temporarily isolated (being released to the OS).
    pub isolated: usize,
    /// Pages charged to the budget (see `charge.rs`).
    pub charged: usize,
    /// Maintenance epoch (ticks); stamps when a free block became free.
    pub epoch: u32,
    /// The section that still has uncommitted blocks, or null.
    pub grow_section: *mut SectionHeader,
    /// Under THP `dense` once on: a pageblock claimed for long-lived small
    /// objects (unmovable) is advised for a huge page as it is claimed, and
    /// advised back when claimed for anything else (`thp.rs`).
    pub thp_claims: bool,
    /// Event counters.
    pub c: ZoneCounters,
}

// SAFETY: the raw pointers inside are descriptors and section headers that
// only the zone-lock holder dereferences.
unsafe impl Send for ZoneInner {}

impl ZoneInner {
    /// An empty zone state.
    pub const fn new() -> ZoneInner {
        ZoneInner {
            free_area: [const { [const { PageList::new() }; MIGRATE_TYPES] }; NR_PAGE_ORDERS],
            clean_from: [[core::ptr::null_mut(); MIGRATE_TYPES]; NR_PAGE_ORDERS],
            nr_free: [0; NR_PAGE_ORDERS],
            free: 0,
            clean_free: 0,
            managed: 0,
            isolated: 0,
            charged: 0,
            epoch: 0,
            grow_section: core::ptr::null_mut(),
            thp_claims: false,
            c: ZoneCounters {
                pgalloc: 0,
                pgfree: 0,
                alloc_fail: 0,
                grow_events: 0,
                grow_pages: 0,
                extfrag_fallback: 0,
                extfrag_fragmenting: [0; MIGRATE_TYPES],
                extfrag_in_movable: [0; MIGRATE_TYPES],
                pageblock_claims: 0,
                released_bytes: 0,
                release_events: 0,
                balance_dirty: 0,
                balance_dirty_bytes: 0,
                below_high_set: 0,
                below_high_clear: 0,
                drain_all: 0,
                drain_before_grow: 0,
                charge_fail: 0,
                exact_runs: 0,
                shrink_events: 0,
                shrink_pages: 0,
                bulk_max: 0,
            },
        }
    }

    /// Puts block `head` of `order` on `free_area[order][mt]` and accounts
    /// for it: at the front, or, for a block that should be used last, at
    /// the back of the blocks that are not clean; a clean block at the
    /// back.
    ///
    /// # Safety
    /// `head` is the descriptor of a block of this zone that is on no list
    /// and whose non-head descriptors are all `None`.
    pub unsafe fn add_free(
        &mut self,
        head: *mut Page,
        order: u32,
        mt: MigrateType,
        clean: bool,
        back: bool,
    ) {
        // SAFETY: head is a valid descriptor we own (contract).
        unsafe {
            (*head).set_kind(PageKind::Buddy);
            (*head).order = order as u8;
            (*head).migratetype = mt as u8;
            (*head).flags = if clean { flags::CLEAN } else { 0 };
            (*head).free_epoch = self.epoch;
            (*head)
                .head
                .store(core::ptr::null_mut(), core::sync::atomic::Ordering::Relaxed);
            let list = &mut self.free_area[order as usize][mt as usize];
            let from = &mut self.clean_from[order as usize][mt as usize];
            // Memory that is not resident goes last: the next allocation
            // takes resident (and already charged) memory first, which
            // faults nothing in and needs no room in the budget.
            if clean {
                list.push_back(head);
                if from.is_null() {
                    *from = head;
                }
            } else if !back {
                list.push_front(head);
            } else if from.is_null() {
                list.push_back(head);
            } else {
                list.insert_before(*from, head);
            }
        }
        self.nr_free[order as usize] += 1;
        self.free += 1 << order;
        if clean {
            self.clean_free += 1 << order;
        }
    }

    /// The last block of `free_area[order][mt]` that is not clean (the
    /// coldest that may be resident), or null.
    #[inline]
    pub fn last_not_clean(&self, order: usize, mt: usize) -> *mut Page {
        let from = self.clean_from[order][mt];
        if from.is_null() {
            self.free_area[order][mt].last()
        } else {
            // SAFETY: `from` is on that list (invariant); lock held.
            unsafe { self.free_area[order][mt].prev_of(from) }
        }
    }

    /// The first clean block of `free_area[order][mt]`, or null.
    #[inline]
    pub fn first_clean(&self, order: usize, mt: usize) -> *mut Page {
        self.clean_from[order][mt]
    }

    /// Free pages that are charged — resident, or may be (exact but for
    /// isolated blocks, counted as charged while they are given back).
    #[inline]
    pub fn dirty_free(&self) -> usize {
        self.charged.saturating_sub(self.managed - self.free)
    }

    /// Takes free block `head` off its list and out of the free counts. Its
    /// descriptor keeps order, migratetype and flags.
    ///
    /// # Safety
    /// `head` is on one of this zone's free lists.
    pub unsafe fn del_free(&mut self, head: *mut Page) {
        // SAFETY: head is a free block on our lists (contract).
        unsafe {
            let order = (*head).order as usize;
            let mt = (*head).migratetype as usize;
            if self.clean_from[order][mt] == head {
                self.clean_from[order][mt] = (*head).next;
            }
            self.free_area[order][mt].remove(head);
            self.nr_free[order] -= 1;
            self.free -= 1 << order;
            if (*head).flags & flags::CLEAN != 0 {
                self.clean_free -= 1 << order;
            }
        }
    }

    /// Frees block `head` of `order` onto the `mt` lists, merging with free
    /// buddies (the kernel's `__free_one_page`). Whether the memory is clean
    /// is read from `head`'s CLEAN flag; the result is clean only if every
    /// merged part was.
    ///
    /// # Safety
    /// `head` heads a block of this zone of `order` that nobody else uses
    /// and that is on no list; its non-head descriptors are `None`.
    pub unsafe fn free_one_page(&mut self, head: *mut Page, order: u32, mt: MigrateType) {
        let mut addr = page_addr(head);
        let mut order = order;
        // SAFETY: head is ours (contract).
        let mut clean = unsafe { (*head).flags & flags::CLEAN != 0 };
        // SAFETY: head is ours; it becomes a tail if it merges downwards.
        unsafe { (*head).reset() };
        while order < MAX_PAGE_ORDER {
            let buddy_addr = addr ^ (PAGE_SIZE << order);
            let buddy = desc_of(buddy_addr);
            // SAFETY: the buddy lies in the same committed MAX_ORDER block,
            // so its descriptor is valid; we hold the zone lock.
            unsafe {
                if (*buddy).kind() != PageKind::Buddy || u32::from((*buddy).order) != order {
                    break;
                }
                if order >= PAGEBLOCK_ORDER && (*buddy).mt() != mt {
                    // Match the buddy's pageblocks to the merged block's
                    // type, so a later split puts halves on the right lists.
                    let pbs = 1usize << (order - PAGEBLOCK_ORDER);
                    for i in 0..pbs {
                        self.set_pageblock_type(
                            buddy_addr + i * PAGEBLOCK_NR_PAGES * PAGE_SIZE,
                            mt,
                        );
                    }
                }
                clean &= (*buddy).flags & flags::CLEAN != 0;
                self.del_free(buddy);
                (*buddy).reset();
            }
            addr = addr.min(buddy_addr);
            order += 1;
        }
        // buddy_merge_likely (mm/page_alloc.c): when the buddy of the block
        // this one would merge into is free, this block's own buddy is
        // likely to be freed soon too — keep it at the tail, least likely to
        // be split again before it merges.
        let to_tail = order < MAX_PAGE_ORDER - 1 && {
            let parent = addr & !((PAGE_SIZE << (order + 1)) - 1);
            let higher_buddy = desc_of(parent ^ (PAGE_SIZE << (order + 1)));
            // SAFETY: within the same MAX_ORDER block (order + 1 < MAX), so
            // the descriptor is committed; lock held.
            unsafe {
                (*higher_buddy).kind() == PageKind::Buddy
                    && u32::from((*higher_buddy).order) == order + 1
            }
        };
        // SAFETY: addr heads the merged block, all of whose other
        // descriptors were reset above or were tails already.
        unsafe { self.add_free(desc_of(addr), order, mt, clean, to_tail) };
    }

    /// Splits the block at `addr` of `high` order down to `low`, putting the
    /// upper halves on the `mt` lists (the kernel's `expand`).
    ///
    /// # Safety
    /// `[addr, addr + PAGE_SIZE << high)` is a block of this zone just taken
    /// off the free lists.
    pub unsafe fn expand(
        &mut self,
        addr: usize,
        low: u32,
        mut high: u32,
        mt: MigrateType,
        clean: bool,
    ) {
        while high > low {
            high -= 1;
            let half = addr + (PAGE_SIZE << high);
            // SAFETY: half is the upper half of a block we own; its
            // descriptor is a tail (None) until now.
            unsafe { self.add_free(desc_of(half), high, mt, clean, false) };
        }
    }

    /// Takes the smallest free block of at least `order` from the `mt`
    /// lists and splits it to `order` (`__rmqueue_smallest`). Returns the
    /// head, off every list, kind `None`, with `order` set and CLEAN kept.
    ///
    /// From a list of order [`LOWEST_ADDRESS_MIN_ORDER`] or more (whatever
    /// the request's order: a small request that splits a large block
    /// takes the lowest-addressed too), the block taken is the
    /// lowest-addressed of the first [`LOWEST_ADDRESS_SCAN`] on the list
    /// that are as resident as the first (see [`lowest_address`]).
    pub fn rmqueue_smallest(&mut self, order: u32, mt: MigrateType) -> *mut Page {
        for current in order..=MAX_PAGE_ORDER {
            let list = &self.free_area[current as usize][mt as usize];
            let head = if current >= LOWEST_ADDRESS_MIN_ORDER {
                lowest_address(list)
            } else {
                list.first()
            };
            if head.is_null() {
                continue;
            }
            // SAFETY: head is on our free list; we hold the zone lock.
            unsafe {
                let clean = (*head).flags & flags::CLEAN != 0;
                self.del_free(head);
                self.expand(page_addr(head), order, current, mt, clean);
                take_block(head, order, clean);
            }
            return head;
        }
        core::ptr::null_mut()
    }
}

/// Orders (64 KiB and up: the page-granular blocks of malloc) whose
/// requests take the lowest-addressed of the blocks at the front of their
/// list rather than the first.
pub const LOWEST_ADDRESS_MIN_ORDER: u32 = 4;
/// How many blocks [`lowest_address`] looks at.
pub const LOWEST_ADDRESS_SCAN: usize = 16;

/// The lowest-addressed of the first [`LOWEST_ADDRESS_SCAN`] blocks of
/// `list` that are resident if its first is, up to the first that is not
/// (clean blocks go to the tail, behind the resident ones, and so do
/// resident blocks likely to merge: see [`ZoneInner::add_free`] and
/// `buddy_merge_likely` in `free_one_page`); null if the list is empty.
///
/// A LIFO list hands out the block freed last wherever it lies, so live
/// blocks spread over the whole heap and the free memory between them
/// stays in pieces. Taking the lowest address, as address-ordered first
/// fit does (jemalloc's extents, glibc's bins by address within a size),
/// packs the live blocks low and lets the high end stay free long enough
/// to merge and go back to the OS whole. With the run search's own
/// lowest-address choice (`exact.rs`), on the page band's second half
/// (16 KiB – 4 MiB): a fifth fewer page faults at the same peak RSS
/// (130k → 105k, dirty ratio 90 → 80, 15 interleaved rounds).
pub fn lowest_address(list: &PageList) -> *mut Page {
    let first = list.first();
    if first.is_null() {
        return first;
    }
    // SAFETY: the list's elements are free blocks of the zone, whose lock
    // the caller holds (only the lock guard hands out the lists).
    unsafe {
        let clean = (*first).flags & flags::CLEAN;
        let mut best = first;
        let mut p = (*first).next;
        for _ in 1..LOWEST_ADDRESS_SCAN {
            if p.is_null() || (*p).flags & flags::CLEAN != clean {
                break;
            }
            if page_addr(p) < page_addr(best) {
                best = p;
            }
            p = (*p).next;
        }
        best
    }
}

/// Marks a block just taken off the free lists as handed out: kind `None`
/// until the caller gives it one, order set, CLEAN kept.
///
/// # Safety
/// `head` is a block the caller now owns.
pub unsafe fn take_block(head: *mut Page, order: u32, clean: bool) {
    // SAFETY: the caller owns head.
    unsafe {
        (*head).set_kind(PageKind::None);
        (*head).order = order as u8;
        (*head).flags = if clean { flags::CLEAN } else { 0 };
        (*head).next = core::ptr::null_mut();
        (*head).prev = core::ptr::null_mut();
    }
}
