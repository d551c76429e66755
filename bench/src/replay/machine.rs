//! A virtual machine for the replay: one page allocator (one zone, as all
//! the processes of a machine share the kernel's zones) with a pageset per
//! virtual CPU, and pcpalloc's own slab and large-block code on top —
//! driven from one thread, in trace order, on virtual time.
//!
//! - Each traced thread gets a heap of its own and a virtual CPU. It takes
//!   the CPU that has been idle longest (no live thread on it); when every
//!   CPU has a thread, the one with the fewest (lowest index first). So a
//!   program with 16 busy workers keeps 16 pagesets busy at any CPU count
//!   of 16 or more, and shares them out below; one-thread processes run
//!   one after another rotate over the CPUs as a scheduler spreads them.
//! - Large blocks take the runtime's own path: the thread heap's large
//!   bins first (blocks of up to 256 KiB), then its CPU's pageset.
//! - A thread's exit hands its heap back (as pcpalloc's exit hook does);
//!   the end of a process frees every block it still holds, in address
//!   order, through its last thread — the kernel frees a dying process's
//!   pages through the same per-CPU lists — then its threads exit.
//! - Every `decay` of virtual time the maintenance tick runs (the seeds'
//!   high decay and pageset expiry), with memory release off: giving
//!   pages to the OS changes none of the figures.
//! - Huge blocks (> 4 MiB) have their own mappings and never touch the
//!   pagesets or the zone's free lists; they are counted and skipped.
//!
//! Nothing depends on real time, real CPUs or addresses, so a replay is
//! the same on every run.

use std::sync::atomic::Ordering::Relaxed;

use rustc_hash::FxHashMap;

use pcpalloc::internals::large;
use pcpalloc::internals::trace::{Event, Op};
use pcpalloc::internals::Heap;
use pcpalloc::internals::{
    class_of, desc_of, free_owned, run_tick, HeapRegistry, HugeBlocks, Knobs, LargeBlock,
    PageAllocator, Pages, Pageset, StealRules, TickWork, ZoneConfig, LARGE_MAX, PAGE_SIZE,
    SMALL_MAX,
};

/// The free key written into freed objects (any constant will do here).
const KEY: usize = 0x7e51_a7ed_0000_0001;

/// How the machine is set up.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Virtual CPUs (pagesets).
    pub cpus: usize,
    /// The heuristics' knobs.
    pub knobs: Knobs,
    /// The tick period in virtual nanoseconds.
    pub decay_ns: u64,
    /// The zone's memory limit in bytes (sets batch, high_min, high_max).
    pub memory: usize,
    /// Whether pagesets keep a batch before a free_high drain (a CPU's
    /// cache slice over 3 × batch pages: true on the seeds' servers).
    pub free_high_batch: bool,
    /// Whether to sample every pageset's `high` at each tick.
    pub sample_high: bool,
}

/// What a replay measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Events replayed.
    pub events: u64,
    /// Frees of blocks the trace never saw allocated (allocated before
    /// tracing started, or by the parent of a forked child).
    pub unknown_frees: u64,
    /// Allocations of huge blocks, skipped.
    pub huge: u64,
    /// Threads and processes seen.
    pub threads: u64,
    /// Processes (trace files) seen.
    pub processes: u64,
    /// Ticks run.
    pub ticks: u64,
    /// Virtual seconds replayed.
    pub seconds: f64,
    /// Pages allocated by slabs and large blocks (through pagesets or
    /// straight from the zone).
    pub page_allocs: u64,
    /// Pages taken from the zone to refill pagesets.
    pub alloc_zone: u64,
    /// Drains for consecutive high-order frees.
    pub free_high: u64,
    /// free_high drains of the pagesets' class lists.
    pub list_free_high: u64,
    /// free_high spills of the threads' block bins.
    pub bin_free_high: u64,
    /// Emptied slabs given back (not kept parked).
    pub slabs_retired: u64,
    /// Zone lock acquisitions.
    pub zone_locks: u64,
    /// The most pages all pagesets held at once.
    pub peak_pcp_pages: u64,
    /// The largest single refill and drain, in pages.
    pub refill_max: u64,
    /// See `refill_max`.
    pub drain_max: u64,
    /// (virtual seconds, `high` of each virtual CPU) at every tick, when
    /// asked for.
    pub highs: Vec<(f64, Vec<i32>)>,
    /// Pages each virtual CPU's pageset allocated (to pick the busiest).
    pub pgalloc_per_cpu: Vec<u64>,
}

struct Thread {
    heap: *mut Heap,
    cpu: usize,
}

/// See the module docs.
pub struct Machine {
    setup: Setup,
    pa: Box<PageAllocator>,
    heaps: Box<HeapRegistry>,
    huge: Box<HugeBlocks>,
    threads: FxHashMap<(u32, u32), Thread>,
    /// Live blocks per process (file): traced address → ours.
    blocks: Vec<FxHashMap<u64, *mut u8>>,
    /// The last thread of each process to act.
    last_thread: Vec<Option<u32>>,
    /// Live threads on each virtual CPU, and the event count when it last
    /// went idle.
    cpu_threads: Vec<u32>,
    cpu_idle_since: Vec<u64>,
    /// Pages held by each pageset at the last look, and their sum.
    pcp_counts: Vec<usize>,
    pcp_total: usize,
    /// The pool's `cross_events` when the counts were last right.
    cross_events: u64,
    start_ns: Option<u64>,
    last_ns: u64,
    next_tick_ns: u64,
    out: Outcome,
}

impl Machine {
    /// A machine for `files` trace files.
    pub fn new(setup: Setup, files: usize) -> Machine {
        let pa = Box::new(PageAllocator::new());
        pa.zone.configure(&ZoneConfig {
            memory_limit: setup.memory,
            size: setup.memory,
            nr_cpus: setup.cpus,
            high_fraction: 0,
            steal: StealRules::SEED_004,
            thp: pcpalloc::internals::ThpPolicy::Never,
            group_by_lifetime: true,
            // Memory release is off in the replay (see the module docs).
            dirty_ratio: 0,
        });
        assert!(pa.pagesets.init_cpu_sets(setup.cpus, setup.free_high_batch));
        pa.set_knobs(setup.knobs);
        let cpus = setup.cpus;
        Machine {
            setup,
            pa,
            heaps: Box::new(HeapRegistry::new()),
            huge: Box::new(HugeBlocks::new()),
            threads: FxHashMap::default(),
            blocks: (0..files).map(|_| FxHashMap::default()).collect(),
            last_thread: vec![None; files],
            cpu_threads: vec![0; cpus],
            cpu_idle_since: vec![0; cpus],
            pcp_counts: vec![0; cpus],
            pcp_total: 0,
            cross_events: 0,
            start_ns: None,
            last_ns: 0,
            next_tick_ns: 0,
            out: Outcome {
                processes: files as u64,
                ..Outcome::default()
            },
        }
    }

    fn pageset(&self, cpu: usize) -> *const Pageset {
        self.pa.pagesets.cpu_pageset(cpu)
    }

    fn pages(&self, cpu: usize) -> Pages<'_> {
        self.pa.through(self.pageset(cpu), false)
    }

    /// Runs the ticks due by `now`.
    fn ticks_until(&mut self, now: u64) {
        let start = *self.start_ns.get_or_insert(now);
        if self.next_tick_ns == 0 {
            self.next_tick_ns = start + self.setup.decay_ns;
        }
        // After a long idle gap, a few dozen ticks leave nothing to decay
        // or expire: skip the rest of the gap.
        let mut budget = 64;
        while now >= self.next_tick_ns {
            if budget == 0 {
                let missed = (now - self.next_tick_ns) / self.setup.decay_ns + 1;
                self.next_tick_ns += missed * self.setup.decay_ns;
                break;
            }
            budget -= 1;
            self.tick(start);
            self.next_tick_ns += self.setup.decay_ns;
        }
    }

    fn tick(&mut self, start: u64) {
        run_tick(
            &self.pa,
            &self.heaps,
            &self.huge,
            TickWork {
                release_memory: false,
                home: self.pageset(0),
                collapse: false,
            },
        );
        self.out.ticks += 1;
        self.recount_all();
        if self.setup.sample_high {
            let at = (self.next_tick_ns - start) as f64 / 1e9;
            let highs = (0..self.setup.cpus)
                .map(|c| self.pa.pagesets.cpu_pageset(c).snapshot().0.high)
                .collect();
            self.out.highs.push((at, highs));
        }
    }

    fn recount_all(&mut self) {
        self.pcp_total = 0;
        for c in 0..self.setup.cpus {
            let n = self.pa.pagesets.cpu_pageset(c).count();
            self.pcp_counts[c] = n;
            self.pcp_total += n;
        }
        self.note_peak();
    }

    fn recount(&mut self, cpu: usize) {
        // A steal or a drain of every pageset's large lists changed other
        // CPUs' counts too.
        let cross = self.pa.pagesets.cross_events();
        if cross != self.cross_events {
            self.cross_events = cross;
            return self.recount_all();
        }
        let n = self.pa.pagesets.cpu_pageset(cpu).count();
        self.pcp_total = self.pcp_total + n - self.pcp_counts[cpu];
        self.pcp_counts[cpu] = n;
        self.note_peak();
    }

    fn note_peak(&mut self) {
        // The depot's blocks are cached too (`pcp/depot.rs`).
        let cached = self.pcp_total + self.pa.pagesets.depot_pages();
        self.out.peak_pcp_pages = self.out.peak_pcp_pages.max(cached as u64);
    }

    /// The virtual CPU a new thread runs on (see the module docs).
    fn place(&mut self) -> usize {
        let idle = (0..self.setup.cpus)
            .filter(|&c| self.cpu_threads[c] == 0)
            .min_by_key(|&c| (self.cpu_idle_since[c], c));
        let cpu = idle.unwrap_or_else(|| {
            (0..self.setup.cpus)
                .min_by_key(|&c| (self.cpu_threads[c], c))
                .unwrap_or(0)
        });
        self.cpu_threads[cpu] += 1;
        cpu
    }

    fn thread(&mut self, file: u32, tid: u32) -> (*mut Heap, usize) {
        if let Some(t) = self.threads.get(&(file, tid)) {
            return (t.heap, t.cpu);
        }
        let heap = self.heaps.acquire();
        assert!(!heap.is_null(), "out of metadata memory");
        let cpu = self.place();
        self.threads.insert((file, tid), Thread { heap, cpu });
        self.out.threads += 1;
        (heap, cpu)
    }

    /// Replays one event of thread `tid` of process `file`.
    pub fn event(&mut self, file: u32, tid: u32, e: &Event) {
        self.ticks_until(e.time_ns);
        self.last_ns = self.last_ns.max(e.time_ns);
        self.out.events += 1;
        let Some(op) = e.op() else { return };
        if op == Op::Exit {
            self.exit_thread(file, tid);
            return;
        }
        let (heap, cpu) = self.thread(file, tid);
        self.last_thread[file as usize] = Some(tid);
        match op {
            Op::Alloc => self.alloc(file, heap, cpu, e),
            Op::Free => {
                match self.blocks[file as usize].remove(&e.addr) {
                    // SAFETY: the block is live in this machine, and heap
                    // is the freeing thread's (this replay drives it).
                    Some(b) => unsafe { self.free(heap, cpu, b) },
                    None => self.out.unknown_frees += 1,
                }
            }
            Op::Exit => unreachable!(),
        }
        self.recount(cpu);
    }

    fn alloc(&mut self, file: u32, heap: *mut Heap, cpu: usize, e: &Event) {
        let (size, align) = (e.size(), e.align());
        if size > LARGE_MAX || align > LARGE_MAX {
            self.out.huge += 1;
            return;
        }
        let pages = self.pages(cpu);
        // SAFETY: this replay is the only driver of its heaps.
        let mut o = unsafe { (*heap).owned() };
        let p = if size <= SMALL_MAX && align <= 16 {
            o.alloc(class_of(size), &pages)
        } else {
            // The allocator's own large-block path (runtime/paths.rs calls
            // the same functions): the thread's large bins, then the pages.
            let (size, align) = (size.max(SMALL_MAX + 1), align.max(PAGE_SIZE));
            let epoch = self.pa.zone.epoch();
            // SAFETY: this replay is the heap's only driver.
            let p = unsafe {
                (*heap)
                    .alloc_from_bins(size, align, false, epoch, || pages)
                    .0
            };
            if p.is_null() {
                large::alloc(&pages, size, align, false)
            } else {
                p
            }
        };
        assert!(
            !p.is_null(),
            "the replay's zone is out of memory: raise --memory"
        );
        if let Some(old) = self.blocks[file as usize].insert(e.addr, p) {
            // The trace lost this block's free (a process that died
            // mid-write): treat it as freed here.
            // SAFETY: old is live in this machine.
            unsafe { self.free(heap, cpu, old) };
        }
    }

    /// Frees block `p` as pcpalloc's `free` does: a small object (its page
    /// names a slab) through the freeing thread's heap, a large block to
    /// the thread's large bins or back to the pages (its CPU's pageset
    /// list of its class).
    ///
    /// # Safety
    /// `p` is live in this machine; `heap` is the freeing thread's.
    unsafe fn free(&mut self, heap: *mut Heap, cpu: usize, p: *mut u8) {
        let pages = self.pages(cpu);
        // SAFETY: this replay drives the heap; the block is live (contract).
        unsafe {
            let mut o = (*heap).owned();
            let d = desc_of(p as usize);
            if (*d).head.load(Relaxed).is_null() {
                let b = d.cast::<LargeBlock>();
                if (*heap)
                    .free_to_bins(b, self.pa.zone.epoch(), || pages)
                    .is_none()
                {
                    large::free(&pages, b);
                }
            } else {
                free_owned(&mut o, p, KEY, &pages);
            }
        }
    }

    fn exit_thread(&mut self, file: u32, tid: u32) {
        let Some(t) = self.threads.remove(&(file, tid)) else {
            return;
        };
        let pages = self.pages(t.cpu);
        // SAFETY: this replay drives the heap, which it hands back.
        unsafe {
            {
                let mut o = (*t.heap).owned();
                o.collect(&pages);
                o.reset_tuning();
            }
            self.heaps.abandon(t.heap);
        }
        self.cpu_threads[t.cpu] -= 1;
        if self.cpu_threads[t.cpu] == 0 {
            self.cpu_idle_since[t.cpu] = self.out.events;
        }
        self.recount(t.cpu);
    }

    /// Process `file` has no more events: it frees what it still holds,
    /// and its threads exit.
    pub fn end_process(&mut self, file: u32) {
        let mut live: Vec<(u64, *mut u8)> = self.blocks[file as usize].drain().collect();
        live.sort_unstable_by_key(|(a, _)| *a);
        if !live.is_empty() {
            let tid = self.last_thread[file as usize].unwrap_or(0);
            let (heap, cpu) = self.thread(file, tid);
            for (_, b) in live {
                // SAFETY: every block of the map is live; heap is the
                // process's last thread's.
                unsafe { self.free(heap, cpu, b) };
            }
            self.recount(cpu);
        }
        let mut tids: Vec<u32> = self
            .threads
            .keys()
            .filter(|(f, _)| *f == file)
            .map(|&(_, t)| t)
            .collect();
        tids.sort_unstable();
        for tid in tids {
            self.exit_thread(file, tid);
        }
    }

    /// The figures, after the last event.
    pub fn finish(mut self) -> Outcome {
        let mut out = std::mem::take(&mut self.out);
        if let Some(start) = self.start_ns {
            out.seconds = self.last_ns.saturating_sub(start) as f64 / 1e9;
        }
        let mut pcp_alloc = 0;
        out.pgalloc_per_cpu = vec![0; self.setup.cpus];
        for c in 0..self.setup.cpus {
            let (_, k) = self.pa.pagesets.cpu_pageset(c).snapshot();
            pcp_alloc += k.pgalloc;
            out.alloc_zone += k.alloc_zone;
            out.free_high += k.free_high;
            out.list_free_high += k.large_free_high;
            out.refill_max = out.refill_max.max(k.refill_max);
            out.drain_max = out.drain_max.max(k.drain_max);
            out.pgalloc_per_cpu[c] = k.pgalloc;
        }
        self.heaps.for_each(|h| {
            out.bin_free_high += h.block_bins.c.free_high.load(Relaxed);
            out.slabs_retired += h.slabs_retired.load(Relaxed);
        });
        let z = self.pa.zone.snapshot();
        out.zone_locks = z.lock_acquisitions;
        // Pages leaving the zone other than by refill went straight to a
        // caller (orders above 3).
        out.page_allocs = pcp_alloc + z.counters.pgalloc.saturating_sub(out.alloc_zone);
        out
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.pa.drain_all();
        // SAFETY: the replay is over: nothing uses this zone's memory.
        unsafe { self.pa.zone.destroy() };
    }
}
