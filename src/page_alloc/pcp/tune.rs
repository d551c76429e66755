//! The PCP heuristics of seed 000 (patches 1–9) and seed 002 on the order
//! lists: pageset state and zone facts in, decisions out. Names and
//! structure follow `mm/page_alloc.c` of v6.7 so a reader of the seeds finds
//! each line; every heuristic can be switched off on its own
//! ([`Heuristics`](crate::page_alloc::knobs::Heuristics)), and with all off
//! the functions behave as v6.6 did. The rule every cache shares — high
//! within its bounds, its growth and decay, free_count, the free_high
//! threshold and cut — is the [`Tuner`]'s (`tuner.rs`); this module adds
//! what only the order lists have: orders, the alloc_factor refill scale,
//! consecutive high-order frees, v6.6's free_factor.
//!
//! Units: `count`, `high`, `high_min`, `high_max`, `batch` and `free_count`
//! are pages; the refill size returned by [`nr_pcp_alloc`] is in blocks of
//! the requested order (the kernel's `rmqueue_bulk` count).

use crate::geometry::PAGE_ALLOC_COSTLY_ORDER;
use crate::page_alloc::knobs::{heuristic::*, Knobs};
use crate::page_alloc::zone::watermark::PcpParams;

use super::tuner::{OwnFreeHigh, Tuner, TunerParams};

/// Flag: the previous free on this pageset was of order 1..=3 (patch 1).
pub(crate) const PCPF_PREV_FREE_HIGH_ORDER: u8 = 1 << 0;
/// Flag: this CPU's cache slice can hold more than 3 × batch pages, so a
/// free_high drain may keep `batch` pages (patches 2–3).
pub const PCPF_FREE_HIGH_BATCH: u8 = 1 << 1;

/// The tunable part of a pageset (the kernel's `struct per_cpu_pages`
/// minus the lock and lists): the shared [`Tuner`], in pages. Guarded by
/// the pageset lock.
pub type PcpState = Tuner;

/// What the free path decided ([`free_unref_page_commit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreeDecision {
    /// This free triggered a free_high drain.
    pub free_high: bool,
    /// Pages to hand back to the zone now (0: none).
    pub to_free: i32,
}

/// The order lists' bounds for the tuner: the zone's batch, high_min and
/// high_max in pages; free_count capped at `batch << BATCH_SCALE_MAX`;
/// Linux 6.16's threshold as their own.
#[inline]
pub(crate) fn tuner_params(p: &PcpParams, k: &Knobs) -> TunerParams {
    let batch = p.batch as i32;
    TunerParams {
        batch,
        high_min: p.high_min as i32,
        high_max: p.high_max as i32,
        keep: batch,
        free_count_cap: batch << k.batch_scale_max,
        own_free_high: OwnFreeHigh::BatchPlusHalfHighMin,
    }
}

/// The allocation side's bookkeeping, done on every allocation from the
/// pageset (`rmqueue_pcplist`): free_count is reduced — halved (v6.7) or
/// by the pages taken (seed 002 v1) — or, before patch 9, free_factor
/// halved.
#[inline]
pub(crate) fn on_alloc(s: &mut PcpState, order: u32, k: &Knobs) {
    if k.heuristics.has(FREE_COUNT) {
        s.on_alloc(1 << order, k);
    } else {
        s.free_factor >>= 1;
    }
}

/// Blocks of `order` to take from the zone when the list is empty
/// (`nr_pcp_alloc`). Grows `high` by the refill when auto-tuning and the
/// zone is not below its high watermark (patches 7–8), and doubles the
/// order-0 refill for consecutive refills without frees (patch 5).
pub(crate) fn nr_pcp_alloc(
    s: &mut PcpState,
    p: &PcpParams,
    order: u32,
    below_high: bool,
    k: &Knobs,
) -> i32 {
    let h = k.heuristics;
    let tp = tuner_params(p, k);
    let base_batch = tp.batch;
    let mut high = s.clamp_high(&tp, k);

    // PCP disabled (tiny zone): one block at a time.
    if high < base_batch {
        return 1;
    }

    let scaled = order == 0 && h.has(ALLOC_FACTOR);
    let mut batch = if scaled {
        base_batch << s.alloc_factor
    } else {
        base_batch
    };

    // If we had a larger high, we could have avoided going to the zone.
    if tp.high_min != tp.high_max && s.grow(batch, &tp, below_high, k) {
        high = s.high;
    }

    if scaled {
        let max_nr_alloc = (high - s.count - base_batch).max(base_batch);
        if batch <= max_nr_alloc && u32::from(s.alloc_factor) < k.batch_scale_max {
            s.alloc_factor += 1;
        }
        batch = batch.min(max_nr_alloc);
    }

    // Scale by order, keeping at least two blocks when caching at all.
    if batch > 1 {
        batch = (batch >> order).max(2);
    }
    batch
}

/// The free_count a pageset must reach before consecutive high-order frees
/// drain it (seed 002's three variants; [`Tuner::free_high_threshold`]).
#[cfg(test)]
pub fn free_high_threshold(p: &PcpParams, k: &Knobs) -> i32 {
    Tuner::default().free_high_threshold(&tuner_params(p, k), k)
}

/// The free path after a page of `order` went onto the pageset's list
/// (`free_unref_page_commit`): updates `count`, the flags and free_count,
/// then asks [`nr_pcp_high`] and [`nr_pcp_free`] how much to give back.
#[inline]
pub(crate) fn free_unref_page_commit(
    s: &mut PcpState,
    p: &PcpParams,
    order: u32,
    below_high: bool,
    k: &Knobs,
) -> FreeDecision {
    let h = k.heuristics;
    if h.has(ALLOC_FACTOR) {
        // On freeing, shrink the order-0 refill again (patch 5).
        s.alloc_factor >>= 1;
    }
    s.count += 1 << order;
    let tp = tuner_params(p, k);
    let batch = tp.batch;

    // High-order pages other than THPs fragment; limit how many a pageset
    // keeps when it mostly frees them (the free_high drain).
    let mut free_high = false;
    if (1..=PAGE_ALLOC_COSTLY_ORDER).contains(&order) {
        let freeing = if h.has(FREE_COUNT) {
            s.free_high_due(&tp, k)
        } else {
            s.free_factor != 0
        };
        let keep_batch_first = h.has(FREE_HIGH_BATCH) && s.flags & PCPF_FREE_HIGH_BATCH != 0;
        let consecutive = !h.has(PREV_FREE_HIGH_ORDER) || s.flags & PCPF_PREV_FREE_HIGH_ORDER != 0;
        free_high = freeing && consecutive && (!keep_batch_first || s.count >= batch);
        if h.has(PREV_FREE_HIGH_ORDER) {
            s.flags |= PCPF_PREV_FREE_HIGH_ORDER;
        }
    } else if h.has(PREV_FREE_HIGH_ORDER) {
        s.flags &= !PCPF_PREV_FREE_HIGH_ORDER;
    }
    s.on_free(1 << order, &tp, k);

    let high = nr_pcp_high(s, p, batch, free_high, below_high, k);
    let to_free = if s.count >= high {
        nr_pcp_free(s, batch, high, free_high, k)
    } else {
        0
    };
    FreeDecision { free_high, to_free }
}

/// The high the free path drains above (`nr_pcp_high`); also adjusts the
/// auto-tuned `high`: down on free_high and while BELOW_HIGH, up to hold a
/// batch of frees otherwise.
#[inline]
pub(crate) fn nr_pcp_high(
    s: &mut PcpState,
    p: &PcpParams,
    batch: i32,
    free_high: bool,
    below_high: bool,
    k: &Knobs,
) -> i32 {
    let h = k.heuristics;
    let tp = TunerParams {
        batch,
        ..tuner_params(p, k)
    };
    let (high_min, high_max) = (tp.high_min, tp.high_max);
    let high = s.clamp_high(&tp, k);
    if !h.has(AUTO_TUNE) {
        // v6.6: a fixed high; drain everything on free_high.
        return if high_min == 0 || free_high {
            0
        } else {
            high_min
        };
    }
    if high == 0 {
        return 0;
    }
    if free_high {
        s.cut_high(&tp, k);
        return 0;
    }
    if high_min == high_max {
        return high;
    }
    let recent = if h.has(FREE_COUNT) {
        s.free_count
    } else {
        batch << s.free_factor
    };
    if h.has(BELOW_HIGH) && below_high {
        let free_count = if h.has(FREE_COUNT) {
            recent.max(batch)
        } else {
            recent
        };
        s.high = (high - free_count).max(high_min);
        return s.count.max(high_min);
    }
    if s.count >= high {
        // high should be large enough to hold a batch of freed pages.
        let need_high = recent + batch;
        if s.high < need_high {
            s.high = need_high.clamp(high_min, high_max);
        }
    }
    high
}

/// Pages to free to the zone once `count` reached `high` (`nr_pcp_free`):
/// on free_high as much as BATCH_SCALE_MAX allows; otherwise free_count
/// (or batch << free_factor before patch 9), leaving at least `batch`.
pub(crate) fn nr_pcp_free(
    s: &mut PcpState,
    batch: i32,
    high: i32,
    free_high: bool,
    k: &Knobs,
) -> i32 {
    let h = k.heuristics;
    if free_high {
        return if h.has(AUTO_TUNE) {
            s.count.min(batch << k.batch_scale_max)
        } else {
            s.count
        };
    }
    // PCP disabled: free one block at a time.
    if high < batch {
        return 1;
    }
    let min_nr_free = batch;
    let max_nr_free = high - batch;
    let n = if h.has(FREE_COUNT) {
        s.free_count
    } else {
        // Double the batch each time there are consecutive frees.
        let n = batch << s.free_factor;
        let room = if h.has(AUTO_TUNE) {
            n <= max_nr_free
        } else {
            n < max_nr_free
        };
        if room && u32::from(s.free_factor) < k.batch_scale_max {
            s.free_factor += 1;
        }
        n
    };
    n.max(min_nr_free).min(max_nr_free)
}

/// The tick's decay of an auto-tuned high (`decay_pcp_high`): high loses an
/// eighth ([`Tuner::decay`]), but never more than batch << BATCH_SCALE_MAX
/// below `count`, and never below high_min. Returns the pages to drain
/// (count - high).
pub(crate) fn decay_pcp_high(s: &mut PcpState, p: &PcpParams, k: &Knobs) -> i32 {
    if !k.heuristics.has(AUTO_TUNE) {
        return 0;
    }
    let tp = tuner_params(p, k);
    if s.decay(&tp, k) {
        s.high = s.high.max(s.count - (tp.batch << k.batch_scale_max));
    }
    (s.count - s.high).max(0)
}

/// Whether a pageset on a CPU with a cache slice of `slice_bytes` keeps a
/// batch before free_high draining (`zone_pcp_update_cacheinfo`).
pub(crate) fn free_high_batch(slice_bytes: u64, batch: u32) -> bool {
    (slice_bytes >> crate::geometry::PAGE_SHIFT) > 3 * u64::from(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::knobs::{FreeCountMode, FreeHighThreshold, Heuristics};

    const P: PcpParams = PcpParams {
        batch: 63,
        high_min: 252,
        high_max: 32768,
    };

    fn knobs(h: Heuristics) -> Knobs {
        Knobs {
            heuristics: h,
            ..Knobs::DEFAULT
        }
    }

    #[test]
    fn order0_refills_double_up_to_the_scale_cap() {
        let k = knobs(Heuristics::ALL);
        let mut s = PcpState::default();
        let mut sizes = Vec::new();
        for _ in 0..8 {
            let n = nr_pcp_alloc(&mut s, &P, 0, false, &k);
            sizes.push(n);
            s.count += n; // the refill lands
            s.count = 0; // and is consumed before the next refill
        }
        assert_eq!(sizes, [63, 126, 252, 504, 1008, 2016, 2016, 2016]);
        assert_eq!(s.alloc_factor, 5);
        // high grew by each refill's (scaled) batch.
        assert_eq!(
            s.high,
            252 + 63 + 126 + 252 + 504 + 1008 + 2016 + 2016 + 2016
        );
    }

    #[test]
    fn alloc_factor_off_keeps_the_batch() {
        let k = knobs(Heuristics(Heuristics::ALL.0 & !ALLOC_FACTOR));
        let mut s = PcpState::default();
        for _ in 0..4 {
            assert_eq!(nr_pcp_alloc(&mut s, &P, 0, false, &k), 63);
        }
        assert_eq!(nr_pcp_alloc(&mut s, &P, 2, false, &k), 15); // 63 >> 2
        assert_eq!(nr_pcp_alloc(&mut s, &P, 3, false, &k), 7);
    }

    #[test]
    fn one_high_order_free_does_not_drain_but_two_do() {
        let k = knobs(Heuristics::ALL);
        let mut s = PcpState {
            count: 100,
            high: 1000,
            ..Default::default()
        };
        // A burst of order-0 frees builds free_count.
        for _ in 0..200 {
            let d = free_unref_page_commit(&mut s, &P, 0, false, &k);
            assert!(!d.free_high);
            s.count -= d.to_free;
        }
        let threshold = free_high_threshold(&P, &k);
        assert!(s.free_count >= threshold);
        let d1 = free_unref_page_commit(&mut s, &P, 1, false, &k);
        assert!(
            !d1.free_high,
            "a single order-1 free must not drain (patch 1)"
        );
        let d2 = free_unref_page_commit(&mut s, &P, 1, false, &k);
        assert!(d2.free_high, "the second consecutive order-1 free drains");
        assert_eq!(d2.to_free, s.count.min(63 << 5));
        // An order-0 free in between resets the detection.
        let mut t = PcpState {
            count: 100,
            high: 1000,
            free_count: 2000,
            ..Default::default()
        };
        assert!(!free_unref_page_commit(&mut t, &P, 1, false, &k).free_high);
        free_unref_page_commit(&mut t, &P, 0, false, &k);
        assert!(!free_unref_page_commit(&mut t, &P, 1, false, &k).free_high);
    }

    #[test]
    fn without_patch_1_a_single_high_order_free_drains() {
        let k = knobs(Heuristics::BASE);
        let mut s = PcpState {
            count: 40,
            free_factor: 1,
            ..Default::default()
        };
        let d = free_unref_page_commit(&mut s, &P, 1, false, &k);
        assert!(d.free_high);
        assert_eq!(d.to_free, 42, "v6.6 drains everything");
    }

    #[test]
    fn free_high_batch_keeps_a_batch_first() {
        let k = knobs(Heuristics::ALL);
        let mut s = PcpState {
            count: 10,
            high: 1000,
            free_count: 2000,
            flags: PCPF_FREE_HIGH_BATCH | PCPF_PREV_FREE_HIGH_ORDER,
            ..Default::default()
        };
        // count (12) < batch: no drain although everything else says so.
        assert!(!free_unref_page_commit(&mut s, &P, 1, false, &k).free_high);
        s.count = 62;
        assert!(free_unref_page_commit(&mut s, &P, 1, false, &k).free_high);
        assert!(free_high_batch(240 << 20, 63));
        assert!(!free_high_batch(512 << 10, 63)); // 128 pages <= 189
    }

    #[test]
    fn seed_002_thresholds_and_decrements() {
        let mut k = knobs(Heuristics::ALL);
        k.free_high_threshold = FreeHighThreshold::Batch;
        assert_eq!(free_high_threshold(&P, &k), 63);
        k.free_high_threshold = FreeHighThreshold::FiveBatch;
        assert_eq!(free_high_threshold(&P, &k), 315);
        k.free_high_threshold = FreeHighThreshold::BatchPlusHalfHighMin;
        assert_eq!(free_high_threshold(&P, &k), 63 + 126);
        let mut s = PcpState {
            free_count: 100,
            ..Default::default()
        };
        on_alloc(&mut s, 1, &k);
        assert_eq!(s.free_count, 50);
        k.free_count_mode = FreeCountMode::Exact;
        on_alloc(&mut s, 1, &k);
        assert_eq!(s.free_count, 48);
        for _ in 0..30 {
            on_alloc(&mut s, 0, &k);
        }
        assert_eq!(s.free_count, 18);
    }

    #[test]
    fn free_count_grows_to_its_cap() {
        let k = knobs(Heuristics::ALL);
        let mut s = PcpState {
            high: 1 << 20,
            ..Default::default()
        };
        let big = PcpParams {
            high_max: 1 << 20,
            ..P
        };
        for _ in 0..5000 {
            free_unref_page_commit(&mut s, &big, 0, false, &k);
        }
        assert_eq!(s.free_count, 63 << 5);
    }

    #[test]
    fn idle_high_decays_to_high_min_in_predicted_ticks() {
        let k = knobs(Heuristics::ALL);
        let mut s = PcpState {
            count: 0,
            high: 4000,
            ..Default::default()
        };
        let mut ticks = 0;
        let mut h = 4000;
        let mut expect = 0;
        while h > 252 {
            h = (h - (h >> 3)).max(252);
            expect += 1;
        }
        while s.high > 252 {
            decay_pcp_high(&mut s, &P, &k);
            ticks += 1;
        }
        assert_eq!(ticks, expect);
        assert_eq!(ticks, 21); // 4000 * (7/8)^n reaches 252 after 21 ticks
        assert_eq!(s.high, 252);
        // A full pageset drains at most batch << SCALE_MAX below count.
        let mut full = PcpState {
            count: 5000,
            high: 5000,
            ..Default::default()
        };
        let drain = decay_pcp_high(&mut full, &P, &k);
        assert_eq!(full.high, 5000 - 625);
        assert_eq!(drain, 625);
    }

    #[test]
    fn below_high_stops_growth_and_shrinks_on_free() {
        let k = knobs(Heuristics::ALL);
        let mut s = PcpState {
            high: 1000,
            ..Default::default()
        };
        let n = nr_pcp_alloc(&mut s, &P, 0, true, &k);
        assert_eq!(n, 63);
        assert_eq!(s.high, 1000, "no growth while below the high watermark");
        s.count = 600;
        s.free_count = 10;
        let d = free_unref_page_commit(&mut s, &P, 0, true, &k);
        assert_eq!(s.high, 1000 - 63, "shrinks by max(free_count, batch)");
        assert_eq!(d.to_free, 63, "clamp(free_count 11, batch, high - batch)");
        // Without patch 8 high grows regardless.
        let k7 = knobs(Heuristics::row(7));
        let mut t = PcpState {
            high: 1000,
            ..Default::default()
        };
        nr_pcp_alloc(&mut t, &P, 0, true, &k7);
        assert_eq!(t.high, 1063);
    }

    #[test]
    fn manual_high_disables_tuning() {
        let k = knobs(Heuristics::ALL);
        let fixed = PcpParams {
            batch: 63,
            high_min: 500,
            high_max: 500,
        };
        let mut s = PcpState::default();
        nr_pcp_alloc(&mut s, &fixed, 0, false, &k);
        assert_eq!(s.high, 500);
        s.count = 600;
        let d = free_unref_page_commit(&mut s, &fixed, 0, false, &k);
        assert_eq!(s.high, 500);
        assert_eq!(d.to_free, 63); // free_count 1 clamped up to batch
    }

    #[test]
    fn v66_free_factor_doubles_the_drain() {
        let k = knobs(Heuristics::BASE);
        let mut s = PcpState {
            count: 251,
            ..Default::default()
        };
        let mut drains = Vec::new();
        for _ in 0..4 {
            let d = free_unref_page_commit(&mut s, &P, 0, false, &k);
            drains.push(d.to_free);
            s.count -= d.to_free;
            s.count = 251;
        }
        // high 252: max_nr_free 189; 63, 126, then capped at 189.
        assert_eq!(drains, [63, 126, 189, 189]);
        on_alloc(&mut s, 0, &k);
        assert_eq!(s.free_factor, 1);
    }
}
