//! What the zone shows outside: a consistent copy of its state and
//! counters (the report's zone lines), and what of it is resident.

use core::sync::atomic::Ordering::Relaxed;

use super::watermark::{PcpParams, WMARK_HIGH, WMARK_LOW, WMARK_MIN};
use super::{Zone, ZoneCounters};
use crate::geometry::NR_PAGE_ORDERS;
use crate::page::MIGRATE_TYPES;
use crate::section;

impl Zone {
    /// A consistent copy of the zone's state and counters.
    pub fn snapshot(&self) -> ZoneSnapshot {
        let g = self.lock();
        let z = &*g.inner;
        let mut free_per_order = [[0usize; MIGRATE_TYPES]; NR_PAGE_ORDERS];
        for (o, row) in free_per_order.iter_mut().enumerate() {
            for (mt, n) in row.iter_mut().enumerate() {
                *n = z.free_area[o][mt].len();
            }
        }
        let lock = self.lock_stats();
        ZoneSnapshot {
            managed: z.managed,
            free: z.free,
            clean_free: z.clean_free,
            isolated: z.isolated,
            nr_free: z.nr_free,
            free_per_order,
            wmark: [
                self.wmark(WMARK_MIN),
                self.wmark(WMARK_LOW),
                self.wmark(WMARK_HIGH),
            ],
            below_high: self.below_high(),
            pcp: self.pcp_params(),
            memory_limit: if self.budget.has_limit() {
                self.budget.limit()
            } else {
                0
            },
            budget_used: self.budget.used(),
            budget_peak: self.budget.peak(),
            charged: z.charged,
            counters: z.c,
            lock_acquisitions: lock.acquisitions.load(Relaxed),
            lock_contended: lock.contended.load(Relaxed),
            lock_wait_ns: lock.wait_ns.load(Relaxed),
        }
    }

    /// Bytes of the zone's memory resident now, as the OS counts them
    /// (mincore): its online blocks and its sections' descriptor blocks.
    /// Taken without the zone lock: a block going online or offline
    /// meanwhile may or may not be counted.
    pub fn resident_bytes(&self) -> usize {
        let mut pages = 0;
        section::for_each(self.tag(), |h| {
            pages +=
                crate::sys::resident_pages(h as *const u8, crate::geometry::SECTION_META_BYTES);
            // SAFETY: h is a live header of this zone.
            let bits = unsafe { section::online_bits(h) };
            for a in section::online_block_addrs(h as usize, bits) {
                pages +=
                    crate::sys::resident_pages(a as *const u8, crate::geometry::MAX_ORDER_BYTES);
            }
        });
        pages << crate::geometry::PAGE_SHIFT
    }
}

/// A copy of a zone's state (see [`Zone::snapshot`]).
#[derive(Clone, Copy, Debug)]
pub struct ZoneSnapshot {
    /// Pages committed to the zone.
    pub managed: usize,
    /// Pages on the buddy lists.
    pub free: usize,
    /// Free pages not resident (fresh or released).
    pub clean_free: usize,
    /// Free pages isolated off the lists (a release under way).
    pub isolated: usize,
    /// Free blocks per order.
    pub nr_free: [usize; NR_PAGE_ORDERS],
    /// Free blocks per order and migratetype.
    pub free_per_order: [[usize; MIGRATE_TYPES]; NR_PAGE_ORDERS],
    /// min/low/high watermarks.
    pub wmark: [usize; 3],
    /// ZONE_BELOW_HIGH.
    pub below_high: bool,
    /// Pageset batch and high bounds.
    pub pcp: PcpParams,
    /// The memory limit in bytes (0 when none is set).
    pub memory_limit: usize,
    /// Bytes charged to the budget (zone pages and descriptors, huge
    /// blocks).
    pub budget_used: usize,
    /// The most bytes ever charged at once.
    pub budget_peak: usize,
    /// Zone pages charged (handed out since last given back to the OS).
    pub charged: usize,
    /// Event counters.
    pub counters: ZoneCounters,
    /// Zone lock acquisitions.
    pub lock_acquisitions: u64,
    /// Zone lock acquisitions that had to wait.
    pub lock_contended: u64,
    /// Nanoseconds spent waiting for the zone lock.
    pub lock_wait_ns: u64,
}
