//! Pages charged to the budget. A page of the zone is charged from the
//! moment it is handed out (it may be written, so it may be resident)
//! until the zone gives it back to the OS (madvise, or the whole block
//! going offline) or, free, is found not resident (`release.rs`); a bit
//! per page in its section's header says which are
//! (`SectionHeader::charged`, walked by [`flip_charged`] and
//! [`count_charged`]). So a free page that was given back costs
//! nothing, a fresh block costs nothing until used, and memory the zone
//! holds free is never what makes a request fail: the runtime's reclaim
//! gives it back to the OS, and with it to the budget.
//!
//! The zone keeps the count of charged pages (`ZoneInner::charged`); the
//! budget holds them plus the descriptors of online blocks and the huge
//! blocks.

use crate::geometry::{PAGE_SHIFT, PAGE_SIZE};
use crate::page::Page;
use crate::section::{header_of, page_addr, section_base};

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
        let missing = pages - unsafe { count_charged(addr, pages) };
        if missing > 0 {
            let Some(c) = self.zone.budget.charge(missing * PAGE_SIZE) else {
                return false;
            };
            c.keep();
        }
        // SAFETY: as above.
        let n = unsafe { flip_charged(addr, pages, true) };
        debug_assert_eq!(n, missing);
        self.inner.charged += n;
        if n > 0 {
            // Memory becoming resident: the use may be at a new peak (the
            // dirty limit's, `dirty.rs`).
            let z = &*self.inner;
            self.zone.dirty.note_in_use(z.managed - z.free - z.isolated);
        }
        true
    }

    /// Uncharges the charged pages of `[addr, addr + pages)` (given back to
    /// the OS). Returns how many were charged.
    pub(super) fn uncharge_range(&mut self, addr: usize, pages: usize) -> usize {
        // SAFETY: the range lies in online blocks of ours; lock held.
        let n = unsafe { flip_charged(addr, pages, false) };
        if n > 0 {
            self.inner.charged -= n;
            self.zone.budget.uncharge(n * PAGE_SIZE);
        }
        n
    }
}

/// Calls `f` with each word of the charged bitmap that covers
/// `[addr, addr + pages)` (inside one section) and the mask of the range's
/// bits in it.
///
/// # Safety
/// The range lies in online blocks of a zone section whose lock is held.
unsafe fn for_charged_words(addr: usize, pages: usize, mut f: impl FnMut(&mut u64, u64)) {
    let h = header_of(addr);
    let mut i = (addr - section_base(addr)) >> PAGE_SHIFT;
    let end = i + pages;
    while i < end {
        let bit = i % 64;
        let take = (64 - bit).min(end - i);
        let mask = if take == 64 {
            !0u64
        } else {
            ((1u64 << take) - 1) << bit
        };
        // SAFETY: h is a live zone section's header, guarded by the zone
        // lock the caller holds.
        f(unsafe { &mut (*h).charged[i / 64] }, mask);
        i += take;
    }
}

/// Counts the pages of `[addr, addr + pages)` (inside one section) whose
/// charged bit is not set, and sets them if `set`, or counts those set and
/// clears them if not. Returns the count.
///
/// # Safety
/// As [`for_charged_words`].
pub(super) unsafe fn flip_charged(addr: usize, pages: usize, set: bool) -> usize {
    let mut n = 0;
    // SAFETY: forwarded contract.
    unsafe {
        for_charged_words(addr, pages, |w, mask| {
            if set {
                n += (!*w & mask).count_ones() as usize;
                *w |= mask;
            } else {
                n += (*w & mask).count_ones() as usize;
                *w &= !mask;
            }
        })
    };
    n
}

/// Charged pages in `[addr, addr + pages)`.
///
/// # Safety
/// As [`for_charged_words`].
pub(super) unsafe fn count_charged(addr: usize, pages: usize) -> usize {
    let mut n = 0;
    // SAFETY: forwarded contract.
    unsafe {
        for_charged_words(addr, pages, |w, mask| {
            n += (*w & mask).count_ones() as usize
        })
    };
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charged_bits_count_and_flip() {
        let h = crate::section::create(0xbeef).expect("reserve a section");
        let a = h as usize + crate::geometry::MAX_ORDER_BYTES + 3 * crate::geometry::PAGE_SIZE;
        // SAFETY: a test section nobody else uses.
        unsafe {
            assert_eq!(flip_charged(a, 100, true), 100);
            assert_eq!(flip_charged(a + 4096 * 50, 100, true), 50);
            assert_eq!(count_charged(a, 200), 150);
            assert_eq!(count_charged(a + 4096, 64), 64);
            assert_eq!(flip_charged(a + 4096 * 10, 20, false), 20);
            assert_eq!(count_charged(a, 150), 130);
            crate::section::destroy(h);
        }
    }
}
