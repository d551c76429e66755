//! A pageset: lists of cached blocks per (migratetype, order 0..=3) in
//! front of the zone, with the state of `tune.rs` (the kernel's `struct
//! per_cpu_pages`).
//!
//! Lock discipline, as the kernel's: the pageset lock is only ever *tried*
//! on the alloc and free paths; when it is busy (another thread on this CPU
//! was preempted holding it, or we migrated), the operation goes straight
//! to the zone. Maintenance (decay, expiry, drain-all) waits for it, but
//! drains in batch-sized chunks, retaking both locks between chunks, so no
//! one waits long (BATCH_SCALE_MAX bounds the free path's bulk in the same
//! spirit, seed 000 patch 4).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::geometry::{NR_PCP_ORDERS, PAGE_ALLOC_COSTLY_ORDER};
use crate::page::{
    order_to_pindex, pindex_to_order, MigrateType, Page, PageKind, PageList, MIGRATE_TYPES,
};
use crate::page_alloc::knobs::{heuristic, Knobs};
use crate::page_alloc::zone::Zone;
use crate::section::{self, page_addr};
use crate::sync::cpu_lock::CpuLock;
use crate::sync::{BiasedLock, Entry};

use super::class_lists::LargeLists;
use super::tune::{self, PcpState, PCPF_FREE_HIGH_BATCH};

/// Lists per pageset: one per migratetype and order 0..=COSTLY.
pub(crate) const NR_PCP_LISTS: usize = MIGRATE_TYPES * NR_PCP_ORDERS;
/// Ticks without a single alloc or free after which an idle pageset is
/// drained completely (the kernel's `pcp->expire` for remote pagesets; our
/// idle CPUs and idle threads need it too).
pub(crate) const PCP_EXPIRE_TICKS: u32 = 3;

/// Event counters of a pageset (names from the seeds). Written under the
/// pageset lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcpCounters {
    /// Pages taken from the zone on refill.
    pub alloc_zone: u64,
    /// Pages given back to the zone in bulk.
    pub free_zone: u64,
    /// Drains for consecutive high-order frees.
    pub free_high: u64,
    /// Refills from the zone.
    pub refills: u64,
    /// Bulk frees to the zone (free path, decay, expiry, drain-all).
    pub drains: u64,
    /// Pages allocated from this pageset.
    pub pgalloc: u64,
    /// Allocations it served (one per block, whatever its order).
    pub allocs: u64,
    /// Pages freed to this pageset.
    pub pgfree: u64,
    /// Pages drained by the tick (decay and expiry).
    pub decayed: u64,
    /// The most pages one refill took from the zone.
    pub refill_max: u64,
    /// The most pages one bulk free gave back to the zone.
    pub drain_max: u64,
    /// Large blocks allocated through the large lists.
    pub large_alloc: u64,
    /// Of those, served from a list without the zone.
    pub large_hits: u64,
    /// Pages the large lists took from the zone.
    pub large_refill_pages: u64,
    /// Pages the large lists gave back to the zone.
    pub large_drained_pages: u64,
    /// free_high drains of the large lists.
    pub large_free_high: u64,
    /// Large-list misses served by a block of another pageset's lists.
    pub large_steals: u64,
    /// Pages on the large lists now.
    pub large_count: u64,
    /// The large lists' high now.
    pub large_high: u64,
    /// What the large lists may hold resident now, in pages (`waiting`).
    pub large_resident: u64,
    /// Large blocks measured (mincore) on the lists.
    pub large_measured: u64,
    /// Pages of large blocks the lists gave back to the OS (give-back).
    pub large_released_pages: u64,
}

/// The lock-guarded part of a pageset.
pub struct PagesetInner {
    /// The tuning state.
    pub s: PcpState,
    /// Cached blocks (kind `Pcp`), newest first.
    pub lists: [PageList; NR_PCP_LISTS],
    /// Counters.
    pub c: PcpCounters,
    /// Exact-size large blocks per class, with their own tuning.
    pub large: LargeLists,
    /// pgalloc + pgfree at the last tick (to detect idleness).
    last_activity: u64,
    /// Consecutive idle ticks.
    idle_ticks: u32,
}

/// A pageset (see the module docs).
///
/// Invariants (checked by [`Pageset::check`]): `s.count` = Σ over lists of
/// blocks × 2^order; every block on list `pindex` is a `Pcp` head of order
/// `pindex_to_order(pindex)` whose `migratetype` is the list's.
#[repr(C, align(64))]
pub struct Pageset {
    /// The lock of a shared (per-CPU) pageset: its own CPU's threads take
    /// it with a restartable sequence where the process has one
    /// (`sys/rseq.rs`), anyone else with an atomic swap.
    pub(super) cpu_lock: CpuLock,
    /// The lock of a thread's own pageset (`biased`).
    pub(super) lock: BiasedLock,
    /// A thread's own pageset: its owner enters without atomics.
    pub(super) biased: core::sync::atomic::AtomicBool,
    /// Times the lock was busy and the operation went to the zone.
    pub lock_busy: AtomicU64,
    /// Times a critical section entering this pageset was aborted by the
    /// kernel (preemption, migration, signal, a remote taker's fence).
    pub rseq_aborts: AtomicU64,
    /// Next pageset in the pool's list of all pagesets.
    pub(crate) next_all: AtomicPtr<Pageset>,
    /// Next pageset on the pool's free list (thread mode).
    pub(crate) next_free: AtomicPtr<Pageset>,
    /// The large lists' `waiting()` and `count` as of the last lock
    /// release, for looks without the lock (the give-back's).
    large_waiting: AtomicUsize,
    large_pages: AtomicUsize,
    inner: UnsafeCell<PagesetInner>,
}

// SAFETY: `inner` is only touched with the lock held (`cpu_lock`, or
// `lock` when biased).
unsafe impl Sync for Pageset {}
// SAFETY: as above.
unsafe impl Send for Pageset {}

/// How a [`PagesetGuard`] holds its pageset.
#[derive(Clone, Copy)]
pub(super) enum Held {
    /// A thread pageset's owner, entered this way.
    Owner(Entry),
    /// A thread pageset, through its lock.
    Remote,
    /// A shared pageset, through `cpu_lock` (from anywhere, or by a local
    /// critical section).
    Cpu,
}

/// Guard for a held pageset lock.
pub struct PagesetGuard<'a> {
    pub(super) ps: &'a Pageset,
    pub(super) how: Held,
}

impl core::ops::Deref for PagesetGuard<'_> {
    type Target = PagesetInner;
    fn deref(&self) -> &PagesetInner {
        // SAFETY: the guard holds the lock.
        unsafe { &*self.ps.inner.get() }
    }
}

impl core::ops::DerefMut for PagesetGuard<'_> {
    fn deref_mut(&mut self) -> &mut PagesetInner {
        // SAFETY: the guard holds the lock and is borrowed mutably.
        unsafe { &mut *self.ps.inner.get() }
    }
}

impl Drop for PagesetGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Stored only when changed: a store takes the line from readers.
        let waiting = self.large.waiting();
        if self.ps.large_waiting.load(Relaxed) != waiting {
            self.ps.large_waiting.store(waiting, Relaxed);
        }
        let pages = self.large.count;
        if self.ps.large_pages.load(Relaxed) != pages {
            self.ps.large_pages.store(pages, Relaxed);
        }
        // SAFETY: the guard holds the lock the way it records.
        unsafe {
            match self.how {
                Held::Owner(e) => self.ps.lock.owner_exit(e),
                Held::Remote => self.ps.lock.remote_unlock(),
                Held::Cpu => self.ps.cpu_lock.unlock(),
            }
        }
    }
}

impl Pageset {
    /// An empty pageset.
    pub const fn new() -> Pageset {
        Pageset {
            cpu_lock: CpuLock::new(),
            lock: BiasedLock::new(),
            biased: core::sync::atomic::AtomicBool::new(false),
            lock_busy: AtomicU64::new(0),
            rseq_aborts: AtomicU64::new(0),
            next_all: AtomicPtr::new(core::ptr::null_mut()),
            next_free: AtomicPtr::new(core::ptr::null_mut()),
            large_waiting: AtomicUsize::new(0),
            large_pages: AtomicUsize::new(0),
            inner: UnsafeCell::new(PagesetInner {
                s: PcpState::new(0),
                lists: [const { PageList::new() }; NR_PCP_LISTS],
                c: PcpCounters {
                    alloc_zone: 0,
                    free_zone: 0,
                    free_high: 0,
                    refills: 0,
                    drains: 0,
                    pgalloc: 0,
                    allocs: 0,
                    pgfree: 0,
                    decayed: 0,
                    refill_max: 0,
                    drain_max: 0,
                    large_alloc: 0,
                    large_hits: 0,
                    large_refill_pages: 0,
                    large_drained_pages: 0,
                    large_free_high: 0,
                    large_steals: 0,
                    large_count: 0,
                    large_high: 0,
                    large_resident: 0,
                    large_measured: 0,
                    large_released_pages: 0,
                },
                large: LargeLists::new(),
                last_activity: 0,
                idle_ticks: 0,
            }),
        }
    }

    /// Sets or clears PCPF_FREE_HIGH_BATCH (from this CPU's cache slice).
    pub fn set_free_high_batch(&self, on: bool) {
        let mut g = self.lock();
        if on {
            g.s.flags |= PCPF_FREE_HIGH_BATCH;
        } else {
            g.s.flags &= !PCPF_FREE_HIGH_BATCH;
        }
    }

    /// Allocates a block of `order` (≤ COSTLY) for `mt` through this
    /// pageset (`rmqueue_pcplist`), refilling from the zone when the list
    /// is empty; straight from the zone when the lock is busy. Null when the
    /// zone is out of memory. The head comes back with kind `None`. `owner`:
    /// the caller owns this (thread) pageset.
    pub fn alloc(
        &self,
        zone: &Zone,
        order: u32,
        mt: MigrateType,
        k: &Knobs,
        owner: bool,
    ) -> *mut Page {
        self.alloc_entered(self.enter(owner), zone, order, mt, k)
    }

    /// [`alloc`](Self::alloc) with the way in already tried: `entered` is
    /// this pageset's guard, or None when its lock was busy.
    #[inline]
    pub fn alloc_entered(
        &self,
        entered: Option<PagesetGuard<'_>>,
        zone: &Zone,
        order: u32,
        mt: MigrateType,
        k: &Knobs,
    ) -> *mut Page {
        debug_assert!(order <= PAGE_ALLOC_COSTLY_ORDER);
        let Some(mut g) = entered else {
            self.lock_busy.fetch_add(1, Relaxed);
            return zone.alloc(order, mt);
        };
        tune::on_alloc(&mut g.s, order, k);
        let pindex = order_to_pindex(mt, order);
        if g.lists[pindex].is_empty() {
            // ZONE_BELOW_HIGH is detected here, on the way to the zone.
            let below = k.heuristics.has(heuristic::BELOW_HIGH) && zone.check_below_high(order);
            let params = zone.pcp_params();
            let inner = &mut *g;
            let batch = tune::nr_pcp_alloc(&mut inner.s, &params, order, below, k);
            let n = zone.rmqueue_bulk(order, batch.max(1) as usize, mt, &mut inner.lists[pindex]);
            let pages = (n as i32) << order;
            inner.s.count += pages;
            inner.c.alloc_zone += pages as u64;
            inner.c.refills += 1;
            inner.c.refill_max = inner.c.refill_max.max(pages as u64);
            if n == 0 {
                return core::ptr::null_mut();
            }
        }
        // SAFETY: the list is non-empty and holds our Pcp blocks.
        let p = unsafe { g.lists[pindex].pop_front() };
        g.s.count -= 1 << order;
        g.c.pgalloc += 1 << order;
        g.c.allocs += 1;
        // SAFETY: p is ours now.
        unsafe { (*p).set_kind(PageKind::None) };
        p
    }

    /// Frees block `head` of `order` (≤ COSTLY) to this pageset
    /// (`free_unref_page` + `free_unref_page_commit`), draining to the zone
    /// as `tune.rs` decides; straight to the zone when the lock is busy.
    /// Returns whether pages went back to the zone.
    ///
    /// # Safety
    /// `head` heads a block of `zone` of `order` that the caller owns and no
    /// longer uses; its other descriptors are `None`.
    pub unsafe fn free(
        &self,
        zone: &Zone,
        head: *mut Page,
        order: u32,
        k: &Knobs,
        owner: bool,
    ) -> bool {
        // SAFETY: forwarded contract.
        unsafe { self.free_entered(self.enter(owner), zone, head, order, k) }
    }

    /// [`free`](Self::free) with the way in already tried: `entered` is
    /// this pageset's guard, or None when its lock was busy.
    ///
    /// # Safety
    /// As [`free`](Self::free).
    #[inline]
    pub unsafe fn free_entered(
        &self,
        entered: Option<PagesetGuard<'_>>,
        zone: &Zone,
        head: *mut Page,
        order: u32,
        k: &Knobs,
    ) -> bool {
        debug_assert!(order <= PAGE_ALLOC_COSTLY_ORDER);
        let Some(mut g) = entered else {
            self.lock_busy.fetch_add(1, Relaxed);
            // SAFETY: forwarded contract.
            unsafe { zone.free(head, order) };
            return true;
        };
        let mt = section::pageblock_mt(page_addr(head));
        let pindex = order_to_pindex(mt, order);
        // SAFETY: the caller hands head over; it joins our list.
        unsafe {
            (*head).set_kind(PageKind::Pcp);
            (*head).order = order as u8;
            (*head).migratetype = mt as u8;
            g.lists[pindex].push_front(head);
        }
        g.c.pgfree += 1 << order;
        let below = k.heuristics.has(heuristic::BELOW_HIGH) && zone.below_high();
        let params = zone.pcp_params();
        let d = tune::free_unref_page_commit(&mut g.s, &params, order, below, k);
        if d.free_high {
            g.c.free_high += 1;
        }
        if d.to_free == 0 {
            return false;
        }
        free_pcppages_bulk(zone, &mut g, d.to_free, pindex);
        drop(g);
        if k.heuristics.has(heuristic::BELOW_HIGH) {
            zone.clear_below_high_if_ok();
        }
        true
    }

    /// The maintenance tick for this pageset: decay an auto-tuned high
    /// (`decay_pcp_high`) and drain the excess; drain everything once the
    /// pageset has been idle for PCP_EXPIRE_TICKS ticks. Returns the pages
    /// drained.
    pub fn tick(&self, zone: &Zone, k: &Knobs) -> usize {
        let (to_drain, batch) = {
            let mut g = self.lock();
            let activity = g.c.pgalloc + g.c.pgfree;
            if activity == g.last_activity {
                g.idle_ticks += 1;
            } else {
                g.idle_ticks = 0;
                g.last_activity = activity;
            }
            let params = zone.pcp_params();
            let mut to_drain = tune::decay_pcp_high(&mut g.s, &params, k);
            let large = if g.idle_ticks >= PCP_EXPIRE_TICKS {
                to_drain = g.s.count;
                g.large.drain_all(zone)
            } else {
                g.large.tick(zone, &params, k)
            };
            g.c.decayed += large as u64;
            g.c.free_zone += large as u64;
            (to_drain, params.batch.max(1) as i32)
        };
        let drained = self.drain_chunks(zone, to_drain, batch);
        if drained > 0 {
            let mut g = self.lock();
            g.c.decayed += drained as u64;
        }
        drained
    }

    /// The owner of a thread pageset gives every cached page back (thread
    /// exit): one zone-lock hold per batch, and no membarrier, since the
    /// owner itself is the one draining.
    pub fn drain_owned(&self, zone: &Zone) -> usize {
        let batch = zone.pcp_params().batch.max(1) as i32;
        let mut total = 0;
        if let Some(mut g) = self.enter(true) {
            total += g.large.drain_all(zone);
        }
        loop {
            let Some(mut g) = self.enter(true) else {
                return total;
            };
            let chunk = g.s.count.min(batch);
            if chunk <= 0 {
                return total;
            }
            total += free_pcppages_bulk(zone, &mut g, chunk, 0);
        }
    }

    /// Gives every cached page back to the zone (`drain_pages_zone`).
    pub fn drain(&self, zone: &Zone) -> usize {
        let (count, batch, large) = {
            let mut g = self.lock();
            let large = g.large.drain_all(zone);
            (g.s.count, zone.pcp_params().batch.max(1) as i32, large)
        };
        let mut total = large + self.drain_chunks(zone, count, batch);
        // Frees may have raced in between chunks; finish them.
        loop {
            let left = self.lock().s.count;
            if left == 0 {
                return total;
            }
            total += self.drain_chunks(zone, left, batch);
        }
    }

    /// Drains `pages` in chunks of `batch`, retaking the locks per chunk.
    fn drain_chunks(&self, zone: &Zone, mut pages: i32, batch: i32) -> usize {
        let mut total = 0;
        while pages > 0 {
            let mut g = self.lock();
            let chunk = pages.min(batch).min(g.s.count);
            if chunk <= 0 {
                break;
            }
            total += free_pcppages_bulk(zone, &mut g, chunk, 0);
            pages -= chunk;
        }
        total
    }

    /// What the large lists may hold resident, in pages (a racy read:
    /// `LargeLists::waiting` as of the last lock release).
    #[inline]
    pub fn large_waiting(&self) -> usize {
        self.large_waiting.load(Relaxed)
    }

    /// Pages on the large lists (a racy read, as `large_waiting`).
    #[inline]
    pub fn large_pages(&self) -> usize {
        self.large_pages.load(Relaxed)
    }

    /// What this pageset may hold resident, in pages: the order lists'
    /// pages and what the large lists may hold (`LargeLists::waiting`).
    pub fn waiting(&self) -> usize {
        let g = self.lock();
        g.s.count.max(0) as usize + g.large.waiting()
    }

    /// Pages cached now (order lists and large lists).
    pub fn count(&self) -> usize {
        let g = self.lock();
        g.s.count.max(0) as usize + g.large.count
    }

    /// Copies the state and counters.
    pub fn snapshot(&self) -> (PcpState, PcpCounters) {
        let g = self.lock();
        let mut c = g.c;
        let l = &g.large;
        c.large_alloc = l.c.alloc;
        c.large_hits = l.c.hits;
        c.large_refill_pages = l.c.refill_pages;
        c.large_drained_pages = l.c.drained_pages;
        c.large_free_high = l.c.free_high;
        c.large_steals = l.c.steals;
        c.large_count = l.count as u64;
        c.large_high = l.high() as u64;
        c.large_resident = l.waiting() as u64;
        c.large_measured = l.measured();
        c.large_released_pages = l.c.released_pages;
        (g.s, c)
    }

    /// Checks the pageset invariants; returns the pages cached (order and
    /// large lists).
    pub fn check(&self) -> usize {
        let g = self.lock();
        let mut pages = 0usize;
        for (pindex, list) in g.lists.iter().enumerate() {
            // SAFETY: list elements are our Pcp blocks; lock held.
            unsafe { list.check() };
            let order = pindex_to_order(pindex);
            let mut p = list.first();
            while !p.is_null() {
                // SAFETY: as above.
                unsafe {
                    assert_eq!((*p).kind(), PageKind::Pcp, "pcp list holds a non-pcp block");
                    assert_eq!(
                        u32::from((*p).order),
                        order,
                        "pcp block on the wrong order list"
                    );
                    assert_eq!(
                        order_to_pindex((*p).mt(), order),
                        pindex,
                        "pcp block on the wrong type list"
                    );
                    p = (*p).next;
                }
                pages += 1 << order;
            }
        }
        assert_eq!(
            pages as i32, g.s.count,
            "pageset count disagrees with its lists"
        );
        pages + g.large.check()
    }
}

impl Default for Pageset {
    fn default() -> Self {
        Self::new()
    }
}

/// Frees `count` pages from the pageset's lists to the zone under one
/// zone-lock hold (`free_pcppages_bulk`): lists round-robin starting with
/// `pindex`, each emptied from its cold end before moving on. Returns the
/// pages freed.
fn free_pcppages_bulk(zone: &Zone, g: &mut PagesetGuard<'_>, count: i32, pindex: usize) -> usize {
    let mut count = count.min(g.s.count);
    if count <= 0 {
        return 0;
    }
    let mut freed = 0usize;
    let mut pindex = pindex.wrapping_sub(1);
    let mut z = zone.lock();
    while count > 0 {
        // Next non-empty list, round-robin.
        loop {
            pindex = if pindex >= NR_PCP_LISTS - 1 {
                0
            } else {
                pindex + 1
            };
            if !g.lists[pindex].is_empty() {
                break;
            }
        }
        let order = pindex_to_order(pindex);
        let nr_pages = 1i32 << order;
        loop {
            // SAFETY: the list is non-empty; its blocks are ours (lock held).
            let p = unsafe { g.lists[pindex].pop_back() };
            count -= nr_pages;
            g.s.count -= nr_pages;
            freed += nr_pages as usize;
            // SAFETY: p is a Pcp block of this zone just taken off our list.
            unsafe { z.free_one_page(p, order) };
            if count <= 0 || g.lists[pindex].is_empty() {
                break;
            }
        }
    }
    z.inner.c.bulk_max = z.inner.c.bulk_max.max(freed as u64);
    drop(z);
    g.c.free_zone += freed as u64;
    g.c.drains += 1;
    g.c.drain_max = g.c.drain_max.max(freed as u64);
    freed
}
