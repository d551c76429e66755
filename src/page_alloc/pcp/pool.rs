//! Where a page allocator's pagesets live.
//!
//! Per CPU (the default, as in the kernel): an array indexed by the CPU the
//! thread runs on. Per thread (`PCPALLOC_PCP=thread`): each thread heap
//! takes a pageset from the pool and gives it back, drained, when the
//! thread exits. The replay drives one pageset per virtual CPU the same
//! way.
//!
//! Every pageset ever made is on one list (`next_all`), so the maintenance
//! tick and drain-all reach idle CPUs' and idle threads' pagesets too.
//! Pagesets live in metadata memory and are never freed. Each sits in its
//! own `CachePadded` slot (128 bytes on x86-64, where the adjacent-line
//! prefetcher pairs cache lines), so two CPUs' pagesets never share a
//! line.

use core::mem::{align_of, size_of};
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

use crate::meta;
use crate::page::{Page, PageList};
use crate::page_alloc::knobs::Knobs;
use crate::page_alloc::zone::Zone;
use crate::sync::Locked;
use crate::sys::{self, rseq};

use super::depot::{Depot, DepotCounters};
use super::pageset::{Pageset, PagesetGuard};

/// How many other CPUs' pagesets a large-list miss looks in (the next
/// ones by CPU number).
const STEAL_TRIES: usize = 4;

/// Upper bound on per-CPU pagesets (more CPUs share by index modulo).
pub(crate) const MAX_CPU_PAGESETS: usize = 1024;

/// A pageset in a slot of its own (the pageset at offset 0).
type Slot = CachePadded<Pageset>;

/// Metadata memory for one slot, or null.
fn alloc_slots(n: usize) -> *mut Slot {
    meta::alloc(n * size_of::<Slot>(), align_of::<Slot>()).cast::<Slot>()
}

/// The pagesets of one page allocator. See the module docs.
pub struct PagesetPool {
    cpu_sets: AtomicPtr<Slot>,
    nr_cpu_sets: AtomicUsize,
    all: AtomicPtr<Pageset>,
    /// Drained thread pagesets waiting for a new thread (chained through
    /// `next_free`).
    free: Locked<usize>,
    /// Whether new pagesets keep a batch before a free_high drain (this
    /// CPU's cache slice is large enough, seed 000 patch 3).
    free_high_batch: AtomicBool,
    /// Whether the CPU pagesets' class lists share blocks — through the
    /// depot, and with getcpu by [`steal_large`](Self::steal_large); off
    /// with per-thread pagesets.
    steal: AtomicBool,
    /// The CPU pagesets' shared stock of large blocks (`depot.rs`).
    depot: Depot,
    /// Times one pageset's caller changed another pageset's lists (a
    /// steal, a drain of every pageset's large lists): a count of a
    /// pageset kept outside it is stale when this moved (the replay).
    cross_events: AtomicU64,
    /// The CPU pagesets are entered by a restartable sequence
    /// ([`enable_rseq`](Self::enable_rseq)).
    rseq: AtomicBool,
}

impl PagesetPool {
    /// A pool with no pageset yet.
    pub const fn new() -> PagesetPool {
        PagesetPool {
            cpu_sets: AtomicPtr::new(ptr::null_mut()),
            nr_cpu_sets: AtomicUsize::new(0),
            all: AtomicPtr::new(ptr::null_mut()),
            free: Locked::new(0),
            free_high_batch: AtomicBool::new(false),
            steal: AtomicBool::new(true),
            depot: Depot::new(),
            cross_events: AtomicU64::new(0),
            rseq: AtomicBool::new(false),
        }
    }

    fn publish(&self, ps: *mut Pageset) {
        let mut head = self.all.load(Ordering::Acquire);
        loop {
            // SAFETY: ps is a fresh pageset only we reference so far.
            unsafe { (*ps).next_all.store(head, Ordering::Relaxed) };
            match self
                .all
                .compare_exchange_weak(head, ps, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Creates the per-CPU pagesets (once). `free_high_batch` says whether
    /// a CPU's cache slice is large enough for PCPF_FREE_HIGH_BATCH.
    /// Returns false if metadata memory is unavailable.
    pub fn init_cpu_sets(&self, nr_cpus: usize, free_high_batch: bool) -> bool {
        self.free_high_batch
            .store(free_high_batch, Ordering::Relaxed);
        let n = nr_cpus.clamp(1, MAX_CPU_PAGESETS);
        let arr = alloc_slots(n);
        if arr.is_null() {
            return false;
        }
        for cpu in 0..n {
            // SAFETY: arr has room for n slots.
            unsafe {
                let slot = arr.add(cpu);
                slot.write(CachePadded::new(Pageset::new()));
                let ps: *mut Pageset = &mut **slot;
                (*ps).set_free_high_batch(free_high_batch);
                self.publish(ps);
            }
        }
        self.nr_cpu_sets.store(n, Ordering::Relaxed);
        self.cpu_sets.store(arr, Ordering::Release);
        true
    }

    /// The depot the class lists of CPU pageset `ps` put blocks in and
    /// take them from; None for a thread's own pageset, with per-thread
    /// pagesets and with one CPU pageset (nobody to share with).
    #[inline]
    pub fn depot_for(&self, ps: &Pageset) -> Option<&Depot> {
        if !self.steal.load(Ordering::Relaxed)
            || ps.is_biased()
            || self.nr_cpu_sets.load(Ordering::Relaxed) < 2
        {
            return None;
        }
        Some(&self.depot)
    }

    /// Pages in the depot (a racy read).
    pub fn depot_pages(&self) -> usize {
        self.depot.pages()
    }

    /// The depot's counters.
    pub fn depot_stats(&self) -> DepotCounters {
        self.depot.snapshot()
    }

    /// Checks the depot; returns the pages it holds.
    pub fn check_depot(&self) -> usize {
        self.depot.check()
    }

    /// The depot's tick (`Depot::tick`). Returns the pages given back.
    pub fn tick_depot(&self, zone: &Zone, k: &Knobs) -> usize {
        self.depot.tick(zone, k)
    }

    /// From now on the calling threads enter the CPU pagesets with the
    /// restartable sequence `sys::rseq` chose (only after
    /// [`init_cpu_sets`](Self::init_cpu_sets), and once `rseq::select`
    /// chose an rseq entry): the pageset of index i (CPU number or
    /// mm_cid) is the i-th, and taking one from elsewhere costs a fence.
    /// An index past the pagesets (more CPUs than MAX_CPU_PAGESETS,
    /// without mm_cid) goes to the zone.
    pub fn enable_rseq(&self) {
        for (i, ps) in self.cpu_sets().iter().enumerate() {
            ps.set_rseq_index(i);
        }
        self.rseq
            .store(!self.cpu_sets().is_empty(), Ordering::Release);
    }

    /// The calling thread's CPU pageset, entered if its lock is free
    /// (None: busy, the operation goes to the zone). With rseq the lock is
    /// taken by a critical section (`rseq::lock_local`) — no atomic
    /// read-modify-write — else by `sched_getcpu` and a try-lock.
    #[inline(always)]
    pub fn enter_cpu(&self) -> (&Pageset, Option<PagesetGuard<'_>>) {
        if self.rseq.load(Ordering::Relaxed) {
            return self.enter_cpu_rseq();
        }
        let ps = self.cpu_pageset(sys::current_cpu());
        (ps, ps.enter(false))
    }

    #[inline(always)]
    fn enter_cpu_rseq(&self) -> (&Pageset, Option<PagesetGuard<'_>>) {
        let sets = self.cpu_sets();
        // SAFETY: enable_rseq made the pool's pagesets (at least one) the
        // sections' targets: the lock words of `sets` are STRIDE apart
        // from the first (same layout in every slot), live forever, and
        // are taken elsewhere only through `CpuLock`, with the fence.
        let r = unsafe {
            rseq::lock_local::<{ size_of::<Slot>() }>(sets[0].cpu_lock_word(), sets.len())
        };
        match r {
            rseq::Local::Held { idx, aborts } => {
                let ps: &Pageset = &sets[idx];
                // SAFETY: our section took this pageset's word.
                (ps, Some(unsafe { ps.entered_locally(aborts) }))
            }
            rseq::Local::Busy { idx, aborts } => {
                let ps: &Pageset = &sets[idx];
                if aborts != 0 {
                    ps.rseq_aborts
                        .fetch_add(u64::from(aborts), Ordering::Relaxed);
                }
                (ps, None)
            }
            rseq::Local::NoArea => (self.cpu_pageset(sys::current_cpu()), None),
        }
    }

    /// Waits for CPU pageset `ps` (maintenance, a give-back): under rseq,
    /// by a critical section when it is the calling thread's CPU's — no
    /// fence, as the CPU's own entries take it — else as anyone else does
    /// (`Pageset::lock`, a fence).
    pub fn lock_cpu_set<'a>(&'a self, ps: &'a Pageset) -> PagesetGuard<'a> {
        if self.rseq.load(Ordering::Relaxed) {
            if let (local, Some(g)) = self.enter_cpu_rseq() {
                if ptr::eq(local, ps) {
                    return g;
                }
            }
        }
        ps.lock()
    }

    /// [`lock_cpu_set`](Self::lock_cpu_set) for maintenance that can
    /// skip a pageset whose holder stays (`Pageset::lock_briefly`): None
    /// then.
    fn lock_cpu_set_briefly<'a>(&'a self, ps: &'a Pageset) -> Option<PagesetGuard<'a>> {
        if self.rseq.load(Ordering::Relaxed) {
            if let (local, Some(g)) = self.enter_cpu_rseq() {
                if ptr::eq(local, ps) {
                    return Some(g);
                }
            }
        }
        ps.lock_briefly()
    }

    /// The pageset of `cpu` (per-CPU mode). Only after
    /// [`init_cpu_sets`](Self::init_cpu_sets).
    #[inline]
    pub fn cpu_pageset(&self, cpu: usize) -> &Pageset {
        let n = self.nr_cpu_sets.load(Ordering::Relaxed);
        let arr = self.cpu_sets.load(Ordering::Acquire);
        debug_assert!(n > 0 && !arr.is_null());
        let i = if cpu < n { cpu } else { cpu % n };
        // SAFETY: init_cpu_sets made n pagesets that live forever.
        unsafe { &*arr.add(i) }
    }

    /// A block of `class` (or of a class up to two larger) from the large
    /// lists of another CPU's pageset, for the miss of `mine` (a CPU
    /// pageset of this pool; any other asks nothing) that the depot could
    /// not serve — with getcpu only: under rseq taking another CPU's
    /// pageset costs a fence (`sync/cpu_lock.rs`, a `membarrier` IPI, ~10
    /// µs in a VM) held across which that CPU's own entries find their
    /// pageset busy and go to the zone, and the depot brings the blocks
    /// instead (`depot.rs`). The
    /// [`STEAL_TRIES`] CPUs' in turn, each lock tried once; up to `more`
    /// further blocks of its class on `extra`, in the same lock hold
    /// (`LargeLists::steal`). Null and `class` if none had one.
    ///
    /// Two CPUs' lists otherwise meet only in the zone: a thread's bins
    /// spill a class on the CPU it runs on while a thread on another CPU
    /// misses that class, so one list fills to its high and drains to the
    /// zone while the other refills from it — every block re-carved and
    /// its pages touched anew. On the page-granular band (8–256 KiB, two
    /// threads) the zone-lock acquisitions fall from 13.5 to 2.8 per 1000
    /// operations. A producer's CPU taking a consumer's blocks one steal
    /// at a time paid a cross-CPU lock per block; a steal now brings a
    /// refill's batch (pingpong, 2 pairs of 8–32 KiB: steals 450–530 k →
    /// 150–180 k, zone-lock acquisitions 82–171 k → 32–57 k).
    pub fn steal_large(
        &self,
        mine: &Pageset,
        class: usize,
        more: usize,
        extra: &mut PageList,
    ) -> (*mut Page, usize) {
        if !self.steal.load(Ordering::Relaxed) || self.rseq.load(Ordering::Relaxed) {
            return (ptr::null_mut(), class);
        }
        let sets = self.cpu_sets();
        let n = sets.len();
        let me = (mine as *const Pageset as usize).wrapping_sub(sets.as_ptr() as usize)
            / size_of::<Slot>();
        if me >= n || !ptr::eq(&*sets[me], mine) {
            return (ptr::null_mut(), class);
        }
        for k in 1..n.min(STEAL_TRIES + 1) {
            let other = &sets[(me + k) % n];
            let r = other.steal_large(class, more, extra);
            if !r.0.is_null() {
                self.cross_events.fetch_add(1, Ordering::Relaxed);
                return r;
            }
        }
        (ptr::null_mut(), class)
    }

    /// Lets CPU pagesets take each other's large blocks on a miss, or not
    /// (per-thread pagesets: the CPU pagesets serve only threads without
    /// a pageset of their own, and take from none).
    pub fn set_steal(&self, on: bool) {
        self.steal.store(on, Ordering::Relaxed);
    }

    /// See `cross_events`.
    pub fn cross_events(&self) -> u64 {
        self.cross_events.load(Ordering::Relaxed)
    }

    /// The per-CPU pagesets (none before
    /// [`init_cpu_sets`](Self::init_cpu_sets)).
    fn cpu_sets(&self) -> &[Slot] {
        let arr = self.cpu_sets.load(Ordering::Acquire);
        if arr.is_null() {
            return &[];
        }
        let n = self.nr_cpu_sets.load(Ordering::Relaxed);
        // SAFETY: init_cpu_sets made n pagesets at arr (published with
        // Release before arr) that live forever.
        unsafe { core::slice::from_raw_parts(arr, n) }
    }

    /// A pageset for a new thread (thread mode): a drained one from the
    /// free list, or a new one. Null if metadata memory is unavailable.
    pub fn acquire_thread_pageset(&self) -> *mut Pageset {
        {
            let mut f = self.free.lock();
            let head = *f as *mut Pageset;
            if !head.is_null() {
                // SAFETY: pagesets on the free list are ours and live forever.
                *f = unsafe { (*head).next_free.load(Ordering::Relaxed) } as usize;
                return head;
            }
        }
        let slot = alloc_slots(1);
        if slot.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: fresh, aligned metadata memory, ours until published.
        let p: *mut Pageset = unsafe {
            slot.write(CachePadded::new(Pageset::new()));
            &mut **slot
        };
        // SAFETY: as above.
        unsafe {
            (*p).set_free_high_batch(self.free_high_batch.load(Ordering::Relaxed));
            (*p).set_biased(true);
        }
        self.publish(p);
        p
    }

    /// Drains a thread's pageset into `zone` and puts it on the free list.
    ///
    /// # Safety
    /// `ps` came from [`acquire_thread_pageset`](Self::acquire_thread_pageset)
    /// of this pool, and the calling thread, which owns it, is done with it.
    pub unsafe fn release_thread_pageset(&self, ps: *mut Pageset, zone: &Zone) {
        // SAFETY: ps lives forever (contract).
        unsafe {
            (*ps).drain_owned(zone);
            let mut f = self.free.lock();
            (*ps).next_free.store(*f as *mut Pageset, Ordering::Relaxed);
            *f = ps as usize;
        }
    }

    /// Calls `f` on every pageset ever created.
    pub fn for_each(&self, mut f: impl FnMut(&Pageset)) {
        let mut p = self.all.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: published pagesets live forever.
            let ps = unsafe { &*p };
            f(ps);
            p = ps.next_all.load(Ordering::Acquire);
        }
    }

    /// Drains the depot and every pageset into `zone` (`drain_all_pages`).
    /// Returns pages.
    pub fn drain_all(&self, zone: &Zone) -> usize {
        let mut n = self.depot.drain_all(zone);
        self.for_each(|ps| n += ps.drain(zone));
        n
    }

    /// Drains the depot and the large lists of every CPU pageset into
    /// `zone` (a thread's own pageset is left to its owner: reaching it
    /// from here costs a membarrier); not the lists that held nothing at
    /// their last release (under rseq each lock taken costs a fence), nor
    /// a pageset whose holder stays (`Pageset::lock_briefly`): the zone
    /// grows instead of the caller waiting for a preempted holder.
    /// Returns the pages drained.
    pub fn drain_all_large(&self, zone: &Zone) -> usize {
        let n = self.depot.drain_all(zone)
            + self
                .cpu_sets()
                .iter()
                .filter(|ps| ps.large_pages() > 0)
                .filter_map(|ps| Some(ps.drain_large_with(self.lock_cpu_set_briefly(ps)?, zone)))
                .sum::<usize>();
        if n > 0 {
            self.cross_events.fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    /// What the large lists of the CPU pagesets and the depot may hold
    /// resident, in pages (a racy sum of their mirrors, for the
    /// give-back's look). A thread's own pageset is left to its owner,
    /// whose exit drains it.
    pub fn large_waiting(&self) -> usize {
        self.depot.waiting()
            + self
                .cpu_sets()
                .iter()
                .map(|ps| ps.large_waiting())
                .sum::<usize>()
    }

    /// Pages on the large lists of the CPU pagesets (a racy sum): what the
    /// give-back counts as a cache, not use, when it sets the zone's
    /// `keep`. Not the depot's: a stock in transit between CPUs, bounded
    /// and decaying on its own — counted as a cache, it cut the zone's
    /// `keep` by as much, and the zone gave back 2-5 times what it did
    /// (a producer and a consumer of 8 B - 64 MiB blocks:
    /// tests/memory_cgroup.rs).
    pub fn large_pages(&self) -> usize {
        self.cpu_sets().iter().map(|ps| ps.large_pages()).sum()
    }

    /// Brings what the large lists of the CPU pagesets hold resident to at
    /// most `keep` pages: each measures what it holds, and if they hold
    /// more in all, each gives back its coldest blocks down to its share
    /// of `keep` (`Pageset::release_large`). The depot's blocks join this
    /// CPU's lists first. Returns
    /// the pages they still hold resident and the resident pages given
    /// back.
    pub fn release_large_down_to(&self, zone: &Zone, keep: usize) -> (usize, usize) {
        self.depot_to_this_cpu();
        let sets = self.cpu_sets();
        let mut total = 0;
        for ps in sets.iter().filter(|ps| ps.large_pages() > 0) {
            total += ps
                .release_large_with(zone, usize::MAX, &|| self.lock_cpu_set(ps))
                .0;
        }
        if total <= keep {
            return (total, 0);
        }
        let (mut kept, mut released) = (0, 0);
        for ps in sets.iter().filter(|ps| ps.large_pages() > 0) {
            let share = ps.large_waiting() * keep / total;
            let (k, r) = ps.release_large_with(zone, share, &|| self.lock_cpu_set(ps));
            kept += k;
            released += r;
        }
        (kept, released)
    }

    /// Measures what the CPU pagesets' large lists hold resident (as
    /// [`release_large_down_to`](Self::release_large_down_to) with no
    /// limit) — under rseq only the calling thread's CPU's, which a
    /// critical section takes: another CPU's costs a fence, and a thread's
    /// exit that measured every CPU's lists fenced 13.5 k times in a storm
    /// of 5,000 threads (perf); the other CPUs' exits measure theirs.
    ///
    /// A pageset whose holder stays (preempted in its hold) is skipped:
    /// the exit is not held up for a measurement (`sync::spin_briefly`).
    pub fn measure_large(&self, zone: &Zone) {
        if !self.rseq.load(Ordering::Relaxed) {
            self.depot_to_this_cpu();
            for ps in self.cpu_sets().iter().filter(|ps| ps.large_pages() > 0) {
                if self.lock_cpu_set_briefly(ps).is_some() {
                    ps.release_large_with(zone, usize::MAX, &|| self.lock_cpu_set(ps));
                }
            }
            return;
        }
        self.depot_to_this_cpu();
        let (home, g) = self.enter_cpu_rseq();
        drop(g);
        if home.large_pages() > 0 {
            home.release_large_with(zone, usize::MAX, &|| self.lock_cpu_set(home));
        }
    }

    /// The depot's blocks join this CPU's lists (before a release or a
    /// measurement), unless that pageset's holder stays.
    fn depot_to_this_cpu(&self) {
        if self.depot.pages() > 0 {
            // The depot's blocks join this CPU's lists first: there the
            // release measures them and keeps what they hold in their
            // first pages (a block drained whole to the zone is faulted in
            // anew: 305 k faults in the storm, against 208 k), and the
            // zone's give-back that follows counts them as a cache
            // (`large_pages`).
            // Under rseq "this CPU" is the critical section's index (the
            // mm_cid where the kernel has it, not sched_getcpu's number):
            // its pageset is taken by the section, without a fence.
            let g = if self.rseq.load(Ordering::Relaxed) {
                self.enter_cpu_rseq().1
            } else {
                self.lock_cpu_set_briefly(self.cpu_pageset(sys::current_cpu()))
            };
            let Some(mut g) = g else {
                return;
            };
            self.depot.move_all(|list, class| {
                // SAFETY: the depot hands over whole blocks of `class`,
                // off every list, with kind None.
                unsafe { g.large.adopt(list, class) }
            });
        }
    }

    /// What all pagesets may hold resident, in pages: their order lists'
    /// pages and what their large lists may hold (`LargeLists::waiting`).
    pub fn waiting_pages(&self) -> usize {
        let mut n = self.depot.waiting();
        self.for_each(|ps| n += ps.waiting());
        n
    }

    /// Pages held by all pagesets (racy sum, for decisions and reports).
    pub fn total_count(&self) -> usize {
        let mut n = self.depot.pages();
        self.for_each(|ps| n += ps.count());
        n
    }

    /// Takes the free-list lock and every pageset lock (before fork):
    /// every CPU pageset's word swapped first, then one fence on every CPU
    /// for all of them (`CpuLock::lock_unfenced`), then each made sure of;
    /// then the depot's (taken under a pageset's).
    pub fn lock_all(&self) {
        self.free.lock.lock();
        self.for_each(|ps| ps.lock_for_fork());
        if self.rseq.load(Ordering::Relaxed) && rseq::live() {
            rseq::fence_all();
        }
        self.for_each(|ps| ps.confirm_for_fork());
        self.depot.lock_for_fork();
    }

    /// Releases what [`lock_all`](Self::lock_all) took: in the parent,
    /// waking anyone queued; in the child, resetting.
    ///
    /// # Safety
    /// Only right after fork, having called `lock_all` in this thread.
    pub unsafe fn unlock_all(&self, child: bool) {
        // SAFETY: every lock was taken by lock_all in this thread.
        unsafe {
            self.depot.unlock_after_fork(child);
            self.for_each(|ps| ps.force_unlock());
            if child {
                self.free.lock.force_unlock();
            } else {
                self.free.lock.unlock();
            }
        }
    }
}

impl Default for PagesetPool {
    fn default() -> Self {
        Self::new()
    }
}
