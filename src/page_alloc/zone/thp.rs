//! Transparent huge pages for the zone's memory.
//!
//! A pageblock is 2 MiB, the x86-64 huge page, and sections are aligned so
//! every pageblock is huge-page aligned: a pageblock the kernel backs with
//! one huge page costs one TLB entry instead of 512. Most distributions
//! ship THP in `madvise` mode, so the heap has to ask (`MADV_HUGEPAGE`), as
//! the kernel's own policy knob would:
//!
//! - `never`: `MADV_NOHUGEPAGE` on every block, so the heap stays in 4 KiB
//!   pages even where the system would give huge ones;
//! - `always`: `MADV_HUGEPAGE` on every block as it goes online;
//! - `dense`: nothing until the zone has grown past [`THP_DENSE_MIN_BYTES`],
//!   then `MADV_HUGEPAGE` on the pageblocks of long-lived small objects
//!   (unmovable: see `heap/lifetime.rs`) as they are claimed; short-lived
//!   small objects (reclaimable) and page-granular blocks (movable) stay in
//!   4 KiB pages. A huge block (outside the zone) is not advised when
//!   mapped: one of 64 MiB or more is advised once it shows dense use
//!   (`large/huge_thp.rs`). A huge page is worth it where its 2 MiB are
//!   mostly in use and stay so; in a small heap they are not (a first
//!   touch faults in the whole 2 MiB), which is what makes a small
//!   program's RSS double under an allocator that asks for huge pages
//!   everywhere, and memory churned through pays a 2 MiB fault for each
//!   fresh pageblock without staying to pay it back.
//!
//! Once huge pages are asked for, idle memory goes back only as whole
//! pageblocks (`release.rs`): giving back 4 KiB of a huge page would split
//! it, and a pageblock in use keeps its huge page — unless the zone is
//! under pressure (BELOW_HIGH) or everything is being given back (trim,
//! reclaim). Long-lived pageblocks faulted in before huge pages were
//! asked for are collapsed by the tick where they are dense (`collapse_some`, as
//! khugepaged would, with MADV_COLLAPSE): a few on the background thread's
//! ticks, one on a tick run inline on a program's thread (a collapse
//! copies 2 MiB: about 1 ms, up to 7 when the kernel compacts memory).

use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::{
    MAX_ORDER_BYTES, PAGEBLOCK_NR_PAGES, PAGEBLOCK_ORDER, PAGE_SHIFT, PAGE_SIZE,
};

/// A pageblock's bytes: one huge page.
pub(super) const PAGEBLOCK_BYTES: usize = PAGEBLOCK_NR_PAGES << PAGE_SHIFT;
use crate::section::{self, SectionHeader};
use crate::sys;

use crate::page::MigrateType;

use super::{ThpPolicy, Zone, ZoneGuard, ZoneInner};

/// The heap size from which `dense` asks for huge pages (64 MiB).
pub const THP_DENSE_MIN_BYTES: usize = 64 << 20;

impl Zone {
    /// The huge-page policy.
    pub fn thp_policy(&self) -> ThpPolicy {
        ThpPolicy::from_u32(u32::from(self.thp.load(Relaxed)))
    }

    /// How a huge block (mapped outside the zone) is advised when mapped:
    /// under `never` and `always` by the policy; under `dense` not at all
    /// (`None`: left to the system), since advice makes each first touch
    /// fault in 2 MiB — a 4 GiB array written once per 64 KiB held 4 GiB
    /// where glibc's holds 256 MiB. A block of 64 MiB or more is advised
    /// later, once it shows dense use (`large/huge_thp.rs`).
    pub fn thp_advice(&self) -> Option<bool> {
        match self.thp_policy() {
            ThpPolicy::Never => Some(false),
            ThpPolicy::Always => Some(true),
            ThpPolicy::Dense => None,
        }
    }

    /// Whether idle memory goes back only as whole pageblocks, so that huge
    /// pages in use stay whole: under `always` once huge pages are on;
    /// under `dense` while at least half the threshold's pages are handed
    /// out (not free in the zone) — a heap that has shrunk back is small
    /// again, and its pages go back 4 KiB at a time as under `never`.
    /// `cached` of the pages handed out are only a cache (the pagesets'
    /// large lists) and count as free: after a storm of short threads the
    /// lists held 110 MiB of blocks, resident in their first pages, and
    /// the heap looked dense while its threads used 1 MiB.
    pub(super) fn keep_huge_whole(&self, z: &ZoneInner, cached: usize) -> bool {
        match self.thp_policy() {
            ThpPolicy::Never => false,
            ThpPolicy::Always => self.thp_active(),
            ThpPolicy::Dense => {
                self.thp_active()
                    && (z.managed - z.free).saturating_sub(cached) << PAGE_SHIFT
                        >= THP_DENSE_MIN_BYTES / 2
            }
        }
    }

    /// Whether the pageblock holding `addr` is (asked to be) a huge page:
    /// every one under `always`, the long-lived small objects' under
    /// `dense` — the ones idle memory must not be given back 4 KiB at a
    /// time from.
    pub(super) fn huge_pageblock(&self, addr: usize) -> bool {
        match self.thp_policy() {
            ThpPolicy::Never => false,
            ThpPolicy::Always => true,
            ThpPolicy::Dense => huge_under_dense(section::pageblock_mt(addr)),
        }
    }

    /// Whether the zone's blocks are advised for huge pages now.
    #[inline]
    pub fn thp_active(&self) -> bool {
        self.thp_active.load(Relaxed)
    }
}

impl ZoneInner {
    /// Sets pageblock `pb`'s migratetype to `mt` — a claim by page
    /// stealing, or a merge — and, under `dense` with huge pages on, its
    /// advice with it. A pageblock for long-lived small objects
    /// (unmovable: slabs that stay in use, dense and pointer-rich, where
    /// the TLB pays) is advised for a huge page; one that stops being one
    /// is advised back (MADV_NOHUGEPAGE: it does not split a huge page
    /// already there, but the next fault after a release is 4 KiB). The
    /// rest stay in 4 KiB pages, where a first touch faults in 4 KiB, not 2
    /// MiB: page-granular blocks (movable: buffers, often touched sparsely
    /// or once — blocks of 16 KiB-4 MiB touched at their ends ran 3.4x
    /// slower with their pageblocks huge) and short-lived small objects
    /// (reclaimable, see `heap/lifetime.rs`: memory churned through, where
    /// faulting fresh 2 MiB pages cost sh6bench 1.2-1.4x its time).
    pub(super) fn set_pageblock_type(&self, pb: usize, mt: MigrateType) {
        let old = section::pageblock_mt(pb);
        section::set_pageblock_mt(pb, mt);
        if !self.thp_claims {
            return;
        }
        if huge_under_dense(mt) {
            // SAFETY: pb is a pageblock of this zone; lock held.
            unsafe { set_unadvised(section::header_of(pb), pb, false) };
            sys::advise_huge(pb as *mut u8, PAGEBLOCK_BYTES, true);
        } else if huge_under_dense(old) {
            sys::advise_huge(pb as *mut u8, PAGEBLOCK_BYTES, false);
        }
    }
}

/// Whether a pageblock of `mt` is a huge page under `dense`: only the
/// unmovable ones, long-lived small objects.
pub(super) fn huge_under_dense(mt: MigrateType) -> bool {
    mt == MigrateType::Unmovable
}

impl ZoneGuard<'_> {
    /// Free block `addr` of `order`, in a pageblock asked to be a huge
    /// page, was given back to the OS. khugepaged fills a pageblock whose
    /// advice asks for a huge page though one page of it is resident
    /// (`max_ptes_none` 511 by default): after a storm of threads, the
    /// pageblocks their slabs left sparse came back as 2 MiB each while
    /// the program slept (13.6 → 24.8 MiB). So a pageblock given back in
    /// part has its advice taken back, and one given back whole (empty
    /// now: the next use faults in a huge page) gets it again — only those
    /// whose advice was taken back, marked in the section's `unadvised`.
    /// Writes the (pageblock, advice) changes to make into `advice` (two
    /// at most) and returns how many; the caller makes them after the
    /// lock is dropped.
    pub(super) fn released_in_pageblocks(
        &mut self,
        addr: usize,
        order: u32,
        advice: &mut [(usize, bool)],
    ) -> usize {
        let h = section::header_of(addr);
        let mut n = 0;
        if order < PAGEBLOCK_ORDER {
            let pb = addr & !(PAGEBLOCK_BYTES - 1);
            // SAFETY: pb is a pageblock of this zone's section h; lock
            // held.
            if unsafe { set_unadvised(h, pb, true) } {
                advice[n] = (pb, false);
                n += 1;
            }
        } else {
            for pb in (addr..addr + (PAGE_SIZE << order)).step_by(PAGEBLOCK_BYTES) {
                // SAFETY: as above.
                if unsafe { set_unadvised(h, pb, false) } {
                    advice[n] = (pb, true);
                    n += 1;
                }
            }
        }
        n
    }

    /// Advises block `addr` (just online) as the policy says: under
    /// `dense` nothing (it goes online movable; its pageblocks are advised
    /// as long-lived small objects claim them, see
    /// [`ZoneInner::set_pageblock_type`]).
    pub(super) fn advise_block(&self, addr: usize) {
        match self.zone.thp_policy() {
            ThpPolicy::Never => sys::advise_huge(addr as *mut u8, MAX_ORDER_BYTES, false),
            ThpPolicy::Always if self.zone.thp_active() => {
                sys::advise_huge(addr as *mut u8, MAX_ORDER_BYTES, true)
            }
            _ => {}
        }
    }

    /// Turns huge pages on when the policy says so with `adding` more
    /// pages about to go online: `always` from the start, `dense` once the
    /// zone is large enough — then every online block is advised.
    pub(super) fn update_thp(&mut self, adding: usize) {
        let zone = self.zone;
        if zone.thp_active() {
            return;
        }
        let on = match zone.thp_policy() {
            ThpPolicy::Never => false,
            ThpPolicy::Always => true,
            ThpPolicy::Dense => (self.inner.managed + adding) << PAGE_SHIFT >= THP_DENSE_MIN_BYTES,
        };
        if !on {
            return;
        }
        zone.thp_active.store(true, Relaxed);
        zone.thp_backlog.store(true, Relaxed);
        let dense = zone.thp_policy() == ThpPolicy::Dense;
        self.inner.thp_claims = dense;
        section::for_each(zone.tag(), |h| {
            // SAFETY: h is a live header of this zone; lock held.
            let bits = unsafe { section::online_bits(h) };
            for a in section::online_block_addrs(h as usize, bits) {
                if !dense {
                    sys::advise_huge(a as *mut u8, MAX_ORDER_BYTES, true);
                }
                for pb in (a..a + MAX_ORDER_BYTES).step_by(PAGEBLOCK_BYTES) {
                    if dense {
                        if !huge_under_dense(section::pageblock_mt(pb)) {
                            continue;
                        }
                        sys::advise_huge(pb as *mut u8, PAGEBLOCK_BYTES, true);
                    }
                    // What was faulted in before is 4 KiB pages: the tick
                    // collapses it where it is dense (`collapse_some`).
                    // SAFETY: as above.
                    unsafe { mark_collapse_candidate(h, pb) };
                }
            }
        });
    }
}

/// Candidates one tick looks at, at most, for ones dense enough to
/// collapse. (How many it collapses is the tick's to say: `maint.rs`.)
const COLLAPSE_EXAMINE_PER_TICK: usize = 64;
/// A pageblock is collapsed when at least this share of it, in 1/512ths,
/// is resident (khugepaged's max_ptes_none is 511: any; ours is stricter,
/// so a sparse pageblock is not filled with zeros).
const COLLAPSE_MIN_RESIDENT: usize = 448;

impl Zone {
    /// The tick's share, as khugepaged's: pageblocks that were faulted in
    /// 4 KiB pages before huge pages were asked for, and are mostly
    /// resident now, are collapsed into huge pages (MADV_COLLAPSE, Linux
    /// 6.1+; on an older kernel nothing happens) — at most `max` tried,
    /// looking at no more than [`COLLAPSE_EXAMINE_PER_TICK`] candidates.
    /// Returns how many were tried.
    pub fn collapse_some(&self, max: usize) -> usize {
        if !self.has_collapse_backlog() || max == 0 {
            return 0;
        }
        let dense = self.thp_policy() == ThpPolicy::Dense;
        let (mut tried, mut done) = (0, 0);
        for _ in 0..COLLAPSE_EXAMINE_PER_TICK {
            if tried == max {
                break;
            }
            let mut next = None;
            {
                let _g = self.lock();
                section::for_each(self.tag(), |h| {
                    if next.is_none() {
                        // SAFETY: h is a live header of this zone; lock
                        // held.
                        next = unsafe { take_collapse_candidate(h) };
                    }
                });
            }
            let Some(pb) = next else {
                self.thp_backlog.store(false, Relaxed);
                break;
            };
            // Under dense only long-lived small objects' pageblocks
            // become huge.
            if dense && !huge_under_dense(section::pageblock_mt(pb)) {
                continue;
            }
            let resident = sys::resident_pages(pb as *const u8, PAGEBLOCK_BYTES);
            if resident >= COLLAPSE_MIN_RESIDENT {
                tried += 1;
                done += usize::from(sys::collapse(pb as *mut u8, PAGEBLOCK_BYTES));
            }
        }
        self.thp_collapsed.fetch_add(done, Relaxed);
        tried
    }

    /// Whether pageblocks may wait for [`collapse_some`](Self::collapse_some).
    #[inline]
    pub fn has_collapse_backlog(&self) -> bool {
        self.thp_active() && self.thp_backlog.load(Relaxed)
    }

    /// Credits the collapses the heap's growth pays for: one per
    /// [`COLLAPSE_CREDIT_BYTES`] the heap — `heap_bytes`, the zone's and
    /// the huge blocks' — grew past the most it was credited for, up to
    /// [`COLLAPSE_CREDIT_MAX`] waiting. Between ticks, a program's thread
    /// collapses only what its own growth paid for (`maint::between_ticks`):
    /// a heap that grew by 1 GiB has faulted in 1 GiB, and 32 collapses of
    /// 2 MiB cost a few per cent of that; a heap that stopped growing pays
    /// for none.
    pub fn credit_collapses(&self, heap_bytes: usize) {
        let peak = self.thp_credit_peak.load(Relaxed);
        if heap_bytes < peak + COLLAPSE_CREDIT_BYTES {
            return;
        }
        let n = (heap_bytes - peak) / COLLAPSE_CREDIT_BYTES;
        if self
            .thp_credit_peak
            .compare_exchange(peak, peak + n * COLLAPSE_CREDIT_BYTES, Relaxed, Relaxed)
            .is_ok()
        {
            let had = self.thp_credit.load(Relaxed);
            self.thp_credit
                .store((had + n).min(COLLAPSE_CREDIT_MAX), Relaxed); // a hint
        }
    }

    /// Takes one collapse's credit, if there is any.
    pub fn take_collapse_credit(&self) -> bool {
        let c = &self.thp_credit;
        let mut v = c.load(Relaxed);
        while v > 0 {
            match c.compare_exchange_weak(v, v - 1, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
        false
    }

    /// Gives back one collapse's credit taken and not used.
    pub fn return_collapse_credit(&self) {
        self.thp_credit.fetch_add(1, Relaxed);
    }

    /// Pageblocks collapsed into huge pages so far.
    pub fn thp_collapsed(&self) -> usize {
        self.thp_collapsed.load(Relaxed)
    }
}

/// Heap growth that pays for one collapse between ticks (one 2 MiB copy
/// per 32 MiB faulted in: about 6%).
const COLLAPSE_CREDIT_BYTES: usize = 32 << 20;
/// Most collapses credit holds.
const COLLAPSE_CREDIT_MAX: usize = 32;

/// The index of pageblock `pb` in section `h` (whose header is at the
/// section's base).
fn pageblock_index(h: *mut SectionHeader, pb: usize) -> usize {
    (pb - h as usize) / PAGEBLOCK_BYTES
}

/// Sets pageblock `pb`'s bit in section `h`'s `unadvised` to `on`;
/// true if it changed.
///
/// # Safety
/// `h` is a live zone section header whose zone lock is held, `pb` one of
/// its pageblocks.
unsafe fn set_unadvised(h: *mut SectionHeader, pb: usize, on: bool) -> bool {
    let i = pageblock_index(h, pb);
    let bit = 1u64 << (i % 64);
    // SAFETY: forwarded contract.
    unsafe {
        let w = &mut (*h).unadvised[i / 64];
        let was = *w & bit != 0;
        if on {
            *w |= bit;
        } else {
            *w &= !bit;
        }
        was != on
    }
}

/// Marks pageblock `pb` of section `h` as a candidate for collapsing into
/// a huge page.
///
/// # Safety
/// `h` is a live zone section header whose zone lock is held, `pb` one of
/// its pageblocks.
unsafe fn mark_collapse_candidate(h: *mut SectionHeader, pb: usize) {
    let i = pageblock_index(h, pb);
    // SAFETY: forwarded contract.
    unsafe { (*h).collapse_pending[i / 64] |= 1 << (i % 64) };
}

/// Takes the next pageblock to consider for a collapse — the address of a
/// marked pageblock whose block is still online — or `None` when none is
/// left.
///
/// # Safety
/// `h` is a live zone section header whose zone lock is held.
unsafe fn take_collapse_candidate(h: *mut SectionHeader) -> Option<usize> {
    // SAFETY: forwarded contract.
    unsafe {
        let online = (*h).online.load(Relaxed);
        for w in 0..(*h).collapse_pending.len() {
            while (*h).collapse_pending[w] != 0 {
                let i = w * 64 + (*h).collapse_pending[w].trailing_zeros() as usize;
                (*h).collapse_pending[w] &= !(1 << (i % 64));
                if online & (1 << (i * PAGEBLOCK_BYTES / MAX_ORDER_BYTES)) != 0 {
                    return Some(h as usize + i * PAGEBLOCK_BYTES);
                }
            }
        }
        None
    }
}
