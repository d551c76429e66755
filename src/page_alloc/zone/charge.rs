//! Pages charged to the budget. A page of the zone is charged from the
//! moment it is handed out (it may be written, so it may be resident)
//! until the zone gives it back to the OS (madvise, or the whole block
//! going offline); a bit per page in its section's header says which are
//! (see `section::flip_charged`). So a free page that was given back costs
//! nothing, a fresh block costs nothing until used, and memory the zone
//! holds free is never what makes a request fail: the runtime's reclaim
//! gives it back to the OS, and with it to the budget.
//!
//! The zone keeps the count of charged pages (`ZoneInner::charged`); the
//! budget holds them plus the descriptors of online blocks and the huge
//! blocks.

use crate::geometry::PAGE_SIZE;
use crate::page::Page;
use crate::section::{self, page_addr};

use super::ZoneGuard;

impl ZoneGuard<'_> {
    /// Charges the pages of the block at `head` of `order` that are not
    /// charged yet. False (and nothing charged) if the budget says no.
    pub(super) fn charge_block(&mut self, head: *mut Page, order: u32) -> bool {
        self.charge_range(page_addr(head), 1 << order)
    }

    /// Charges the pages of `[addr, addr + pages)` that are not charged
    /// yet. False (and nothing charged) if the budget says no.
    pub(super) fn charge_range(&mut self, addr: usize, pages: usize) -> bool {
        // SAFETY: the range lies in an online block of ours; lock held.
        let missing = pages - unsafe { section::count_charged_fast(addr, pages) };
        if missing > 0 {
            let Some(c) = self.zone.budget.charge(missing * PAGE_SIZE) else {
                return false;
            };
            c.keep();
        }
        // SAFETY: as above.
        let n = unsafe { section::flip_charged(addr, pages, true) };
        debug_assert_eq!(n, missing);
        self.inner.charged += n;
        true
    }

    /// Uncharges the charged pages of `[addr, addr + pages)` (given back to
    /// the OS). Returns how many were charged.
    pub(super) fn uncharge_range(&mut self, addr: usize, pages: usize) -> usize {
        // SAFETY: the range lies in online blocks of ours; lock held.
        let n = unsafe { section::flip_charged(addr, pages, false) };
        if n > 0 {
            self.inner.charged -= n;
            self.zone.budget.uncharge(n * PAGE_SIZE);
        }
        n
    }
}
