//! The zone: one buddy allocator over all sections, with the kernel's
//! watermarks, migratetype fallback, growth up to a memory limit, and the
//! hand-back of idle memory to the OS.
//!
//! A userspace heap has no fixed RAM, so the kernel's notions map as
//! follows: *managed* pages are the pages the
//! zone has committed; *free* pages are those on the buddy lists (pages in
//! pagesets are not free, exactly as in the kernel). The zone grows by
//! committing MAX_ORDER blocks (≥ 4 MiB at a time) when an allocation
//! cannot be served, or when free memory falls below the low watermark
//! (our kswapd: it grows back to the high watermark), until the memory
//! limit; then allocation fails cleanly and frees make it work again.
//!
//! Growth never unmaps: sections stay for the life of the process (seed
//! 003). Memory that stays free for a tick goes back to the OS with
//! madvise (see `release.rs`), whole pageblocks first.
//!
//! Locking: one zone lock ([`crate::sync::Locked`]) guards [`ZoneInner`].
//! A few mirrors (free and managed pages, watermarks, pcp bounds, flags)
//! are atomics written under the lock and read without it, as the kernel
//! reads `zone_page_state` and watermarks.

mod buddy;
mod fallback;
mod release;
pub mod watermark;

use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

pub use buddy::{ZoneCounters, ZoneInner};
pub use fallback::StealRules;
use watermark::{pcp_params, watermarks, PcpParams, WMARK_HIGH, WMARK_LOW, WMARK_MIN};

use crate::geometry::{
    MAX_ORDER_BYTES, MAX_ORDER_PAGES, MAX_PAGE_ORDER, NR_PAGE_ORDERS, PAGEBLOCK_NR_PAGES,
    PAGEBLOCK_ORDER, PAGE_SHIFT, PAGE_SIZE, SECTION_BLOCKS,
};
use crate::page::{flags, LargeBlock, MigrateType, Page, PageKind, PageList, MIGRATE_TYPES};
use crate::section::{self, desc_of, page_addr, SectionHeader};
use crate::sync::{Guard, Locked};

/// Zone flag: free pages fell below the high watermark (ZONE_BELOW_HIGH,
/// seed 000 patch 8). Set on the allocation path, cleared on the pcp free
/// path once the zone is back above the watermark.
pub const ZONE_BELOW_HIGH: u32 = 1 << 0;

/// Most MAX_ORDER blocks one growth step commits (64 MiB).
const MAX_GROW_BLOCKS: usize = 16;

/// How a zone is sized and behaves; fixed when the zone is configured.
#[derive(Clone, Copy, Debug)]
pub struct ZoneConfig {
    /// Bytes the zone (plus huge allocations charged to its budget) may map.
    pub memory_limit: usize,
    /// CPUs the pcp high bounds are split over.
    pub nr_cpus: usize,
    /// 0: auto-tune pcp high; ≥ 8: fixed high = managed / fraction / cpus.
    pub high_fraction: usize,
    /// Seed 004 stealing rules.
    pub steal: StealRules,
}

impl ZoneConfig {
    /// A configuration with the given limit and the seed's final rules.
    pub fn with_limit(memory_limit: usize) -> ZoneConfig {
        ZoneConfig {
            memory_limit,
            nr_cpus: 1,
            high_fraction: 0,
            steal: StealRules::SEED_004,
        }
    }
}

/// The memory budget shared by the zone and the huge allocations: bytes
/// mapped may not exceed `limit`.
pub struct Budget {
    limit: AtomicUsize,
    used: AtomicUsize,
    /// The most `used` has been.
    peak: AtomicUsize,
}

impl Budget {
    const fn new() -> Budget {
        Budget {
            limit: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Takes `bytes` from the budget if they fit under the limit.
    pub fn try_charge(&self, bytes: usize) -> bool {
        let limit = self.limit.load(Relaxed);
        let mut used = self.used.load(Relaxed);
        loop {
            let Some(next) = used.checked_add(bytes) else {
                return false;
            };
            if next > limit {
                return false;
            }
            match self
                .used
                .compare_exchange_weak(used, next, Relaxed, Relaxed)
            {
                Ok(_) => {
                    if next > self.peak.load(Relaxed) {
                        self.peak.fetch_max(next, Relaxed);
                    }
                    return true;
                }
                Err(u) => used = u,
            }
        }
    }

    /// Gives `bytes` back.
    pub fn uncharge(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Relaxed);
    }

    /// Bytes charged now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The most bytes charged at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Relaxed)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }
}

/// A buddy zone. See the module docs.
pub struct Zone {
    /// The lock and what it guards, on lines of their own: the atomics
    /// below are read by every pageset without the lock (the kernel pads
    /// `struct zone` the same way).
    locked: CachePadded<Locked<ZoneInner>>,
    free_pages: AtomicUsize,
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
    /// The memory budget (limit and bytes mapped).
    pub budget: Budget,
}

impl Zone {
    /// An empty, unconfigured zone (limit 0: it cannot grow).
    pub const fn new() -> Zone {
        Zone {
            locked: CachePadded::new(Locked::new(ZoneInner::new())),
            free_pages: AtomicUsize::new(0),
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
            budget: Budget::new(),
        }
    }

    /// Sets limit, CPU split, high fraction and stealing rules.
    pub fn configure(&self, cfg: &ZoneConfig) {
        let mut g = self.lock();
        self.budget.limit.store(cfg.memory_limit, Relaxed);
        self.nr_cpus.store(cfg.nr_cpus.max(1), Relaxed);
        self.high_fraction.store(cfg.high_fraction, Relaxed);
        self.steal.store(cfg.steal.to_bits(), Relaxed);
        g.update_sizes();
    }

    /// A zone configured with `cfg` (tests and benchmarks; the allocator's
    /// own zone is a static).
    pub fn with_config(cfg: &ZoneConfig) -> Zone {
        let z = Zone::new();
        z.configure(cfg);
        z
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
        self.free_pages.load(Relaxed)
    }

    /// Managed pages (racy read of the mirror).
    #[inline]
    pub fn managed_pages(&self) -> usize {
        self.managed_pages.load(Relaxed)
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
        if self.below_high() && self.free_pages() >= self.wmark(WMARK_HIGH) {
            let mut g = self.lock();
            if self.below_high() && g.inner.free >= self.wmark(WMARK_HIGH) {
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
        let mut g = self.lock();
        let mut n = 0;
        while n < count {
            let p = g.rmqueue(order, mt);
            if p.is_null() {
                break;
            }
            // SAFETY: p is a block we now own; it joins the caller's list.
            unsafe {
                (*p).set_kind(PageKind::Pcp);
                (*p).migratetype = mt as u8;
                list.push_back(p);
            }
            n += 1;
        }
        let pages = (n as u64) << order;
        g.inner.c.bulk_max = g.inner.c.bulk_max.max(pages);
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
        if self.free_pages().saturating_sub(1 << order) < self.wmark(WMARK_HIGH) {
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

    /// Advances the maintenance epoch (one tick).
    pub fn advance_epoch(&self) {
        let mut g = self.lock();
        g.inner.epoch = g.inner.epoch.wrapping_add(1);
        self.epoch.store(g.inner.epoch, Relaxed);
    }

    /// The maintenance epoch: how many ticks have run (racy read).
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Relaxed)
    }

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
            nr_free: z.nr_free,
            free_per_order,
            wmark: [
                self.wmark(WMARK_MIN),
                self.wmark(WMARK_LOW),
                self.wmark(WMARK_HIGH),
            ],
            below_high: self.below_high(),
            pcp: self.pcp_params(),
            memory_limit: self.budget.limit(),
            budget_used: self.budget.used(),
            budget_peak: self.budget.peak(),
            counters: z.c,
            lock_acquisitions: lock.acquisitions.load(Relaxed),
            lock_contended: lock.contended.load(Relaxed),
            lock_wait_ns: lock.wait_ns.load(Relaxed),
        }
    }

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
                        if (*p).flags & flags::CLEAN != 0 {
                            clean += 1 << o;
                        }
                        p = (*p).next;
                    }
                }
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
        section::for_each(self.tag(), |h| {
            // SAFETY: for_each passes live headers of this zone.
            assert!(unsafe { section::header_ok(h) });
            // SAFETY: h is a live header of this zone; lock held.
            let blocks = unsafe { (*h).committed_blocks };
            for b in 1..blocks {
                let start = h as usize + b * MAX_ORDER_BYTES;
                let end = start + MAX_ORDER_BYTES;
                managed += MAX_ORDER_PAGES;
                let mut a = start;
                while a < end {
                    let d = desc_of(a);
                    // SAFETY: committed descriptor; lock held.
                    let (kind, order) = unsafe { ((*d).kind(), (*d).order as u32) };
                    assert!(order <= MAX_PAGE_ORDER);
                    assert_eq!(a % (PAGE_SIZE << order), 0, "block head not aligned");
                    // SAFETY: as above.
                    let pages = unsafe { block_pages(d) };
                    match kind {
                        PageKind::Buddy => walked_free += pages,
                        PageKind::Pcp => pcp += pages,
                        PageKind::Isolated => isolated += pages,
                        PageKind::Large | PageKind::Slab | PageKind::Cached => used += pages,
                        PageKind::None
                        | PageKind::SlabTail
                        | PageKind::Huge
                        | PageKind::HugeCached => {
                            panic!("page {a:#x} is covered by no block (kind {kind:?})")
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
                assert_eq!(a, end, "a block runs past its MAX_ORDER block");
            }
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
            let blocks = unsafe { (*h).committed_blocks };
            for b in 1..blocks {
                let start = h as usize + b * MAX_ORDER_BYTES;
                let end = start + MAX_ORDER_BYTES;
                let mut a = start;
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
            }
        });
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
        self.budget.used.store(0, Relaxed);
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
    /// to other migratetypes as seed 004 specifies (`__rmqueue`). Null if
    /// no block is large enough.
    fn rmqueue_once(&mut self, order: u32, mt: MigrateType) -> *mut Page {
        let mut p = self.inner.rmqueue_smallest(order, mt);
        if p.is_null() {
            let rules = StealRules::from_bits(self.zone.steal.load(Relaxed));
            p = self.inner.rmqueue_fallback(order, mt, rules);
        }
        if !p.is_null() {
            self.inner.c.pgalloc += 1 << order;
        }
        p
    }

    /// Frees a block (see [`Zone::free`]) under the held lock.
    ///
    /// # Safety
    /// As [`Zone::free`].
    pub unsafe fn free_one_page(&mut self, head: *mut Page, order: u32) {
        let mt = section::pageblock_mt(page_addr(head));
        // SAFETY: forwarded contract.
        unsafe { self.inner.free_one_page(head, order, mt) };
        self.inner.c.pgfree += 1 << order;
    }

    /// Commits more memory: at least `need` pages' worth of whole MAX_ORDER
    /// blocks, more when below the high watermark or to grow the heap by an
    /// eighth, as the budget allows. Returns whether it grew by at least
    /// `need` pages (or anything at all when `need` is 0).
    pub fn grow(&mut self, need: usize) -> bool {
        let z = &mut *self.inner;
        let high = self.zone.wmark(WMARK_HIGH);
        let want = (need + high.saturating_sub(z.free)).max(z.managed / 8);
        let want_blocks = want.div_ceil(MAX_ORDER_PAGES).clamp(1, MAX_GROW_BLOCKS);
        let need_blocks = need.div_ceil(MAX_ORDER_PAGES).max(1);
        let budget = &self.zone.budget;
        let blocks = if budget.try_charge(want_blocks * MAX_ORDER_BYTES) {
            want_blocks
        } else if need_blocks < want_blocks && budget.try_charge(need_blocks * MAX_ORDER_BYTES) {
            need_blocks
        } else {
            return false;
        };
        let mut added = 0;
        while added < blocks {
            if z.grow_section.is_null() {
                match section::create(self.zone.tag()) {
                    Some(h) => z.grow_section = h,
                    None => break,
                }
            }
            let h = z.grow_section;
            // SAFETY: h is our live section and we hold the zone lock.
            let b = unsafe { (*h).committed_blocks };
            // SAFETY: as above; block b is the next uncommitted one.
            if !unsafe { section::commit_block(h, b) } {
                // SAFETY: as above.
                if unsafe { (*h).reserved } || b == 1 {
                    break; // the OS is out of memory
                }
                // Something else lives past this section's last block: go
                // on in a new section.
                z.grow_section = core::ptr::null_mut();
                continue;
            }
            let addr = h as usize + b * MAX_ORDER_BYTES;
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
                (*h).committed_blocks = b + 1;
                z.add_free(
                    desc_of(addr),
                    MAX_PAGE_ORDER,
                    MigrateType::Movable,
                    true,
                    true,
                );
            }
            if b + 1 > SECTION_BLOCKS {
                z.grow_section = core::ptr::null_mut();
            }
            z.managed += MAX_ORDER_PAGES;
            added += 1;
        }
        if added < blocks {
            budget.uncharge((blocks - added) * MAX_ORDER_BYTES);
        }
        if added > 0 {
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

    /// Recomputes watermarks and pcp bounds from the managed pages.
    fn update_sizes(&mut self) {
        let zone = self.zone;
        let managed = self.inner.managed;
        let w = watermarks(managed);
        for (i, v) in w.iter().enumerate() {
            zone.wmark[i].store(*v, Relaxed);
        }
        let limit_pages = zone.budget.limit() >> PAGE_SHIFT;
        let p = pcp_params(
            managed,
            limit_pages,
            zone.nr_cpus.load(Relaxed),
            zone.high_fraction.load(Relaxed),
        );
        zone.batch.store(p.batch, Relaxed);
        zone.high_min.store(p.high_min, Relaxed);
        zone.high_max.store(p.high_max, Relaxed);
        zone.managed_pages.store(managed, Relaxed);
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
        if (*d).kind() == PageKind::Large && (*d).flags & flags::TRIMMED != 0 {
            (*d.cast::<LargeBlock>()).pages as usize
        } else {
            1usize << (*d).order
        }
    }
}

impl Drop for ZoneGuard<'_> {
    fn drop(&mut self) {
        self.zone.free_pages.store(self.inner.free, Relaxed);
    }
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

/// A copy of a zone's state (see [`Zone::snapshot`]).
#[derive(Clone, Copy, Debug)]
pub struct ZoneSnapshot {
    /// Pages committed to the zone.
    pub managed: usize,
    /// Pages on the buddy lists.
    pub free: usize,
    /// Free pages not resident (fresh or released).
    pub clean_free: usize,
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
    /// The memory limit in bytes.
    pub memory_limit: usize,
    /// Bytes charged against the limit (zone plus huge blocks).
    pub budget_used: usize,
    /// The most bytes ever charged at once.
    pub budget_peak: usize,
    /// Event counters.
    pub counters: ZoneCounters,
    /// Zone lock acquisitions.
    pub lock_acquisitions: u64,
    /// Zone lock acquisitions that had to wait.
    pub lock_contended: u64,
    /// Nanoseconds spent waiting for the zone lock.
    pub lock_wait_ns: u64,
}
