//! The stats snapshot; its text report (`text.rs`) gives one `name value` pair per line,
//! with the kernel's names where the counter is the kernel's (as
//! /proc/vmstat and /proc/zoneinfo), so scripts can grep it. Taken without
//! allocating; printed in chunks of lines (see `util/text.rs`).

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::geometry::{MAX_ORDER_BYTES, PAGE_SIZE};
use crate::heap::heap::{HEAP_ABANDONED, HEAP_ACTIVE};
use crate::heap::HeapRegistry;
use crate::large::huge::{HugeBlocks, HugeUsage};
use crate::page_alloc::pcp::{depot::DepotCounters, tune::PcpState, PcpCounters};
use crate::page_alloc::zone::snapshot::ZoneSnapshot;
use crate::page_alloc::PageAllocator;
use crate::section;
use crate::settings::SETTINGS;
use crate::sys;

/// Calls to C++'s operators through `libpcpalloc.so`, counted while the
/// report at exit is on (so a test can see that they reach us).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CxxCall {
    /// `operator new` without an alignment.
    New = 0,
    /// `operator new` with an alignment.
    NewAligned = 1,
    /// Sized `operator delete`.
    DeleteSized = 2,
    /// Aligned `operator delete`.
    DeleteAligned = 3,
}

static CXX_CALLS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Counts a call to a C++ operator, if the report at exit is on.
#[inline]
pub fn count_cxx(c: CxxCall) {
    if SETTINGS.stats_at_exit.load(Relaxed) {
        CXX_CALLS[c as usize].fetch_add(1, Relaxed);
    }
}

/// Pagesets reported one by one (the busiest first ones; totals cover all).
pub const MAX_REPORTED_PAGESETS: usize = 64;

/// One pageset's state and counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct PagesetStats {
    /// Tuning state (count, high, flags, alloc_factor, free_count).
    pub state: PcpState,
    /// Event counters.
    pub counters: PcpCounters,
    /// Times its lock was busy.
    pub lock_busy: u64,
}

/// The allocator's memory in bytes, as jemalloc's `stats.allocated`,
/// `active`, `resident` and `mapped`. Normally allocated ≤ active ≤
/// charged and resident ≤ charged; a snapshot taken while other threads
/// allocate is not atomic, so the figures may disagree by what moved
/// meanwhile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bytes {
    /// Live allocations: small objects by their size class, large and huge
    /// blocks by their pages.
    pub allocated: u64,
    /// Pages the allocator has handed out: slabs (with their free objects
    /// and any parked empty slab), large blocks (with blocks cached for
    /// reuse) and live huge blocks.
    pub active: u64,
    /// The heap's memory resident now, as the OS counts it (`mincore` over
    /// every mapping of the heap: zone blocks, their page descriptors, huge
    /// blocks): what the heap adds to the process's RSS.
    pub resident: u64,
    /// Of `resident`, the bytes in transparent huge pages (the heap's
    /// mappings' `AnonHugePages` in `/proc/self/smaps`; see `PCPALLOC_THP`).
    pub huge_pages: u64,
    /// Address space the heap has made accessible: the zone's online
    /// blocks and the huge blocks, live and cached (page descriptors
    /// excluded). Pages never touched, or given back, count here but are
    /// not resident.
    pub mapped: u64,
    /// Bytes charged to the budget — what `PCPALLOC_MEMORY_LIMIT` bounds:
    /// zone pages handed out and not given back to the OS since, the page
    /// descriptors of online blocks, huge blocks (live and cached).
    pub charged: u64,
    /// The most bytes ever charged at once.
    pub peak_charged: u64,
    /// Free small objects waiting on thread bins (in `active`, not in
    /// `allocated`).
    pub binned: u64,
}

/// Bytes the calling thread allocated and freed, as jemalloc's
/// `thread.allocated` and `thread.deallocated` — read from counters the
/// thread's heap keeps on its slow paths, so the malloc and free fast
/// paths pay nothing for them. That sets their granularity:
///
/// - `allocated` grows when objects are taken from the thread's slabs onto
///   its bins (a whole bin's refill at once, up to a few hundred objects
///   ahead of `malloc`) and with every large block (8 KiB–4 MiB) by its
///   usable size;
/// - `deallocated` grows when objects go back from the bins to the slabs
///   (a bin flush, or a free finding its bin full), with every free of an
///   object another thread allocated, and with every large block freed;
/// - `cached` is what waits on the bins now: taken, not handed out.
///
/// So `allocated - deallocated - cached` is exact at every moment: the
/// bytes (by size class) this thread allocated and did not free itself,
/// less what it freed of other threads' (it may be negative: a consumer
/// thread frees more than it allocates). Both counters only grow; a
/// thread that took over the heap of a thread that exited (heaps are
/// reused) starts from that heap's counts, so compare two readings. A
/// thread that has not allocated yet has no heap: it reads zeros, and
/// what it frees is counted for no thread. Blocks above 4 MiB (each its
/// own mapping) are counted for the whole process (`huge_live_bytes`),
/// not per thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// Bytes taken for this thread to hand out (see the type's docs).
    pub allocated: u64,
    /// Bytes this thread gave back (see the type's docs).
    pub deallocated: u64,
    /// Bytes of free objects on this thread's bins.
    pub cached: u64,
}

impl ThreadStats {
    /// `allocated - deallocated - cached`: the bytes this thread holds by
    /// its own allocations and frees (negative when it freed more of
    /// other threads' objects than it holds).
    pub fn net(&self) -> i64 {
        self.allocated as i64 - self.deallocated as i64 - self.cached as i64
    }
}

/// What the runtime's reclaims have given back (see `runtime/reclaim.rs`),
/// in the order they do it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReclaimCounters {
    /// Reclaims run (each before a request would have failed).
    pub runs: u64,
    /// Of those, reclaims that went to the last stage (everything cached,
    /// everywhere): the earlier stages did not make the request fit.
    pub full_runs: u64,
    /// Reclaims after which the retried request succeeded.
    pub retry_ok: u64,
    /// Slabs given back by heaps (the caller's, exited threads', parked).
    pub slabs: u64,
    /// Pages drained from pagesets.
    pub pcp_pages: u64,
    /// Bytes of cached huge blocks unmapped.
    pub huge_bytes: u64,
    /// Bytes of whole free blocks taken offline.
    pub offline_bytes: u64,
    /// Bytes of free memory released with madvise.
    pub released_bytes: u64,
    /// The memory cgroup's limit followed, in bytes (0: none;
    /// `runtime/memcg.rs`).
    pub memcg_limit: u64,
    /// What the cgroup holds as the budget tells it (at the last read,
    /// plus what was charged since).
    pub memcg_usage: u64,
    /// Reads of the cgroup's usage.
    pub memcg_reads: u64,
    /// Give-backs that the cgroup's limit led to.
    pub memcg_give_backs: u64,
}

/// A snapshot of the whole allocator.
///
/// Every field is an integer or a bool, or an array or struct of them, so
/// all-zero bytes are a snapshot of nothing: a snapshot too big for a small
/// stack is built in place in zeroed memory mapped for it (see
/// `runtime/report.rs`), and a field of another kind would break that.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// Memory in bytes.
    pub bytes: Bytes,
    /// The zone.
    pub zone: ZoneSnapshot,
    /// Sum over every pageset.
    pub pcp_total: PcpCounters,
    /// Pages held by pagesets.
    pub pcp_count: u64,
    /// Pageset lock busy events, all pagesets.
    pub pcp_lock_busy: u64,
    /// How threads enter their CPU's pageset (`pcp_entry`): 0 getcpu,
    /// 1 rseq on glibc's area, 2 rseq on pcpalloc's own.
    pub pcp_entry: u32,
    /// The rseq entry's pageset index is the thread's mm_cid (`pcp_index
    /// mm_cid`), else its CPU number.
    pub pcp_index_mm_cid: bool,
    /// Critical sections entering a pageset that the kernel aborted, all
    /// pagesets.
    pub pcp_rseq_aborts: u64,
    /// Fences a lock taken from elsewhere cost under rseq (`membarrier`
    /// calls: `sync/cpu_lock.rs`).
    pub pcp_rseq_fences: u64,
    /// The depot between the CPU pagesets' class lists and the zone
    /// (`page_alloc/pcp/depot.rs`).
    pub pcp_depot: DepotCounters,
    /// Pagesets in existence.
    pub nr_pagesets: usize,
    /// The first pagesets that have seen any traffic.
    pub pagesets: [PagesetStats; MAX_REPORTED_PAGESETS],
    /// How many of `pagesets` are filled.
    pub nr_reported: usize,
    /// Thread heaps ever created / owned by live threads / abandoned.
    pub heaps: [usize; 3],
    /// Slabs created and retired, over all heaps.
    pub slabs_created: u64,
    /// Slabs given back to the page allocator.
    pub slabs_retired: u64,
    /// Slabs created in reclaimable pageblocks (classes found
    /// short-lived).
    pub slabs_short_lived: u64,
    /// Objects freed by other threads and collected by their owner.
    pub remote_frees: u64,
    /// Small-object allocation slow paths taken while the heap profile
    /// sampled.
    pub profile_slow_paths: u64,
    /// The thread heaps' block bins (`large_bins`, the report's `large_bin_*`, keep the name they were published with): misses, hits, frees, pages
    /// spilled, free_high spills, and the pages they hold.
    pub block_bins: [u64; 6],
    /// Huge blocks.
    pub huge: HugeUsage,
    /// What reclaims gave back.
    pub reclaim: ReclaimCounters,
    /// Huge pages: whether the zone asks for them now (`PCPALLOC_THP`), and
    /// pageblocks collapsed into them by the tick.
    pub thp: (bool, u64),
    /// Maintenance ticks run; whether the background thread runs.
    pub ticks: u64,
    /// Whether the background maintenance thread is running.
    pub background: bool,
    /// C++ operator calls by [`CxxCall`] (counted only while the report at
    /// exit is on).
    pub cxx: [u64; 4],
}

/// The figures that cost only reads of counters — the zone's page counts
/// (under its lock, briefly), the huge blocks' usage and the bytes the
/// thread heaps count in use — and no system call: no `mincore`, no
/// `/proc`, no pageset walk. What `mallinfo` answers from; a small value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Pages committed to the zone ([`ZoneSnapshot::managed`]).
    pub managed_pages: usize,
    /// Pages on the zone's buddy lists ([`ZoneSnapshot::free`]).
    pub free_pages: usize,
    /// Of those, pages not resident ([`ZoneSnapshot::clean_free`]).
    pub clean_free_pages: usize,
    /// Free blocks on the buddy lists, every order.
    pub free_blocks: usize,
    /// Bytes charged to the budget ([`Bytes::charged`]).
    pub charged: u64,
    /// The most bytes ever charged at once ([`Bytes::peak_charged`]).
    pub peak_charged: u64,
    /// Live huge blocks.
    pub huge_blocks: usize,
    /// Usable bytes of live huge blocks.
    pub huge_live_bytes: usize,
    /// Live allocations ([`Bytes::allocated`]).
    pub allocated: u64,
    /// Free small objects waiting on thread bins ([`Bytes::binned`]).
    pub binned: u64,
}

/// The parts of an allocator a snapshot reads.
pub struct Parts<'a> {
    /// The page allocator (zone and pagesets).
    pub pages: &'a PageAllocator,
    /// The thread heaps.
    pub heaps: &'a HeapRegistry,
    /// The huge blocks.
    pub huge: &'a HugeBlocks,
    /// Maintenance ticks run.
    pub ticks: u64,
    /// Whether the background maintenance thread runs.
    pub background: bool,
    /// What the runtime's reclaims gave back.
    pub reclaim: ReclaimCounters,
}

impl Summary {
    /// Reads the counters (see the type's docs).
    pub fn collect(parts: &Parts<'_>) -> Summary {
        let (managed_pages, free_pages, clean_free_pages, free_blocks, charged, peak) =
            zone_counts(parts.pages);
        let huge = parts.huge.usage();
        let in_use = parts.heaps.bytes_in_use();
        Summary {
            managed_pages,
            free_pages,
            clean_free_pages,
            free_blocks,
            charged: charged as u64,
            peak_charged: peak as u64,
            huge_blocks: huge.live,
            huge_live_bytes: huge.live_bytes,
            allocated: in_use.small + in_use.large + huge.live_bytes as u64,
            binned: in_use.binned,
        }
    }
}

/// The zone's page counts a [`Summary`] holds, out of a zone snapshot
/// (a kilobyte, kept to this frame).
#[inline(never)]
fn zone_counts(pages: &PageAllocator) -> (usize, usize, usize, usize, usize, usize) {
    let z = pages.zone.snapshot();
    (
        z.managed,
        z.free,
        z.clean_free,
        z.nr_free.iter().sum(),
        z.budget_used,
        z.budget_peak,
    )
}

impl Stats {
    /// Takes a snapshot (briefly locking the zone and each pageset) onto
    /// the stack: a value of about 20 KiB, for callers with stack to
    /// spare (see [`fill`](Self::fill) for the others).
    pub fn collect(parts: &Parts<'_>) -> Stats {
        let mut s = Stats {
            bytes: Bytes::default(),
            zone: parts.pages.zone.snapshot(),
            pcp_total: PcpCounters::default(),
            pcp_count: 0,
            pcp_lock_busy: 0,
            pcp_entry: 0,
            pcp_index_mm_cid: false,
            pcp_rseq_aborts: 0,
            pcp_rseq_fences: 0,
            pcp_depot: DepotCounters::ZERO,
            nr_pagesets: 0,
            pagesets: [PagesetStats::default(); MAX_REPORTED_PAGESETS],
            nr_reported: 0,
            heaps: [0; 3],
            slabs_created: 0,
            slabs_retired: 0,
            slabs_short_lived: 0,
            remote_frees: 0,
            profile_slow_paths: 0,
            block_bins: [0; 6],
            huge: HugeUsage::default(),
            reclaim: ReclaimCounters::default(),
            thp: (false, 0),
            ticks: 0,
            background: false,
            cxx: [0; 4],
        };
        s.fill(parts);
        s
    }

    /// Takes a snapshot into `self`, in place, overwriting every field:
    /// nothing of its size is built on the stack, so a caller with a
    /// snapshot in memory of its own needs about a kilobyte of stack.
    pub fn fill(&mut self, parts: &Parts<'_>) {
        self.zone = parts.pages.zone.snapshot();
        self.huge = parts.huge.usage();
        self.reclaim = parts.reclaim;
        self.thp = (
            parts.pages.zone.thp_active(),
            parts.pages.zone.thp_collapsed() as u64,
        );
        self.ticks = parts.ticks;
        self.background = parts.background;
        for (c, n) in self.cxx.iter_mut().zip(&CXX_CALLS) {
            *c = n.load(Relaxed);
        }
        self.pcp_total = PcpCounters::default();
        self.pcp_count = 0;
        self.pcp_lock_busy = 0;
        self.pcp_entry = crate::sys::rseq::entry() as u32;
        self.pcp_index_mm_cid = crate::sys::rseq::index_is_mm_cid();
        self.pcp_rseq_aborts = 0;
        self.pcp_rseq_fences = crate::sys::rseq::fences();
        self.pcp_depot = parts.pages.pagesets.depot_stats();
        self.nr_pagesets = 0;
        let mut n = 0;
        parts.pages.pagesets.for_each(|ps| {
            let (st, c) = ps.snapshot();
            let busy = ps.lock_busy.load(Relaxed);
            self.pcp_rseq_aborts += ps.rseq_aborts.load(Relaxed);
            self.nr_pagesets += 1;
            let t = &mut self.pcp_total;
            t.alloc_zone += c.alloc_zone;
            t.free_zone += c.free_zone;
            t.free_high += c.free_high;
            t.refills += c.refills;
            t.drains += c.drains;
            t.pgalloc += c.pgalloc;
            t.allocs += c.allocs;
            t.pgfree += c.pgfree;
            t.decayed += c.decayed;
            t.refill_max = t.refill_max.max(c.refill_max);
            t.drain_max = t.drain_max.max(c.drain_max);
            t.large_alloc += c.large_alloc;
            t.large_hits += c.large_hits;
            t.large_refill_pages += c.large_refill_pages;
            t.large_drained_pages += c.large_drained_pages;
            t.large_free_high += c.large_free_high;
            t.large_steals += c.large_steals;
            t.large_count += c.large_count;
            t.large_resident += c.large_resident;
            t.large_measured += c.large_measured;
            t.large_released_pages += c.large_released_pages;
            self.pcp_count += st.count.max(0) as u64;
            self.pcp_lock_busy += busy;
            if c.pgalloc + c.pgfree > 0 && n < MAX_REPORTED_PAGESETS {
                self.pagesets[n] = PagesetStats {
                    state: st,
                    counters: c,
                    lock_busy: busy,
                };
                n += 1;
            }
        });
        self.nr_reported = n;
        let in_use = parts.heaps.bytes_in_use();
        let (zone, huge) = (&self.zone, &self.huge);
        let page = PAGE_SIZE as u64;
        let out_pages = (zone.managed as u64).saturating_sub(zone.free as u64 + self.pcp_count);
        let huge_live_mapped = huge.bytes.saturating_sub(huge.cached_bytes) as u64;
        self.bytes = Bytes {
            allocated: in_use.small + in_use.large + huge.live_bytes as u64,
            active: out_pages * page + huge_live_mapped,
            resident: (parts.pages.zone.resident_bytes() + parts.huge.resident_bytes()) as u64,
            huge_pages: sys::huge_page_bytes(&|a| {
                section::is_ours(a)
                    || section::huge_desc(a.next_multiple_of(MAX_ORDER_BYTES)).is_some()
            }) as u64,
            mapped: zone.managed as u64 * page + huge.bytes as u64,
            charged: zone.budget_used as u64,
            peak_charged: zone.budget_peak as u64,
            binned: in_use.binned,
        };
        self.heaps = [0; 3];
        self.slabs_created = 0;
        self.slabs_retired = 0;
        self.slabs_short_lived = 0;
        self.remote_frees = 0;
        self.profile_slow_paths = 0;
        self.block_bins = [0; 6];
        parts.heaps.for_each(|h| {
            self.heaps[0] += 1;
            match h.state.load(Relaxed) {
                HEAP_ACTIVE => self.heaps[1] += 1,
                HEAP_ABANDONED => self.heaps[2] += 1,
                _ => {}
            }
            self.slabs_created += h.slabs_created.load(Relaxed);
            self.slabs_retired += h.slabs_retired.load(Relaxed);
            self.slabs_short_lived += h.slabs_short_lived.load(Relaxed);
            self.remote_frees += h.remote_collected.load(Relaxed);
            self.profile_slow_paths += h.profile_slow_paths.load(Relaxed);
            let b = &h.block_bins;
            for (sum, c) in self.block_bins.iter_mut().zip([
                &b.c.misses,
                &b.c.hits,
                &b.c.free,
                &b.c.spilled_pages,
                &b.c.free_high,
            ]) {
                *sum += c.load(Relaxed);
            }
            self.block_bins[5] += b.held_pages() as u64;
        });
    }
}

impl Stats {
    /// The pageset hit rate, between 0 and 1: of the allocations the
    /// per-CPU pagesets served (slabs and large blocks of order 0–3,
    /// `pcp_allocs`), the share that found a block on the pageset's list
    /// and so did not refill from the zone under the zone lock
    /// (`pcp_refill`) — what the kernel's pagesets are for. `None` before
    /// any allocation went through a pageset. Blocks above order 3 (always
    /// from the zone) and allocations that went straight to the zone
    /// because a pageset was busy (`pcp_lock_busy`) are not counted.
    pub fn pageset_hit_rate(&self) -> Option<f64> {
        self.pageset_hits()
            .map(|(hits, served)| hits as f64 / served as f64)
    }

    /// The pageset hit rate as (hits, allocations served), `None` before
    /// any allocation went through a pageset (see
    /// [`pageset_hit_rate`](Self::pageset_hit_rate)).
    pub fn pageset_hits(&self) -> Option<(u64, u64)> {
        let served = self.pcp_total.allocs;
        (served > 0).then(|| (served.saturating_sub(self.pcp_total.refills), served))
    }
}

/// Zone lock contention: nanoseconds spent waiting for the zone lock as a
/// percentage of thread time, that is running time plus waiting time (the
/// analogue of the seeds' "cycles% of spinlock contention").
#[cfg(feature = "internals")]
pub fn contention_percent(wait_ns: u64, cpu_ns: u64) -> f64 {
    let total = cpu_ns + wait_ns;
    if total == 0 {
        0.0
    } else {
        wait_ns as f64 * 100.0 / total as f64
    }
}

mod text;
