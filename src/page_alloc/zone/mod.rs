//! The zone: one buddy allocator over all sections, with the kernel's
//! watermarks, migratetype fallback, growth and shrinking against a memory
//! budget, and the hand-back of idle memory to the OS.
//!
//! A userspace heap has no fixed RAM, so the kernel's notions map as
//! follows: *managed* pages are the pages the
//! zone has committed; *free* pages are those on the buddy lists (pages in
//! pagesets are not free, exactly as in the kernel). The zone grows by
//! committing MAX_ORDER blocks (≥ 4 MiB at a time) when an allocation
//! cannot be served, or when free memory falls below the low watermark
//! (our kswapd: it grows back to the high watermark), as far as the budget
//! allows (`budget.rs`); whole free blocks go offline again when the
//! runtime reclaims or stay idle (`grow.rs`). Sections and their
//! descriptors stay for the life of the process (seed 003). Memory that
//! stays free for a tick goes back to the OS with madvise (see
//! `release.rs`), whole pageblocks first.
//!
//! - `buddy.rs`: free lists, split and merge;
//! - `fallback.rs`: migratetype fallback (seed 004);
//! - `watermark.rs`: the kernel's sizing formulas;
//! - `config.rs`: how a zone is configured (limit, huge pages, ratios);
//! - `budget.rs`: the memory budget;
//! - `grow.rs`: blocks online and offline;
//! - `exact.rs`: blocks of exactly n pages, and runs of free blocks;
//! - `release.rs`: idle memory back to the OS;
//! - `dirty.rs`: resident free memory bounded by the memory in use;
//! - `thp.rs`: transparent huge pages for the zone's blocks;
//! - `check.rs`: the invariant walk.
//!
//! Locking: one zone lock ([`crate::sync::Locked`]) guards [`ZoneInner`].
//! A few mirrors (free and managed pages, watermarks, pcp bounds, flags)
//! are atomics written under the lock and read without it, as the kernel
//! reads `zone_page_state` and watermarks.

mod buddy;
pub(crate) mod budget;
mod charge;
mod check;
mod config;
mod dirty;
mod exact;
mod fallback;
mod grow;
mod release;
pub(crate) mod snapshot;
mod thp;
pub(crate) mod watermark;

use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

pub use buddy::{ZoneCounters, ZoneInner};
pub use budget::{Budget, NO_LIMIT};
pub use config::{ThpPolicy, ZoneConfig, DEFAULT_DIRTY_RATIO};
pub use fallback::StealRules;
use watermark::{PcpParams, WMARK_HIGH, WMARK_LOW};

use crate::page::{MigrateType, Page, PageKind, PageList};
use crate::section::{self, page_addr, SectionHeader};
use crate::sync::{ForkGate, Guard, Locked};

/// Zone flag: free pages fell below the high watermark (ZONE_BELOW_HIGH,
/// seed 000 patch 8). Set on the allocation path, cleared on the pcp free
/// path once the zone is back above the watermark.
pub(crate) const ZONE_BELOW_HIGH: u32 = 1 << 0;

/// Whether a request the free lists cannot serve may grow the zone.
///
/// A pageset's refill asks with `No`: the zone then says no rather than
/// grow, and the caller gives the blocks every CPU pageset caches back first
/// (`Pages::alloc_large`) — the kernel's `drain_all_pages` when a
/// high-order request fails, since pages pinned on the per-CPU lists may
/// be what keeps its buddies from merging — and asks again with `Yes`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Grow {
    /// Grow the zone if nothing free fits.
    Yes,
    /// Say no if nothing free fits.
    No,
}

/// A buddy zone. See the module docs.
pub struct Zone {
    /// The lock and what it guards, on lines of their own: the atomics
    /// below are read by every pageset without the lock (the kernel pads
    /// `struct zone` the same way).
    locked: CachePadded<Locked<ZoneInner>>,
    /// The free counts' mirrors, written at every release of the lock: on
    /// a line of their own, so the read-mostly atomics below (the epoch
    /// every large bin and the pcp bounds every pageset reads) do not
    /// bounce between CPUs with them.
    mirrors: CachePadded<FreeMirrors>,
    managed_pages: AtomicUsize,
    flags: AtomicU32,
    wmark: [AtomicUsize; 3],
    batch: AtomicU32,
    high_min: AtomicU32,
    high_max: AtomicU32,
    nr_cpus: AtomicUsize,
    high_fraction: AtomicUsize,
    /// The seed 004 stealing rules ([`StealRules::to_bits`]).
    steal: AtomicU8,
    /// Mirror of the maintenance epoch (ticks run), for readers without
    /// the lock.
    epoch: AtomicU32,
    /// The huge-page policy ([`ThpPolicy`] as u8).
    thp: AtomicU8,
    /// Whether the zone's blocks are advised for huge pages now (always,
    /// or dense once the heap is large enough).
    thp_active: core::sync::atomic::AtomicBool,
    /// Pageblocks the tick collapsed into huge pages (`thp.rs`).
    thp_collapsed: AtomicUsize,
    /// The heap size collapse credit was last given for (`thp.rs`).
    thp_credit_peak: AtomicUsize,
    /// Collapses the heap's growth paid for and not yet made (`thp.rs`).
    thp_credit: AtomicUsize,
    /// Pageblocks may be marked to collapse: set when they are, cleared
    /// when a walk finds none (`thp.rs`).
    thp_backlog: core::sync::atomic::AtomicBool,
    /// Small objects grouped by lifetime (the inverse of the kernel's
    /// `page_group_by_mobility_disabled`, one level finer).
    group_by_lifetime: core::sync::atomic::AtomicBool,
    /// The dirty limit's state (`dirty.rs`).
    dirty: DirtyLimit,
    /// Releases and shrinks under way (`release.rs`, `grow.rs`): fork
    /// waits for them, so no block is isolated across a fork.
    release_gate: ForkGate,
    /// The process heap's zone, whose first section the free path finds
    /// by arithmetic (`section::set_primary`); never a zone that is
    /// destroyed.
    process_heap: core::sync::atomic::AtomicBool,
    /// The memory budget (limit and bytes mapped).
    pub budget: Budget,
}

impl Zone {
    /// An empty, unconfigured zone (limit 0: it cannot grow).
    pub const fn new() -> Zone {
        Zone {
            locked: CachePadded::new(Locked::new(ZoneInner::new())),
            mirrors: CachePadded::new(FreeMirrors {
                free_pages: AtomicUsize::new(0),
                dirty_free_pages: AtomicUsize::new(0),
            }),
            managed_pages: AtomicUsize::new(0),
            flags: AtomicU32::new(0),
            wmark: [const { AtomicUsize::new(0) }; 3],
            batch: AtomicU32::new(1),
            high_min: AtomicU32::new(0),
            high_max: AtomicU32::new(0),
            nr_cpus: AtomicUsize::new(1),
            high_fraction: AtomicUsize::new(0),
            steal: AtomicU8::new(StealRules::SEED_004.to_bits()),
            epoch: AtomicU32::new(0),
            thp: AtomicU8::new(ThpPolicy::Never as u8),
            thp_active: core::sync::atomic::AtomicBool::new(false),
            thp_collapsed: AtomicUsize::new(0),
            thp_credit_peak: AtomicUsize::new(0),
            thp_credit: AtomicUsize::new(0),
            thp_backlog: core::sync::atomic::AtomicBool::new(false),
            group_by_lifetime: core::sync::atomic::AtomicBool::new(true),
            dirty: DirtyLimit::new(),
            release_gate: ForkGate::new(),
            process_heap: core::sync::atomic::AtomicBool::new(false),
            budget: Budget::new(),
        }
    }

    /// Marks the zone as the process heap's (the runtime's static zone,
    /// never destroyed), before it first grows: its first section becomes
    /// the primary one of `section::lookup`.
    pub(crate) fn mark_process_heap(&self) {
        self.process_heap.store(true, Relaxed);
    }

    /// Whether [`mark_process_heap`](Self::mark_process_heap) was called.
    pub(crate) fn is_process_heap(&self) -> bool {
        self.process_heap.load(Relaxed)
    }

    /// Sets limit, CPU split, high fraction and stealing rules.
    pub fn configure(&self, cfg: &ZoneConfig) {
        let mut g = self.lock();
        self.budget.configure(cfg.memory_limit, cfg.size);
        self.nr_cpus.store(cfg.nr_cpus.max(1), Relaxed);
        self.high_fraction.store(cfg.high_fraction, Relaxed);
        self.steal.store(cfg.steal.to_bits(), Relaxed);
        self.thp.store(cfg.thp as u8, Relaxed);
        self.group_by_lifetime.store(cfg.group_by_lifetime, Relaxed);
        self.dirty.ratio.store(cfg.dirty_ratio, Relaxed);
        g.update_sizes();
        g.update_thp(0);
    }

    /// A zone configured with `cfg` (tests and benchmarks; the allocator's
    /// own zone is a static).
    pub fn with_config(cfg: &ZoneConfig) -> Zone {
        let z = Zone::new();
        z.configure(cfg);
        z
    }

    /// Whether small objects are grouped by lifetime (see
    /// `heap/lifetime.rs`).
    #[inline]
    pub fn group_by_lifetime(&self) -> bool {
        self.group_by_lifetime.load(Relaxed)
    }

    /// A tag identifying this zone's sections.
    fn tag(&self) -> usize {
        self as *const Zone as usize
    }

    /// Takes the zone lock.
    #[inline]
    pub fn lock(&self) -> ZoneGuard<'_> {
        ZoneGuard {
            zone: self,
            inner: self.locked.lock(),
        }
    }

    /// The zone lock's counters (acquisitions, contended, wait_ns).
    pub fn lock_stats(&self) -> &crate::sync::RawLock {
        &self.locked.lock
    }

    /// Free pages (racy read of the mirror).
    #[inline]
    pub fn free_pages(&self) -> usize {
        self.mirrors.free_pages.load(Relaxed)
    }

    /// Free pages an allocation can have now: the resident ones, and as
    /// many of the others (fresh or given back to the OS, not charged) as
    /// the budget has room for, under its wall and its memory cgroup's
    /// target. Racy read of the mirrors. Without either this is every
    /// free page.
    #[inline]
    pub fn available_pages(&self) -> usize {
        let free = self.free_pages();
        let dirty = self.dirty_free_pages().min(free);
        let room = self.budget.room() >> crate::geometry::PAGE_SHIFT;
        dirty + (free - dirty).min(room)
    }

    /// Pages charged now, handed out or free (takes the lock).
    pub fn charged_pages(&self) -> usize {
        self.lock().inner.charged
    }

    /// Free pages that are charged: resident, or may be (racy read of
    /// the mirror; see `ZoneInner::dirty_free`).
    #[inline]
    pub fn dirty_free_pages(&self) -> usize {
        self.mirrors.dirty_free_pages.load(Relaxed)
    }

    /// Managed pages (racy read of the mirror).
    #[inline]
    pub fn managed_pages(&self) -> usize {
        self.managed_pages.load(Relaxed)
    }

    /// CPUs the pcp bounds are split over.
    #[inline]
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus.load(Relaxed)
    }

    /// Watermark `i` (WMARK_MIN/LOW/HIGH) in pages.
    #[inline]
    pub fn wmark(&self, i: usize) -> usize {
        self.wmark[i].load(Relaxed)
    }

    /// The pcp batch and high bounds for this zone's pagesets.
    #[inline]
    pub fn pcp_params(&self) -> PcpParams {
        PcpParams {
            batch: self.batch.load(Relaxed),
            high_min: self.high_min.load(Relaxed),
            high_max: self.high_max.load(Relaxed),
        }
    }

    /// Publishes the pcp bounds and managed pages (under the zone lock).
    fn set_pcp_params(&self, p: PcpParams, managed: usize) {
        self.batch.store(p.batch, Relaxed);
        self.high_min.store(p.high_min, Relaxed);
        self.high_max.store(p.high_max, Relaxed);
        self.managed_pages.store(managed, Relaxed);
    }

    /// Whether ZONE_BELOW_HIGH is set.
    #[inline]
    pub fn below_high(&self) -> bool {
        self.flags.load(Relaxed) & ZONE_BELOW_HIGH != 0
    }

    /// Clears ZONE_BELOW_HIGH if free pages are at or above the high
    /// watermark (the end of the kernel's free_unref_page_commit; the
    /// maintenance tick calls it too, so an idle zone does not stay
    /// flagged).
    pub fn clear_below_high_if_ok(&self) {
        if self.below_high() && self.available_pages() >= self.wmark(WMARK_HIGH) {
            let mut g = self.lock();
            publish_mirrors(&g);
            if self.below_high() && self.available_pages() >= self.wmark(WMARK_HIGH) {
                self.flags.fetch_and(!ZONE_BELOW_HIGH, Relaxed);
                g.inner.c.below_high_clear += 1;
            }
        }
    }

    /// Allocates one block of `order` for `mt` straight from the buddy
    /// lists (growing if needed). Null when the memory limit is reached.
    /// The head comes back with kind `None`, `order` set and CLEAN telling
    /// whether the memory is known to read as zero.
    pub fn alloc(&self, order: u32, mt: MigrateType) -> *mut Page {
        self.check_below_high(order);
        self.lock().rmqueue(order, mt)
    }

    /// Frees block `head` of `order` to the buddy lists, on the list of its
    /// pageblock's type, merging with free buddies.
    ///
    /// # Safety
    /// `head` heads a block of this zone of `order` that the caller owns and
    /// no longer uses.
    pub unsafe fn free(&self, head: *mut Page, order: u32) {
        // SAFETY: forwarded contract.
        unsafe { self.lock().free_one_page(head, order) }
    }

    /// Takes up to `count` blocks of `order` for `mt` in one lock hold and
    /// appends them to `list` as pcp pages (the kernel's rmqueue_bulk).
    /// Returns how many it got.
    pub fn rmqueue_bulk(
        &self,
        order: u32,
        count: usize,
        mt: MigrateType,
        list: &mut PageList,
    ) -> usize {
        self.take_bulk(count, 1 << order, list, |g| {
            let p = g.rmqueue(order, mt);
            if !p.is_null() {
                // SAFETY: p is a block we now own.
                unsafe {
                    (*p).set_kind(PageKind::Pcp);
                    (*p).migratetype = mt as u8;
                }
            }
            p
        })
    }

    /// Takes up to `count` blocks of `pages` pages each with `take` in one
    /// lock hold and appends them to `list`; records the largest bulk.
    /// Returns how many it got.
    pub(super) fn take_bulk(
        &self,
        count: usize,
        pages: usize,
        list: &mut PageList,
        mut take: impl FnMut(&mut ZoneGuard<'_>) -> *mut Page,
    ) -> usize {
        let mut g = self.lock();
        let mut n = 0;
        while n < count {
            let p = take(&mut g);
            if p.is_null() {
                break;
            }
            // SAFETY: p is a block we now own; it joins the caller's list.
            unsafe { list.push_back(p) };
            n += 1;
        }
        g.inner.c.bulk_max = g.inner.c.bulk_max.max((n * pages) as u64);
        n
    }

    /// Returns the largest bulk move since the last call and resets it.
    pub fn take_bulk_max(&self) -> u64 {
        let mut g = self.lock();
        core::mem::take(&mut g.inner.c.bulk_max)
    }

    /// Sets ZONE_BELOW_HIGH if an allocation of `order` would leave the
    /// zone below its high watermark (seed 000 patch 8: detected on the
    /// allocation path, before the zone is asked, where it costs least).
    /// Returns the flag.
    ///
    /// Because the zone grows back to its high watermark whenever it falls
    /// below the low one (our kswapd), the flag marks real pressure: the
    /// memory limit kept the zone from growing.
    pub fn check_below_high(&self, order: u32) -> bool {
        if self.below_high() {
            return true;
        }
        if self.available_pages().saturating_sub(1 << order) < self.wmark(WMARK_HIGH) {
            if self.set_below_high() {
                self.lock().inner.c.below_high_set += 1;
            }
            return true;
        }
        false
    }

    fn set_below_high(&self) -> bool {
        let old = self.flags.fetch_or(ZONE_BELOW_HIGH, Relaxed);
        old & ZONE_BELOW_HIGH == 0
    }

    /// Records that pagesets were drained to satisfy an allocation.
    pub fn count_drain_all(&self) {
        self.lock().inner.c.drain_all += 1;
    }

    /// Counts a drain of the pagesets' large lists before growing.
    pub fn count_drain_before_grow(&self) {
        self.lock().inner.c.drain_before_grow += 1;
    }

    /// Advances the maintenance epoch (one tick).
    pub fn advance_epoch(&self) {
        let mut g = self.lock();
        g.inner.epoch = g.inner.epoch.wrapping_add(1);
        self.epoch.store(g.inner.epoch, Relaxed);
        self.dirty_tick();
    }

    /// The maintenance epoch: how many ticks have run (racy read).
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Relaxed)
    }

    /// Unmaps every section of this zone.
    ///
    /// # Safety
    /// Nothing may use any page or descriptor of the zone afterwards; only
    /// for zones made by tests and benchmarks.
    pub unsafe fn destroy(&self) {
        let mut heads: [*mut SectionHeader; 64] = [core::ptr::null_mut(); 64];
        let mut n = 0;
        section::for_each(self.tag(), |h| {
            if n < heads.len() {
                heads[n] = h;
                n += 1;
            }
        });
        for &h in &heads[..n] {
            // SAFETY: the caller promises nothing uses the zone any more.
            unsafe { section::destroy(h) };
        }
        self.budget.reset();
    }
}

impl Default for Zone {
    fn default() -> Self {
        Self::new()
    }
}

/// Proof that the zone lock is held, with the operations that need it.
pub struct ZoneGuard<'a> {
    zone: &'a Zone,
    /// The locked state.
    pub inner: Guard<'a, ZoneInner>,
}

impl ZoneGuard<'_> {
    /// Allocates a block (see [`Zone::alloc`]) under the held lock.
    pub fn rmqueue(&mut self, order: u32, mt: MigrateType) -> *mut Page {
        let mut p = self.rmqueue_once(order, mt);
        if p.is_null() && self.grow(1 << order) {
            p = self.rmqueue_once(order, mt);
        }
        if !p.is_null() && !self.charge_block(p, order) {
            // The budget cannot take its pages: back it goes.
            // SAFETY: p is the block just taken, whole and ours.
            unsafe { self.free_one_page(p, order) };
            self.inner.c.pgfree -= 1 << order;
            self.inner.c.pgalloc -= 1 << order;
            self.inner.c.charge_fail += 1;
            p = core::ptr::null_mut();
        }
        if p.is_null() {
            self.inner.c.alloc_fail += 1;
        } else if self.inner.free < self.zone.wmark(WMARK_LOW) {
            // kswapd: bring free memory back up to the high watermark while
            // the budget allows, so pressure is the exception.
            self.grow(0);
        }
        p
    }

    /// Takes a block of `order` for `mt` from the free lists, falling back
    /// to other migratetypes as seed 004 specifies (`__rmqueue`), and
    /// counts it. Null if no block is large enough.
    fn rmqueue_once(&mut self, order: u32, mt: MigrateType) -> *mut Page {
        let p = self.take_block_of(order, mt);
        if !p.is_null() {
            self.inner.c.pgalloc += 1 << order;
        }
        p
    }

    /// A free block of `order` for `mt`: of its own type, else stolen from
    /// a fallback type's (`__rmqueue`). Not counted.
    pub(super) fn take_block_of(&mut self, order: u32, mt: MigrateType) -> *mut Page {
        let p = self.inner.rmqueue_smallest(order, mt);
        if !p.is_null() {
            return p;
        }
        let rules = StealRules::from_bits(self.zone.steal.load(Relaxed));
        self.inner.rmqueue_fallback(order, mt, rules)
    }

    /// Frees a block (see [`Zone::free`]) under the held lock.
    ///
    /// # Safety
    /// As [`Zone::free`].
    pub unsafe fn free_one_page(&mut self, head: *mut Page, order: u32) {
        let addr = page_addr(head);
        // SAFETY: the caller owns head (contract).
        if unsafe { (*head).flags } & crate::page::flags::CLEAN != 0 {
            // Never written since it came from the zone (a pageset's pages
            // drained unused, say): not resident, so not charged.
            self.uncharge_range(addr, 1 << order);
        }
        let mt = section::pageblock_mt(addr);
        // SAFETY: forwarded contract.
        unsafe { self.inner.free_one_page(head, order, mt) };
        self.inner.c.pgfree += 1 << order;
    }
}

impl Drop for ZoneGuard<'_> {
    fn drop(&mut self) {
        publish_mirrors(self);
    }
}

/// Refreshes the lock-free mirrors of the free counts from the locked
/// state.
fn publish_mirrors(g: &ZoneGuard<'_>) {
    // Stored only when changed: a store takes the line from every reader.
    let m = &g.zone.mirrors;
    let (free, dirty) = (g.inner.free, g.inner.dirty_free());
    if m.free_pages.load(Relaxed) != free {
        m.free_pages.store(free, Relaxed);
    }
    if m.dirty_free_pages.load(Relaxed) != dirty {
        m.dirty_free_pages.store(dirty, Relaxed);
    }
}

/// The lock-free mirrors of the zone's free counts (see `Zone::mirrors`).
struct FreeMirrors {
    free_pages: AtomicUsize,
    dirty_free_pages: AtomicUsize,
}

/// The dirty limit's state (`dirty.rs`).
struct DirtyLimit {
    /// Percent of the pages in use; 0: off.
    ratio: AtomicUsize,
    /// A limit the zone could not meet is not tried again until the
    /// resident free pages reach this (0: no such wait).
    retry_at: AtomicUsize,
    /// A thread is releasing for the limit.
    busy: core::sync::atomic::AtomicBool,
    /// The most pages in use seen in this tick, and in the last one (seen
    /// where the zone charges pages it hands out, and at each free that
    /// checks the limit while no block is isolated; racy maxima, a hint).
    peak: [AtomicUsize; 2],
}

/// Page counts found by [`Zone::check_invariants`], by block kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneWalk {
    /// Pages in free buddy blocks.
    pub free: usize,
    /// Pages in blocks cached on pagesets.
    pub pcp: usize,
    /// Pages isolated for release.
    pub isolated: usize,
    /// Pages handed out (slabs and large blocks).
    pub used: usize,
}

/// Which free MAX_ORDER blocks a shrink may take.
#[derive(Clone, Copy, Debug)]
pub enum Shrink {
    /// Every one (reclaim before an allocation fails, trim).
    All,
    /// Those already given back to the OS and free for at least this many
    /// ticks, while more than the high watermark stays free (the tick).
    Idle(u32),
}
