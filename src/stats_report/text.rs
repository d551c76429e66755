//! The text report of the stats snapshot: every counter by its report
//! name (`Stats::write_counters`), as `name value` lines or JSON members.

use core::fmt::{self, Write};

use super::{CxxCall, Stats};
use crate::geometry::{NR_PAGE_ORDERS, PAGE_SIZE};
use crate::page::{MigrateType, MIGRATE_TYPES};

/// Where [`Stats::write_counters`] sends each counter: its name, then
/// its value (a number).
pub(crate) type CounterSink<'a> =
    dyn FnMut(fmt::Arguments<'_>, &dyn fmt::Display) -> fmt::Result + 'a;

impl Stats {
    /// Writes the counters: one `name value` pair per line.
    pub fn write_text(&self, w: &mut dyn Write) -> fmt::Result {
        self.write_counters(&mut |name, v| writeln!(w, "{name} {v}"))
    }

    /// Writes the counters as members of a JSON object (`"name":value`,
    /// comma-separated; the braces are the caller's).
    pub fn write_json_members(&self, w: &mut dyn Write) -> fmt::Result {
        let mut first = true;
        self.write_counters(&mut |name, v| {
            let sep = if first { "" } else { "," };
            first = false;
            write!(w, "{sep}\"{name}\":{v}")
        })
    }

    /// Hands every counter, by its report name, to `out`. The names are
    /// plain ASCII (letters, digits, `_`) and every value a number.
    pub fn write_counters(&self, out: &mut CounterSink<'_>) -> fmt::Result {
        let z = &self.zone;
        let c = &z.counters;
        macro_rules! kv {
            ($($name:expr => $v:expr),* $(,)?) => { $( out(format_args!("{}", $name), &$v)?; )* };
        }
        let b = &self.bytes;
        kv! {
            "allocated_bytes" => b.allocated,
            "active_bytes" => b.active,
            "resident_bytes" => b.resident,
            "huge_page_bytes" => b.huge_pages,
            "mapped_bytes" => b.mapped,
            "charged_bytes" => b.charged,
            "peak_charged_bytes" => b.peak_charged,
            "binned_bytes" => b.binned,
            "nr_managed_pages" => z.managed,
            "nr_free_pages" => z.free,
            "nr_free_clean_pages" => z.clean_free,
            "nr_isolated_pages" => z.isolated,
            "nr_pcp_pages" => self.pcp_count,
            "wmark_min" => z.wmark[0],
            "wmark_low" => z.wmark[1],
            "wmark_high" => z.wmark[2],
            "zone_below_high" => u8::from(z.below_high),
            "memory_limit_bytes" => z.memory_limit,
            "nr_charged_pages" => z.charged,
        }
        for o in 0..NR_PAGE_ORDERS {
            out(format_args!("free_area_order_{o}"), &z.nr_free[o])?;
        }
        for o in 0..NR_PAGE_ORDERS {
            for mt in 0..MIGRATE_TYPES {
                out(
                    format_args!("free_area_order_{o}_{}", MigrateType::from_index(mt).name()),
                    &z.free_per_order[o][mt],
                )?;
            }
        }
        kv! {
            "pgalloc" => c.pgalloc,
            "pgfree" => c.pgfree,
            "alloc_fail" => c.alloc_fail,
            "zone_grow" => c.grow_events,
            "zone_grow_pages" => c.grow_pages,
            "extfrag_fallback" => c.extfrag_fallback,
            "extfrag_fragmenting_unmovable" => c.extfrag_fragmenting[0],
            "extfrag_fragmenting_movable" => c.extfrag_fragmenting[1],
            "extfrag_fragmenting_reclaimable" => c.extfrag_fragmenting[2],
            "extfrag_unmovable_placed_with_movable" => c.extfrag_in_movable[0],
            "extfrag_reclaimable_placed_with_movable" => c.extfrag_in_movable[2],
            "pageblock_claims" => c.pageblock_claims,
            "released_bytes" => c.released_bytes,
            "release_events" => c.release_events,
            "balance_dirty" => c.balance_dirty,
            "balance_dirty_bytes" => c.balance_dirty_bytes,
            "below_high_set" => c.below_high_set,
            "below_high_clear" => c.below_high_clear,
            "drain_all" => c.drain_all,
            "drain_before_grow" => c.drain_before_grow,
            "charge_fail" => c.charge_fail,
            "exact_runs" => c.exact_runs,
            "zone_shrink" => c.shrink_events,
            "zone_shrink_pages" => c.shrink_pages,
            "pcp_bulk_max" => c.bulk_max,
            "zone_lock_acquisitions" => z.lock_acquisitions,
            "zone_lock_contended" => z.lock_contended,
            "zone_lock_wait_ns" => z.lock_wait_ns,
            "pcp_batch" => z.pcp.batch,
            "pcp_high_min" => z.pcp.high_min,
            "pcp_high_max" => z.pcp.high_max,
        }
        let t = &self.pcp_total;
        kv! {
            "alloc_zone" => t.alloc_zone,
            "free_zone" => t.free_zone,
            "free_high" => t.free_high,
            "pcp_refill" => t.refills,
            "pcp_drain" => t.drains,
            "pcp_pgalloc" => t.pgalloc,
            "pcp_allocs" => t.allocs,
            "pcp_pgfree" => t.pgfree,
            "pcp_decayed" => t.decayed,
            "pcp_refill_max" => t.refill_max,
            "pcp_drain_max" => t.drain_max,
            "pcp_large_alloc" => t.large_alloc,
            "pcp_large_hits" => t.large_hits,
            "pcp_large_refill_pages" => t.large_refill_pages,
            "pcp_large_drained_pages" => t.large_drained_pages,
            "pcp_large_free_high" => t.large_free_high,
            "pcp_large_steals" => t.large_steals,
            "pcp_large_pages" => t.large_count,
            "pcp_large_resident_pages" => t.large_resident,
            "pcp_large_measured" => t.large_measured,
            "pcp_large_released_pages" => t.large_released_pages,
            "pcp_lock_busy" => self.pcp_lock_busy,
            "pcp_rseq_aborts" => self.pcp_rseq_aborts,
            "rseq_fences" => self.pcp_rseq_fences,
            "pcp_depot_pages" => self.pcp_depot.pages,
            "pcp_depot_high" => self.pcp_depot.high,
            "pcp_depot_put" => self.pcp_depot.put,
            "pcp_depot_taken" => self.pcp_depot.taken,
            "pcp_depot_hits" => self.pcp_depot.hits,
            "pcp_depot_wanted" => self.pcp_depot.wanted,
            "pcp_depot_answered" => self.pcp_depot.answered,
            "pcp_depot_full_pages" => self.pcp_depot.full_pages,
            "pcp_depot_drained_pages" => self.pcp_depot.drained_pages,
            "pcp_depot_busy" => self.pcp_depot.busy,
            "nr_pagesets" => self.nr_pagesets,
        }
        for (i, p) in self.pagesets[..self.nr_reported].iter().enumerate() {
            let s = &p.state;
            out(format_args!("pageset{i}_count"), &s.count)?;
            out(format_args!("pageset{i}_high"), &s.high)?;
            out(format_args!("pageset{i}_high_min"), &z.pcp.high_min)?;
            out(format_args!("pageset{i}_high_max"), &z.pcp.high_max)?;
            out(format_args!("pageset{i}_batch"), &z.pcp.batch)?;
            out(format_args!("pageset{i}_alloc_factor"), &s.alloc_factor)?;
            out(format_args!("pageset{i}_free_count"), &s.free_count)?;
            out(format_args!("pageset{i}_free_high"), &p.counters.free_high)?;
            out(
                format_args!("pageset{i}_alloc_zone"),
                &p.counters.alloc_zone,
            )?;
            out(format_args!("pageset{i}_pgalloc"), &p.counters.pgalloc)?;
            out(format_args!("pageset{i}_pgfree"), &p.counters.pgfree)?;
            out(format_args!("pageset{i}_lock_busy"), &p.lock_busy)?;
            out(
                format_args!("pageset{i}_large_count"),
                &p.counters.large_count,
            )?;
            out(
                format_args!("pageset{i}_large_high"),
                &p.counters.large_high,
            )?;
        }
        kv! {
            "heaps" => self.heaps[0],
            "heaps_active" => self.heaps[1],
            "heaps_abandoned" => self.heaps[2],
            "slabs_created" => self.slabs_created,
            "slabs_retired" => self.slabs_retired,
            "slabs_live" => self.slabs_created - self.slabs_retired,
            "slabs_short_lived" => self.slabs_short_lived,
            "remote_frees" => self.remote_frees,
            "profile_slow_paths" => self.profile_slow_paths,
            "large_bin_allocs" => self.block_bins[0] + self.block_bins[1],
            "large_bin_hits" => self.block_bins[1],
            "large_bin_frees" => self.block_bins[2],
            "large_bin_spilled_pages" => self.block_bins[3],
            "large_bin_free_high" => self.block_bins[4],
            "large_bin_pages" => self.block_bins[5],
            "huge_blocks" => self.huge.live,
            "huge_live_bytes" => self.huge.live_bytes,
            "huge_bytes" => self.huge.bytes,
            "huge_allocs" => self.huge.allocs,
            "huge_cache_hits" => self.huge.cache_hits,
            "huge_cached_blocks" => self.huge.cached,
            "huge_cached_bytes" => self.huge.cached_bytes,
            "huge_cache_high" => self.huge.cache_high,
            "reclaim_runs" => self.reclaim.runs,
            "reclaim_full_runs" => self.reclaim.full_runs,
            "reclaim_retry_ok" => self.reclaim.retry_ok,
            "reclaim_slabs" => self.reclaim.slabs,
            "reclaim_pcp_pages" => self.reclaim.pcp_pages,
            "reclaim_huge_bytes" => self.reclaim.huge_bytes,
            "reclaim_offline_bytes" => self.reclaim.offline_bytes,
            "reclaim_released_bytes" => self.reclaim.released_bytes,
            "memcg_limit_bytes" => self.reclaim.memcg_limit,
            "memcg_usage_bytes" => self.reclaim.memcg_usage,
            "memcg_reads" => self.reclaim.memcg_reads,
            "memcg_give_backs" => self.reclaim.memcg_give_backs,
            "thp_active" => u8::from(self.thp.0),
            "thp_collapsed_pageblocks" => self.thp.1,
            "ticks" => self.ticks,
            "background_thread" => u8::from(self.background),
            "cxx_new" => self.cxx[CxxCall::New as usize],
            "cxx_new_aligned" => self.cxx[CxxCall::NewAligned as usize],
            "cxx_delete_sized" => self.cxx[CxxCall::DeleteSized as usize],
            "cxx_delete_aligned" => self.cxx[CxxCall::DeleteAligned as usize],
            "page_size" => PAGE_SIZE,
        }
        Ok(())
    }
}
