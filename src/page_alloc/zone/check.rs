//! The zone's invariant walk: every free list, then every descriptor of
//! every online block, checked against the counters (see `ZoneInner`'s
//! invariants), and the budget against what is online.

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_ORDER_PAGES, MAX_PAGE_ORDER, NR_PAGE_ORDERS, PAGEBLOCK_NR_PAGES,
    PAGEBLOCK_ORDER, PAGE_SIZE,
};
use crate::page::{flags, LargeBlock, Page, PageKind, MIGRATE_TYPES};
use crate::section::{self, desc_of, page_addr};

use super::budget::BLOCK_COST;
use super::{Zone, ZoneWalk};

impl Zone {
    /// Walks every list and every descriptor of the zone and panics on any
    /// broken invariant (see [`ZoneInner`]). Returns what the walk found, so
    /// the layers above can check their own counts against it.
    pub fn check_invariants(&self) -> ZoneWalk {
        let g = self.lock();
        let z = &*g.inner;
        let mut free = 0;
        let mut clean = 0;
        for o in 0..NR_PAGE_ORDERS {
            let mut blocks = 0;
            for mt in 0..MIGRATE_TYPES {
                let list = &z.free_area[o][mt];
                // SAFETY: list elements are our descriptors; lock held.
                blocks += unsafe { list.check() };
                let mut p = list.first();
                let mut seen_clean = false;
                while !p.is_null() {
                    // SAFETY: as above.
                    unsafe {
                        assert_eq!(
                            (*p).kind(),
                            PageKind::Buddy,
                            "free list holds a non-buddy page"
                        );
                        assert_eq!((*p).order as usize, o, "free block on the wrong order list");
                        assert_eq!(
                            (*p).migratetype as usize,
                            mt,
                            "free block on the wrong type list"
                        );
                        let a = page_addr(p);
                        assert_eq!(
                            a % (PAGE_SIZE << o),
                            0,
                            "free block not aligned to its size"
                        );
                        if o >= PAGEBLOCK_ORDER as usize {
                            for i in 0..(1usize << (o - PAGEBLOCK_ORDER as usize)) {
                                let pb = a + i * PAGEBLOCK_NR_PAGES * PAGE_SIZE;
                                assert_eq!(
                                    section::pageblock_mt(pb) as usize,
                                    mt,
                                    "free pageblock-sized block of another type"
                                );
                            }
                        }
                        if o < MAX_PAGE_ORDER as usize {
                            let b = desc_of(a ^ (PAGE_SIZE << o));
                            assert!(
                                !((*b).kind() == PageKind::Buddy && (*b).order as usize == o),
                                "two free buddies left unmerged"
                            );
                        }
                        let is_clean = (*p).flags & flags::CLEAN != 0;
                        if is_clean && !seen_clean {
                            assert!(
                                z.first_clean(o, mt) == p,
                                "the first clean block of a list is not the one the zone has"
                            );
                        }
                        assert!(
                            is_clean || !seen_clean,
                            "a block that is not clean after a clean one on a list"
                        );
                        seen_clean |= is_clean;
                        if is_clean {
                            clean += 1 << o;
                            assert_eq!(
                                super::charge::count_charged(a, 1 << o),
                                0,
                                "a clean free block has charged pages"
                            );
                        }
                        p = (*p).next;
                    }
                }
                assert!(
                    seen_clean || z.first_clean(o, mt).is_null(),
                    "the zone has a first clean block for a list with none"
                );
            }
            assert_eq!(
                blocks, z.nr_free[o],
                "nr_free[{o}] disagrees with the lists"
            );
            free += blocks << o;
        }
        assert_eq!(free, z.free, "free page count disagrees with the lists");
        assert_eq!(
            clean, z.clean_free,
            "clean page count disagrees with the lists"
        );

        // Walk every committed block descriptor by descriptor.
        let (mut managed, mut walked_free, mut pcp, mut isolated, mut used) = (0, 0, 0, 0, 0);
        let mut charged = 0;
        section::for_each(self.tag(), |h| {
            // SAFETY: for_each passes live headers of this zone.
            assert!(unsafe { section::header_ok(h) });
            // SAFETY: h is a live header of this zone; lock held.
            let bits = unsafe { section::online_bits(h) };
            // An exact block may run into the next online block: `carry`
            // is where the walk of the next block starts then.
            let mut carry = 0;
            for start in section::online_block_addrs(h as usize, bits) {
                let end = start + MAX_ORDER_BYTES;
                managed += MAX_ORDER_PAGES;
                // SAFETY: an online block of this zone; lock held.
                charged += unsafe { super::charge::count_charged(start, MAX_ORDER_PAGES) };
                assert!(
                    carry == 0 || (carry > start && carry <= end),
                    "a block runs past its MAX_ORDER block into one that is not online"
                );
                let mut a = if carry == 0 { start } else { carry };
                while a < end {
                    let d = desc_of(a);
                    // SAFETY: committed descriptor; lock held.
                    let (kind, order) = unsafe { ((*d).kind(), (*d).order as u32) };
                    // An exact block's order byte is its size class: it is
                    // page-aligned only.
                    if !matches!(
                        kind,
                        PageKind::Large | PageKind::PcpLarge | PageKind::Cached
                    ) {
                        assert!(order <= MAX_PAGE_ORDER);
                        assert_eq!(a % (PAGE_SIZE << order), 0, "block head not aligned");
                    }
                    // SAFETY: as above.
                    let pages = unsafe { block_pages(d) };
                    match kind {
                        PageKind::Buddy => walked_free += pages,
                        PageKind::Pcp | PageKind::PcpLarge => pcp += pages,
                        PageKind::Isolated => isolated += pages,
                        PageKind::Large | PageKind::Slab | PageKind::Cached => used += pages,
                        PageKind::None
                        | PageKind::SlabTail
                        | PageKind::Huge
                        | PageKind::HugeCached => {
                            panic!("page {a:#x} is covered by no block (kind {kind:?})")
                        }
                    }
                    // Only a slab's descriptors pass the free fast path's
                    // object check (see Page::object_bound).
                    if kind != PageKind::Slab {
                        for i in 0..pages {
                            let t = desc_of(a + i * PAGE_SIZE);
                            // SAFETY: committed descriptor; lock held.
                            let bound = unsafe { (*t).object_bound() };
                            assert_eq!(
                                bound,
                                0,
                                "page {:#x} of a {kind:?} block has an object bound",
                                a + i * PAGE_SIZE
                            );
                        }
                    }
                    for i in 1..pages {
                        let t = desc_of(a + i * PAGE_SIZE);
                        // SAFETY: committed descriptor; lock held.
                        let tk = unsafe { (*t).kind() };
                        let ok = tk == PageKind::None
                            || (kind == PageKind::Slab && tk == PageKind::SlabTail);
                        assert!(
                            ok,
                            "page {:#x} inside a {kind:?} block is a {tk:?} head",
                            a + i * PAGE_SIZE
                        );
                    }
                    a += pages * PAGE_SIZE;
                }
                carry = if a > end { a } else { 0 };
            }
            assert_eq!(
                carry, 0,
                "a block runs past the section's last online block"
            );
        });
        assert_eq!(
            managed, z.managed,
            "managed pages disagree with committed blocks"
        );
        assert_eq!(
            walked_free, z.free,
            "descriptor walk disagrees with free count"
        );
        assert_eq!(
            isolated, z.isolated,
            "descriptor walk disagrees with isolated count"
        );
        assert_eq!(
            charged, z.charged,
            "charged pages disagree with the bitmaps"
        );
        // The budget holds at least the zone's share (huge blocks hold the
        // rest) and never more than its wall.
        let budget = self.budget.used();
        let zone_cost = managed / MAX_ORDER_PAGES * BLOCK_COST + charged * PAGE_SIZE;
        assert!(
            budget >= zone_cost,
            "budget {budget} below the zone's share {zone_cost}"
        );
        assert!(
            budget <= self.budget.ceiling(),
            "budget {budget} past its limit"
        );
        ZoneWalk {
            free: walked_free,
            pcp,
            isolated,
            used,
        }
    }

    /// Calls `f` on the head descriptor of every block handed out (slabs
    /// and large blocks), walking the descriptors under the zone lock. `f`
    /// must not take the zone lock.
    pub fn for_each_used_block(&self, mut f: impl FnMut(*mut Page)) {
        let _g = self.lock();
        section::for_each(self.tag(), |h| {
            // SAFETY: h is a live header of this zone; lock held.
            let bits = unsafe { section::online_bits(h) };
            let mut carry = 0;
            for start in section::online_block_addrs(h as usize, bits) {
                let end = start + MAX_ORDER_BYTES;
                let mut a = if carry > start { carry } else { start };
                while a < end {
                    let d = desc_of(a);
                    // SAFETY: committed descriptor; lock held.
                    let kind = unsafe { (*d).kind() };
                    // SAFETY: as above.
                    let pages = unsafe { block_pages(d) }.max(1);
                    if matches!(kind, PageKind::Large | PageKind::Slab) {
                        f(d);
                    }
                    a += pages * PAGE_SIZE;
                }
                carry = if a > end { a } else { 0 };
            }
        });
    }
}

/// Pages the block headed by `d` spans: `2^order`, or for a trimmed large
/// block the pages it kept.
///
/// # Safety
/// `d` is a committed descriptor of a block head; the zone lock is held.
unsafe fn block_pages(d: *mut Page) -> usize {
    // SAFETY: forwarded contract; a Large head is read through its view.
    unsafe {
        let k = (*d).kind();
        if (k == PageKind::Large && (*d).flags & flags::EXACT != 0)
            || k == PageKind::PcpLarge
            || k == PageKind::Cached
        {
            (*d.cast::<LargeBlock>()).pages as usize
        } else {
            1usize << (*d).order
        }
    }
}
