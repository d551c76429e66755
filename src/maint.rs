//! One maintenance tick over an allocator's parts: our vmstat_update worker
//! and kswapd in one. It names no global: the runtime runs it on its own
//! allocator every `PCPALLOC_DECAY_MS`, and the replay runs it on virtual
//! time.
//!
//! Each tick advances the zone's epoch (the tick count everyone compares
//! against), decays every pageset's auto-tuned high and drains the excess
//! (`decay_pcp_high`), drains pagesets that stayed idle for a few ticks,
//! clears ZONE_BELOW_HIGH once the zone is above its high watermark again,
//! takes back the slabs thread heaps parked and the large bins of threads
//! that stopped using them, sweeps abandoned thread heaps, gives back the
//! slabs of idle threads whose every object is free,
//! unmaps cached huge blocks that stayed idle, gives free memory that
//! stayed idle for a tick back to the OS, and takes whole free blocks that
//! stayed given back for two more offline; and, as khugepaged, collapses
//! dense pageblocks into huge pages once the heap asks for them.

use crate::large::huge::HugeBlocks;
use crate::page_alloc::pcp::Pageset;
use crate::page_alloc::zone::watermark::WMARK_HIGH;
use crate::page_alloc::zone::Shrink;
use crate::page_alloc::PageAllocator;
use crate::slab::HeapRegistry;

/// Ticks a whole free block stays given back to the OS before it goes
/// offline too (its address space and commit charge back).
const OFFLINE_IDLE_TICKS: u32 = 2;
/// Most blocks one tick takes offline.
const OFFLINE_PER_TICK: usize = 64;

/// What to do besides the pagesets' own tick.
#[derive(Clone, Copy, Debug)]
pub struct TickWork {
    /// Give idle free memory back to the OS (madvise).
    pub release_memory: bool,
    /// The pageset the slabs taken back from heaps go through: null for the
    /// calling thread's CPU's (the runtime), a fixed one where the outcome
    /// must not depend on where the tick runs (the replay).
    pub home: *const Pageset,
    /// Collapse pageblocks into huge pages (copies up to 64 MiB: for a
    /// background thread, not for a tick run inline on a program's thread).
    pub collapse: bool,
}

/// Runs one tick over `pages`, `heaps` and `huge`. Returns the bytes given
/// back to the OS.
pub fn tick(
    pages: &PageAllocator,
    heaps: &HeapRegistry,
    huge: &HugeBlocks,
    work: TickWork,
) -> usize {
    let zone = &pages.zone;
    zone.advance_epoch();
    let k = pages.knobs();
    pages.pagesets.for_each(|ps| {
        ps.tick(zone, &k);
    });
    zone.clear_below_high_if_ok();
    let home = pages.through(work.home, false);
    heaps.release_parked_everywhere(&home);
    heaps.drain_idle_large_bins(zone.epoch(), &home);
    heaps.collect_abandoned(&home);
    heaps.collect_idle_emptied(zone.epoch(), &home);
    let unmapped = huge.tick(&zone.budget, zone.epoch());
    if work.release_memory {
        if work.collapse {
            zone.collapse_some();
        }
        unmapped
            + zone.release_idle(1, zone.wmark(WMARK_HIGH))
            + zone.shrink(Shrink::Idle(OFFLINE_IDLE_TICKS), OFFLINE_PER_TICK)
    } else {
        unmapped
    }
}
