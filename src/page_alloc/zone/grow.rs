//! How the zone grows and shrinks: MAX_ORDER blocks go *online* (committed,
//! charged to the budget, put on the free lists) when an allocation cannot
//! be served or free memory falls below the low watermark, and *offline*
//! (off the free lists, decommitted, uncharged) when a whole free block is
//! given back — the kernel's memory hot-add and hot-remove.
//!
//! Growth takes the first hole in a section the zone already has (blocks
//! that went offline), then a new section. Shrinking takes free MAX_ORDER
//! blocks: at reclaim all of them, from the tick only those that were
//! already given back to the OS (clean) and idle, beyond what the high
//! watermark asks to keep. A block being taken offline is *isolated* while
//! the OS call runs without the lock; it stays online in its section's
//! bitmap until the call is done, so growth cannot pick it meanwhile.

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_ORDER_PAGES, MAX_PAGE_ORDER, PAGEBLOCK_NR_PAGES, PAGE_DESC_SIZE,
    PAGE_SHIFT, PAGE_SIZE,
};
use crate::page::{flags, MigrateType, Page, PageKind, MIGRATE_TYPES};
use crate::section::{self, desc_of, page_addr, SectionHeader};
use crate::sys;

use super::budget::BLOCK_COST;
use super::watermark::{pcp_params, watermarks, WMARK_HIGH};
use super::{Shrink, Zone, ZoneGuard};

/// Most MAX_ORDER blocks one growth step brings online (64 MiB).
const MAX_GROW_BLOCKS: usize = 16;

/// Most blocks one shrink step takes offline per lock hold.
const SHRINK_BATCH: usize = 16;

impl ZoneGuard<'_> {
    /// Brings more memory online: at least `need` pages' worth of whole
    /// MAX_ORDER blocks, more when below the high watermark or to grow the
    /// heap by an eighth, as the budget allows. Returns whether it grew by
    /// at least `need` pages (or anything at all when `need` is 0).
    pub fn grow(&mut self, need: usize) -> bool {
        let high = self.zone.wmark(WMARK_HIGH);
        let (free, managed) = (self.inner.free, self.inner.managed);
        let budget = &self.zone.budget;
        // Under a wall, no more than the budget could ever charge.
        let room = budget.limit().saturating_sub(budget.used()) / PAGE_SIZE;
        let want = (need + high.saturating_sub(free))
            .max(managed / 8)
            .min(room.max(need));
        let want_blocks = want.div_ceil(MAX_ORDER_PAGES).clamp(1, MAX_GROW_BLOCKS);
        let need_blocks = need.div_ceil(MAX_ORDER_PAGES).max(1);
        let Some(charge) = budget.charge(want_blocks * BLOCK_COST).or_else(|| {
            (need_blocks < want_blocks)
                .then(|| budget.charge(need_blocks * BLOCK_COST))
                .flatten()
        }) else {
            return false;
        };
        let blocks = charge.bytes() / BLOCK_COST;
        // Huge pages turn on before the blocks that cross the threshold go
        // online, so those are advised from their first touch.
        self.update_thp(blocks * MAX_ORDER_PAGES);
        let mut added = 0;
        while added < blocks {
            let Some((h, b)) = self.block_slot() else {
                break; // no address space left
            };
            // SAFETY: h is our live section, b neither online nor dead, and
            // we hold the zone lock.
            if !unsafe { section::commit_block(h, b) } {
                // SAFETY: as above.
                if unsafe { section::is_dead(h, b) } {
                    continue; // that address is taken: try the next block
                }
                break; // the OS is out of memory
            }
            let addr = h as usize + b * MAX_ORDER_BYTES;
            self.advise_block(addr);
            for pb in 0..(MAX_ORDER_PAGES / PAGEBLOCK_NR_PAGES) {
                section::set_pageblock_mt(
                    addr + pb * PAGEBLOCK_NR_PAGES * PAGE_SIZE,
                    MigrateType::Movable,
                );
            }
            // SAFETY: the block is freshly committed and ours; its
            // descriptors are zero (None). Fresh blocks go to the back so
            // memory already resident is used first.
            unsafe {
                self.inner.add_free(
                    desc_of(addr),
                    MAX_PAGE_ORDER,
                    MigrateType::Movable,
                    true,
                    true,
                );
            }
            self.inner.managed += MAX_ORDER_PAGES;
            added += 1;
        }
        // The blocks that went online hold their share; the rest goes back.
        charge.keep_part(added * BLOCK_COST);
        if added > 0 {
            let z = &mut self.inner;
            z.c.grow_events += 1;
            z.c.grow_pages += (added * MAX_ORDER_PAGES) as u64;
            self.update_sizes();
        }
        if need == 0 {
            added > 0
        } else {
            added * MAX_ORDER_PAGES >= need
        }
    }

    /// Where the next block can go online: a hole in a section the zone
    /// has (the one growth used last first), else a new section.
    fn block_slot(&mut self) -> Option<(*mut SectionHeader, usize)> {
        let hint = self.inner.grow_section;
        if !hint.is_null() {
            // SAFETY: the hint is a live section of ours; lock held.
            if let Some(b) = unsafe { section::free_block_slot(hint) } {
                return Some((hint, b));
            }
        }
        let mut found = None;
        section::for_each(self.zone.tag(), |h| {
            if found.is_none() {
                // SAFETY: for_each passes live headers of this zone; lock
                // held.
                if let Some(b) = unsafe { section::free_block_slot(h) } {
                    found = Some((h, b));
                }
            }
        });
        let (h, b) = match found {
            Some(x) => x,
            None => {
                let h = section::create(self.zone.tag())?;
                if self.zone.is_process_heap() {
                    // SAFETY: h is live, of the process heap's zone, which
                    // never destroys a section; we hold the zone lock.
                    unsafe { section::set_primary(h) };
                }
                (h, 1)
            }
        };
        self.inner.grow_section = h;
        Some((h, b))
    }

    /// Recomputes watermarks and pcp bounds from the managed pages.
    pub(super) fn update_sizes(&mut self) {
        let zone = self.zone;
        let managed = self.inner.managed;
        let w = watermarks(managed);
        for (i, v) in w.iter().enumerate() {
            zone.wmark[i].store(*v, core::sync::atomic::Ordering::Relaxed);
        }
        let p = pcp_params(
            managed,
            zone.budget.size() >> PAGE_SHIFT,
            zone.nr_cpus.load(core::sync::atomic::Ordering::Relaxed),
            zone.high_fraction
                .load(core::sync::atomic::Ordering::Relaxed),
        );
        zone.set_pcp_params(p, managed);
    }
}

impl Zone {
    /// Takes free MAX_ORDER blocks offline as `which` allows, up to
    /// `max_blocks`: their memory and commit charge go back to the OS and
    /// their cost back to the budget. Returns the bytes given back.
    pub fn shrink(&self, which: Shrink, max_blocks: usize) -> usize {
        // Blocks are isolated while the OS call runs: not across a fork
        // (see `release.rs`).
        let Some(_inside) = self.release_gate.enter() else {
            return 0;
        };
        let mut total = 0;
        let mut left = max_blocks;
        while left > 0 {
            let mut batch = [(core::ptr::null_mut::<Page>(), MigrateType::Movable); SHRINK_BATCH];
            let n = self.isolate_for_shrink(which, left.min(SHRINK_BATCH), &mut batch);
            if n == 0 {
                break;
            }
            left -= n;
            let mut ok = [false; SHRINK_BATCH];
            for (i, &(p, _)) in batch[..n].iter().enumerate() {
                let a = page_addr(p);
                let h = section::header_of(a);
                let b = (a - h as usize) / MAX_ORDER_BYTES;
                // SAFETY: the block is isolated (ours, unused) and stays
                // online in its section until set_offline below.
                ok[i] = unsafe { section::decommit_block(h, b) };
            }
            let mut g = self.lock();
            let mut gone = 0;
            for (i, &(p, mt)) in batch[..n].iter().enumerate() {
                let a = page_addr(p);
                g.inner.isolated -= MAX_ORDER_PAGES;
                if ok[i] {
                    let h = section::header_of(a);
                    let b = (a - h as usize) / MAX_ORDER_BYTES;
                    g.uncharge_range(a, MAX_ORDER_PAGES);
                    // SAFETY: the block's memory is gone; its head goes
                    // back to None like every other descriptor of it, and
                    // the descriptor pages (all zero now) need not stay
                    // resident.
                    unsafe {
                        (*p).reset();
                        section::set_offline(h, b);
                        let descs = desc_of(a) as *mut u8;
                        sys::release(descs, MAX_ORDER_PAGES * PAGE_DESC_SIZE);
                    }
                    g.inner.managed -= MAX_ORDER_PAGES;
                    gone += 1;
                } else {
                    // SAFETY: the isolated block is ours; it goes back whole.
                    unsafe { g.inner.free_one_page(p, MAX_PAGE_ORDER, mt) };
                }
            }
            if gone > 0 {
                g.inner.c.shrink_events += 1;
                g.inner.c.shrink_pages += (gone * MAX_ORDER_PAGES) as u64;
                g.update_sizes();
                drop(g);
                self.budget.uncharge(gone * BLOCK_COST);
                total += gone * MAX_ORDER_BYTES;
            } else {
                break; // the OS refuses: stop here
            }
        }
        total
    }

    /// Takes up to `max` free MAX_ORDER blocks that `which` allows off the
    /// free lists as isolated blocks, into `out`. Returns how many.
    fn isolate_for_shrink(
        &self,
        which: Shrink,
        max: usize,
        out: &mut [(*mut Page, MigrateType)],
    ) -> usize {
        let mut g = self.lock();
        let keep = self.wmark(WMARK_HIGH);
        let z = &mut *g.inner;
        let epoch = z.epoch;
        let mut n = 0;
        for mt in 0..MIGRATE_TYPES {
            let mut p = z.free_area[MAX_PAGE_ORDER as usize][mt].last();
            while !p.is_null() && n < max {
                // SAFETY: p is on our free list; lock held.
                let (prev, fl, since) = unsafe { ((*p).prev, (*p).flags, (*p).free_epoch) };
                let take = match which {
                    Shrink::All => true,
                    Shrink::Idle(ticks) => {
                        fl & flags::CLEAN != 0
                            && epoch.wrapping_sub(since) >= ticks
                            && z.free >= keep + MAX_ORDER_PAGES
                    }
                };
                if take {
                    // SAFETY: as above; the block leaves the free lists and
                    // is ours until it goes offline or back.
                    unsafe {
                        z.del_free(p);
                        (*p).set_kind(PageKind::Isolated);
                    }
                    z.isolated += MAX_ORDER_PAGES;
                    out[n] = (p, MigrateType::from_index(mt));
                    n += 1;
                }
                p = prev;
            }
        }
        n
    }
}
