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
//! stayed given back for two more offline; and, as khugepaged, advises
//! huge blocks that show dense use for huge pages and collapses dense
//! pageblocks and ranges of them into huge pages once the heap asks for
//! them: up to [`COLLAPSE_PER_TICK`] on the background thread's ticks, one
//! on a tick run inline on a program's thread.

use crate::heap::HeapRegistry;
use crate::large::huge::HugeBlocks;
use crate::page_alloc::pcp::Pageset;
use crate::page_alloc::zone::watermark::WMARK_HIGH;
use crate::page_alloc::zone::Shrink;
use crate::page_alloc::PageAllocator;

/// Ticks a whole free block stays given back to the OS before it goes
/// offline too (its address space and commit charge back).
const OFFLINE_IDLE_TICKS: u32 = 2;
/// Most blocks one tick takes offline.
const OFFLINE_PER_TICK: usize = 64;
/// Most 2 MiB ranges (pageblocks, or ranges of huge blocks) one tick of
/// the background thread collapses into huge pages. A collapse copies 2
/// MiB (about 1 ms; up to 7 when the kernel must compact memory for the
/// huge page) and holds the process's mmap lock, stalling every thread's
/// page faults meanwhile.
pub(crate) const COLLAPSE_PER_TICK: usize = 32;
/// Most ranges one tick run inline — on a program's thread, inside one of
/// its malloc or free calls — collapses: the call pays for it.
pub(crate) const COLLAPSE_PER_INLINE_TICK: usize = 1;

/// What to do besides the pagesets' own tick.
#[derive(Clone, Copy, Debug)]
pub struct TickWork {
    /// Give idle free memory back to the OS (madvise).
    pub release_memory: bool,
    /// The pageset the slabs taken back from heaps go through: null for the
    /// calling thread's CPU's (the runtime), a fixed one where the outcome
    /// must not depend on where the tick runs (the replay).
    pub home: *const Pageset,
    /// Collapse into huge pages as a background thread may: up to
    /// [`COLLAPSE_PER_TICK`] ranges (copies up to 64 MiB); else up to
    /// [`COLLAPSE_PER_INLINE_TICK`] (a tick run inline on a program's
    /// thread). With `release_memory` only.
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
    pages.pagesets.tick_depot(zone, &k);
    zone.clear_below_high_if_ok();
    let home = pages.through(work.home, false);
    heaps.release_parked_everywhere(&home);
    heaps.drain_idle_block_bins(zone.epoch(), &home);
    heaps.collect_abandoned(&home);
    heaps.collect_idle_emptied(zone.epoch(), &home);
    let unmapped = huge.tick(&zone.budget, zone.epoch(), &k);
    if work.release_memory {
        let most = if work.collapse {
            COLLAPSE_PER_TICK
        } else {
            COLLAPSE_PER_INLINE_TICK
        };
        huge.thp_look_if_due();
        let tried = zone.collapse_some(most);
        huge.thp_collapse(most - tried);
        unmapped
            + zone.release_idle(1, zone.wmark(WMARK_HIGH))
            + zone.shrink(Shrink::Idle(OFFLINE_IDLE_TICKS), OFFLINE_PER_TICK)
    } else {
        unmapped
    }
}

/// Between ticks, on an allocation slow path that looks at the clock
/// (`runtime/tick.rs`, no background thread): huge blocks due a look are
/// looked at, and one 2 MiB range is collapsed into a huge page if the
/// heap's growth paid for one (`Zone::credit_collapses`) — a pageblock
/// faulted in before huge pages were asked for, or a range of a huge block
/// faulted in before it showed dense use. One range a call: about 1 ms
/// (up to 7 when the kernel compacts memory for the huge page).
pub(crate) fn between_ticks(pages: &PageAllocator, huge: &HugeBlocks) {
    huge.thp_look_if_due();
    let zone = &pages.zone;
    zone.credit_collapses(pages.managed_bytes() + huge.bytes());
    let (zone_work, huge_work) = (zone.has_collapse_backlog(), huge.thp_has_pending());
    if !(zone_work || huge_work) || !zone.take_collapse_credit() {
        return;
    }
    let mut tried = if zone_work { zone.collapse_some(1) } else { 0 };
    if tried == 0 && huge_work {
        tried = huge.thp_collapse(1);
    }
    if tried == 0 {
        zone.return_collapse_credit();
    }
}
