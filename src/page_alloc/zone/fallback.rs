//! Migratetype fallback and page stealing, as seed 004 leaves it
//! (Vlastimil Babka, "page stealing tweaks", v3 1–3/3 on 3.19).
//!
//! When no block of the requested migratetype is free, `__rmqueue_fallback`
//! takes the *largest* free block of a fallback type (largest, so that the
//! pollution lands in as few pageblocks as possible). Then
//! `try_to_steal_freepages` decides how much of that pageblock to take:
//!
//! - a block of pageblock order or more: the whole range changes type;
//! - a block of at least half a pageblock, or any request that is
//!   RECLAIMABLE, or (patch 3) UNMOVABLE: move every free page of the
//!   pageblock to the requester's lists, and claim the pageblock (change its
//!   type) when that was at least half of it;
//! - otherwise take just the block.
//!
//! The halves split off the stolen block go to the requester's lists
//! always (patch 2); before patch 2 they did only when pages were stolen
//! (patch 1), and before patch 1 only when the pageblock was claimed.
//! Each rule is a switch so the stress-highalloc test can compare.

use crate::geometry::{MAX_PAGE_ORDER, PAGEBLOCK_NR_PAGES, PAGEBLOCK_ORDER, PAGE_SIZE};
use crate::page::{MigrateType, PageKind};
use crate::section::{desc_of, page_addr};

use super::buddy::{take_block, ZoneInner};

/// The fallback order per requested type (`fallbacks[]`).
pub const FALLBACKS: [[MigrateType; 2]; 3] = [
    [MigrateType::Reclaimable, MigrateType::Movable], // UNMOVABLE
    [MigrateType::Reclaimable, MigrateType::Unmovable], // MOVABLE
    [MigrateType::Unmovable, MigrateType::Movable],   // RECLAIMABLE
];

/// Which of seed 004's stealing rules are in force. All on is the final
/// state of the seed; all off is the 3.19-rc4 baseline it measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StealRules {
    /// Patch 1: stealing the pageblock's free pages also steals the buddies
    /// split off the fallback block.
    pub split_buddies_follow_steal: bool,
    /// Patch 2: split-off buddies always go to the requester's type.
    pub always_steal_split_buddies: bool,
    /// Patch 3: UNMOVABLE requests steal as aggressively as RECLAIMABLE.
    pub unmovable_steals_block: bool,
}

impl StealRules {
    /// Seed 004 as merged: every rule on.
    pub const SEED_004: StealRules = StealRules {
        split_buddies_follow_steal: true,
        always_steal_split_buddies: true,
        unmovable_steals_block: true,
    };
    /// The baseline the seed measured against: every rule off.
    pub const BASELINE: StealRules = StealRules {
        split_buddies_follow_steal: false,
        always_steal_split_buddies: false,
        unmovable_steals_block: false,
    };

    /// The rules as three bits (for an atomic).
    pub const fn to_bits(self) -> u8 {
        self.split_buddies_follow_steal as u8
            | (self.always_steal_split_buddies as u8) << 1
            | (self.unmovable_steals_block as u8) << 2
    }

    /// The rules from [`to_bits`](Self::to_bits).
    pub const fn from_bits(b: u8) -> StealRules {
        StealRules {
            split_buddies_follow_steal: b & 1 != 0,
            always_steal_split_buddies: b & 2 != 0,
            unmovable_steals_block: b & 4 != 0,
        }
    }
}

/// What `try_to_steal_freepages` did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Steal {
    /// Took only the block.
    None,
    /// Moved the pageblock's free pages but left its type alone.
    Pages,
    /// Changed the pageblock's type (claimed it).
    Claimed,
}

impl ZoneInner {
    /// Allocates `order` for `start` from another migratetype's lists.
    pub(super) fn rmqueue_fallback(
        &mut self,
        order: u32,
        start: MigrateType,
        rules: StealRules,
    ) -> *mut crate::page::Page {
        for current in (order..=MAX_PAGE_ORDER).rev() {
            for &fallback in &FALLBACKS[start as usize] {
                let head = self.free_area[current as usize][fallback as usize].first();
                if head.is_null() {
                    continue;
                }
                let steal = self.try_to_steal_freepages(page_addr(head), current, start, rules);
                let buddy_type = if rules.always_steal_split_buddies {
                    start
                } else if rules.split_buddies_follow_steal {
                    if steal != Steal::None {
                        start
                    } else {
                        fallback
                    }
                } else if steal == Steal::Claimed {
                    start
                } else {
                    fallback
                };
                // SAFETY: head is still a free block of order `current` (the
                // steal may have moved it to another list, which its
                // descriptor records); we hold the zone lock.
                unsafe {
                    let clean = (*head).flags & crate::page::flags::CLEAN != 0;
                    self.del_free(head);
                    self.expand(page_addr(head), order, current, buddy_type, clean);
                    take_block(head, order, clean);
                }
                self.count_extfrag(page_addr(head), current, start, fallback, steal);
                return head;
            }
        }
        core::ptr::null_mut()
    }

    /// Decides how much of the pageblock at `addr` to take over for `start`.
    fn try_to_steal_freepages(
        &mut self,
        addr: usize,
        order: u32,
        start: MigrateType,
        rules: StealRules,
    ) -> Steal {
        if order >= PAGEBLOCK_ORDER {
            let pbs = 1usize << (order - PAGEBLOCK_ORDER);
            for i in 0..pbs {
                let pb = addr + i * PAGEBLOCK_NR_PAGES * PAGE_SIZE;
                self.set_pageblock_type(pb, start);
            }
            return Steal::Claimed;
        }
        let aggressive = order >= PAGEBLOCK_ORDER / 2
            || start == MigrateType::Reclaimable
            || (rules.unmovable_steals_block && start == MigrateType::Unmovable);
        if !aggressive {
            return Steal::None;
        }
        let pages = self.move_freepages_block(addr, start);
        if pages >= PAGEBLOCK_NR_PAGES / 2 {
            self.set_pageblock_type(addr & !(PAGEBLOCK_NR_PAGES * PAGE_SIZE - 1), start);
            Steal::Claimed
        } else {
            Steal::Pages
        }
    }

    /// Moves every free block in the pageblock containing `addr` to the
    /// `mt` lists; returns the pages moved (`move_freepages_block`).
    pub(super) fn move_freepages_block(&mut self, addr: usize, mt: MigrateType) -> usize {
        let start = addr & !(PAGEBLOCK_NR_PAGES * PAGE_SIZE - 1);
        let end = start + PAGEBLOCK_NR_PAGES * PAGE_SIZE;
        let mut a = start;
        let mut moved = 0;
        while a < end {
            let d = desc_of(a);
            // SAFETY: the pageblock lies in one committed MAX_ORDER block, so
            // every descriptor is valid; we hold the zone lock.
            unsafe {
                if (*d).kind() == PageKind::Buddy {
                    let order = u32::from((*d).order);
                    if (*d).mt() != mt {
                        let clean = (*d).flags & crate::page::flags::CLEAN != 0;
                        self.del_free(d);
                        self.add_free(d, order, mt, clean, false);
                    }
                    moved += 1 << order;
                    a += PAGE_SIZE << order;
                } else {
                    a += PAGE_SIZE;
                }
            }
        }
        moved
    }

    fn count_extfrag(
        &mut self,
        _addr: usize,
        fallback_order: u32,
        start: MigrateType,
        fallback: MigrateType,
        steal: Steal,
    ) {
        self.c.extfrag_fallback += 1;
        if steal == Steal::Claimed {
            self.c.pageblock_claims += 1;
        }
        if fallback_order < PAGEBLOCK_ORDER {
            self.c.extfrag_fragmenting[start as usize] += 1;
            // "placed with movable", as mmtests counts it from the
            // tracepoint: a fragmenting fallback into a MOVABLE block.
            if fallback == MigrateType::Movable {
                self.c.extfrag_in_movable[start as usize] += 1;
            }
        }
    }
}
