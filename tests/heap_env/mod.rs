//! Heaps driven as values (tests/slab.rs, tests/memory_remote.rs): a page
//! allocator of their own (one pageset), a heap registry and a huge-block
//! cache, so a test sees exactly the slabs it makes — no background tick,
//! no other test's threads.
#![allow(dead_code)]

use pcpalloc::internals::{
    check_quiescent, run_tick, Heap, HeapRegistry, HugeBlocks, PageAllocator, Pages, TickWork,
    ZoneConfig,
};

/// A page allocator of its own (one pageset) and a heap registry.
pub struct Env {
    pub pa: Box<PageAllocator>,
    pub heaps: Box<HeapRegistry>,
    pub huge: Box<HugeBlocks>,
}

impl Env {
    pub fn new(limit: usize) -> Env {
        Env::with_config(&ZoneConfig::with_limit(limit))
    }

    pub fn with_config(cfg: &ZoneConfig) -> Env {
        let pa = Box::new(PageAllocator::new());
        pa.zone.configure(cfg);
        assert!(pa.pagesets.init_cpu_sets(1, false));
        Env {
            pa,
            heaps: Box::new(HeapRegistry::new()),
            huge: Box::new(HugeBlocks::new()),
        }
    }

    pub fn pages(&self) -> Pages<'_> {
        self.pa.through(std::ptr::null(), false)
    }

    pub fn heap(&self) -> &Heap {
        let h = self.heaps.acquire();
        assert!(!h.is_null());
        // SAFETY: heaps live forever.
        unsafe { &*h }
    }

    pub fn tick(&self) {
        run_tick(
            &self.pa,
            &self.heaps,
            &self.huge,
            TickWork {
                release_memory: false,
                home: std::ptr::null(),
                collapse: false,
            },
        );
    }

    /// A trim's share from a thread whose heap is none of these.
    pub fn trim(&self) -> usize {
        self.heaps
            .collect_emptied_everywhere(std::ptr::null(), &self.pages())
    }

    /// The whole-allocator checks: zone, pagesets, every slab and heap.
    /// Returns (slabs, live objects).
    pub fn check(&self) -> (usize, usize) {
        let mut cached = 0;
        self.pa.pagesets.for_each(|ps| cached += ps.check());
        let walk = self.pa.zone.check_invariants();
        assert_eq!(walk.pcp, cached);
        check_quiescent(&self.heaps, &self.pa.zone)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.pa.drain_all();
        // SAFETY: the test is over; its heaps are never used again.
        unsafe { self.pa.zone.destroy() }
    }
}
