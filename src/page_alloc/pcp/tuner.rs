//! The self-tuning rule of a cache in front of a slower one — the
//! kernel's `struct per_cpu_pages` tuning of v6.7 (seed 000) with seed
//! 002's free_count policies — written once, as a value every cache of
//! the allocator carries: the pagesets' order lists (`tune.rs` adds the
//! kernel's order-specific parts), their class lists (`class_lists.rs`), a
//! thread's block bins (`heap/block_bins/`), a heap's parked slabs
//! (`heap/park_high.rs`) and the huge-block cache (`large/huge/`).
//!
//! A [`Tuner`] holds `high` (above it the cache gives back), `count`,
//! `free_count` (what was freed without allocations in between) and
//! `missed` (what was given back for lack of room since the last tick);
//! the owner gives the bounds and the units in [`TunerParams`] — pages for
//! the pagesets and the bins, bytes for parked slabs, pages for the huge
//! cache. Every decision takes the [`Knobs`], so each switch and policy
//! reaches every level:
//!
//! - `AUTO_TUNE` (patches 6–7): `high` moves between `high_min` and
//!   `high_max`: it grows on a refill — on the order lists by a batch each
//!   refill (the kernel), above them as far as the cache gave back for
//!   lack of room since the last tick ([`Tuner::grow_after_give_back`]) —
//!   and loses an eighth each tick ([`Tuner::decay`]). Off: `high` stays
//!   at `high_min`, nothing grows or decays (v6.6's fixed high).
//! - `BELOW_HIGH` (patch 8): no growth while the zone is below its high
//!   watermark (the huge cache, outside the zone, asks the same zone).
//! - `FREE_COUNT` (patch 9): `free_count` grows with each free and falls
//!   with each allocation, as [`FreeCountMode`] says (halved, or less the
//!   units taken); when it reaches the [`FreeHighThreshold`], the cache
//!   only frees — a consumer — and a free_high drain gives back what it
//!   holds past the batch it keeps, cutting `high` by
//!   `batch << BATCH_SCALE_MAX`. Off: no free_count and, above the order
//!   lists, no free_high (the order lists fall back to v6.6's
//!   free_factor, `tune.rs`).
//! - `FREE_HIGH_BATCH` (patches 2–3): a free_high drain keeps
//!   [`TunerParams::keep`] units; off, it keeps nothing. (The order lists
//!   keep `batch` pages only on a CPU with a big cache slice, `tune.rs`.)
//! - [`FreeHighThreshold`]: `batch` and `5batch` mean `batch` and
//!   `5 × batch` of the level's units at every level; the default,
//!   `batch+high_min/2`, is each level's own rule ([`OwnFreeHigh`]):
//!   Linux 6.16's `batch + high_min / 2` on the order lists, twice `high`
//!   on the class lists and the block bins, and no free_high at all on the
//!   parked slabs and the huge cache (which had none).
//!
//! With every heuristic off (`PCPALLOC_HEURISTICS=base`) each level is a
//! cache of fixed size `high_min` that gives back past it: no growth, no
//! decay, no free_count, no free_high — v6.6's pageset at every level.
//! `PCPALLOC_HIGH_FRACTION` fixes the order lists' `high_min = high_max`
//! (and so the class lists' floor, which is at least it) and, through
//! [`Knobs::fixed_high`], keeps every level at its `high_min` as AUTO_TUNE
//! off would (the order lists keep the rest of the kernel's rule).
//!
//! Pure arithmetic on plain fields: no allocation, no division (shifts).

use crate::page_alloc::knobs::{heuristic::*, FreeCountMode, FreeHighThreshold, Knobs};

/// high decays by high >> this each tick (1/8, patch 7).
pub(crate) const HIGH_DECAY_SHIFT: u32 = 3;

/// What the default free_high threshold (`batch+high_min/2`) means at a
/// level: its own rule, kept from before the levels shared one tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnFreeHigh {
    /// `free_count ≥ batch + high_min / 2` (Linux 6.16; the order lists).
    BatchPlusHalfHighMin,
    /// `free_count ≥ 2 × high` (the class lists, the block bins).
    TwiceHigh,
    /// No free_high (the parked slabs, the huge cache).
    Never,
}

/// A level's bounds and units, given by its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunerParams {
    /// The level's batch: what the free_high thresholds `batch` and
    /// `5batch` count, and `batch << BATCH_SCALE_MAX` is what a free_high
    /// drain cuts from `high`.
    pub batch: i32,
    /// `high`'s floor, and the fixed high with AUTO_TUNE off.
    pub high_min: i32,
    /// `high`'s ceiling.
    pub high_max: i32,
    /// Units a free_high drain leaves (with FREE_HIGH_BATCH on).
    pub keep: i32,
    /// `free_count` stops growing once it reaches this.
    pub free_count_cap: i32,
    /// The level's own free_high threshold (the default policy).
    pub own_free_high: OwnFreeHigh,
}

/// The tuning state of one cache (the kernel's `struct per_cpu_pages`
/// minus the lock and lists). `flags`, `alloc_factor` and `free_factor`
/// are the order lists' (`tune.rs`); the other levels leave them 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tuner {
    /// Units the cache holds (the order lists' `count`; the other levels
    /// keep their own measure and pass it in).
    pub count: i32,
    /// Current high: above it, frees give back.
    pub high: i32,
    /// Units freed recently without allocation (patch 9); may go negative
    /// under seed 002's `exact` policy.
    pub free_count: i32,
    /// Units given back for lack of room since the last tick (what a
    /// refill may grow `high` by, above the order lists).
    pub missed: i32,
    /// The order lists' PCPF_* flags (`tune.rs`).
    pub flags: u8,
    /// Order-0 refill scale: batch << alloc_factor (patch 5; order lists).
    pub alloc_factor: u8,
    /// Free batch scale before patch 9 (v6.6's free_factor; order lists).
    pub free_factor: u8,
}

impl Tuner {
    /// A tuner at `high`, holding nothing.
    pub const fn new(high: i32) -> Tuner {
        Tuner {
            count: 0,
            high,
            free_count: 0,
            missed: 0,
            flags: 0,
            alloc_factor: 0,
            free_factor: 0,
        }
    }

    /// Whether `high` auto-tunes: AUTO_TUNE on and no manual high
    /// fraction (`PCPALLOC_HIGH_FRACTION` fixes the pagesets' high, so
    /// every level stays at its `high_min`; the order lists' `high_min`
    /// then equals their `high_max`).
    #[inline(always)]
    pub fn auto_tunes(k: &Knobs) -> bool {
        k.heuristics.has(AUTO_TUNE) && !k.fixed_high
    }

    /// `high` within its bounds: clamped to `[high_min, high_max]` when
    /// auto-tuning, else `high_min`. Returns it.
    #[inline]
    pub fn clamp_high(&mut self, p: &TunerParams, k: &Knobs) -> i32 {
        self.high = if Self::auto_tunes(k) {
            self.high.clamp(p.high_min, p.high_max.max(p.high_min))
        } else {
            p.high_min
        };
        self.high
    }

    /// `high` at least `high_min` when auto-tuning (a `high_max` that fell
    /// since is left to the next give-back), else `high_min`.
    #[inline]
    pub fn raise_to_floor(&mut self, p: &TunerParams, k: &Knobs) {
        self.high = if Self::auto_tunes(k) {
            self.high.max(p.high_min)
        } else {
            p.high_min
        };
    }

    /// An allocation of `units` from the cache: free_count is halved
    /// (v6.7) or reduced by the units taken (seed 002 v1).
    #[inline(always)]
    pub fn on_alloc(&mut self, units: i32, k: &Knobs) {
        if k.heuristics.has(FREE_COUNT) {
            self.free_count = match k.free_count_mode {
                FreeCountMode::Halve => self.free_count >> 1,
                FreeCountMode::Exact => self.free_count.saturating_sub(units).max(i32::MIN / 2),
            };
        }
    }

    /// A free of `units` to the cache: free_count grows while below its
    /// cap.
    #[inline(always)]
    pub fn on_free(&mut self, units: i32, p: &TunerParams, k: &Knobs) {
        if k.heuristics.has(FREE_COUNT) && self.free_count < p.free_count_cap {
            self.free_count += units;
        }
    }

    /// The free_count at which the cache counts as a consumer's (free_high;
    /// `i32::MAX`: never).
    #[inline]
    pub fn free_high_threshold(&self, p: &TunerParams, k: &Knobs) -> i32 {
        match k.free_high_threshold {
            FreeHighThreshold::Batch => p.batch,
            FreeHighThreshold::FiveBatch => p.batch.saturating_mul(5),
            FreeHighThreshold::BatchPlusHalfHighMin => match p.own_free_high {
                OwnFreeHigh::BatchPlusHalfHighMin => p.batch + (p.high_min >> 1),
                OwnFreeHigh::TwiceHigh => self.high.saturating_mul(2),
                OwnFreeHigh::Never => i32::MAX,
            },
        }
    }

    /// Whether free_count says this cache only frees (FREE_COUNT on and
    /// the threshold reached). The order lists add the kernel's
    /// order-specific conditions (`tune.rs`).
    #[inline]
    pub fn free_high_due(&self, p: &TunerParams, k: &Knobs) -> bool {
        k.heuristics.has(FREE_COUNT) && self.free_count >= self.free_high_threshold(p, k)
    }

    /// Units a free_high drain leaves: `keep` with FREE_HIGH_BATCH, else
    /// none.
    #[inline]
    pub fn keep(p: &TunerParams, k: &Knobs) -> i32 {
        if k.heuristics.has(FREE_HIGH_BATCH) {
            p.keep
        } else {
            0
        }
    }

    /// Whether a cache holding `held` units drains for free_high now.
    #[inline]
    pub fn wants_free_high(&self, held: i32, p: &TunerParams, k: &Knobs) -> bool {
        self.free_high_due(p, k) && held > Self::keep(p, k)
    }

    /// A free_high drain's cut of `high`: `batch << BATCH_SCALE_MAX`, not
    /// under `high_min` (`nr_pcp_high` on free_high); `high_min` when not
    /// auto-tuning.
    #[inline]
    pub fn cut_high(&mut self, p: &TunerParams, k: &Knobs) {
        self.high = if Self::auto_tunes(k) {
            (self.high - (p.batch << k.batch_scale_max)).max(p.high_min)
        } else {
            p.high_min
        };
    }

    /// A free_high drain above the order lists (which drain a batch per
    /// free instead, `tune.rs`): cuts `high`, starts free_count over.
    /// Returns the units to keep; the owner gives back the rest.
    #[inline]
    pub fn free_high(&mut self, p: &TunerParams, k: &Knobs) -> i32 {
        self.cut_high(p, k);
        self.free_count = 0;
        Self::keep(p, k)
    }

    /// Whether `high` may grow now (AUTO_TUNE on, and not BELOW_HIGH
    /// while the zone is below its high watermark).
    #[inline]
    pub fn may_grow(below_high: bool, k: &Knobs) -> bool {
        let h = k.heuristics;
        Self::auto_tunes(k) && !(h.has(BELOW_HIGH) && below_high)
    }

    /// Grows `high` by `by`, up to `high_max`, if it may grow. Returns
    /// whether it may.
    #[inline]
    pub fn grow(&mut self, by: i32, p: &TunerParams, below_high: bool, k: &Knobs) -> bool {
        if !Self::may_grow(below_high, k) {
            return false;
        }
        self.high = self.high.saturating_add(by).min(p.high_max);
        true
    }

    /// `units` were given back for lack of room.
    #[inline]
    pub fn note_given_back(&mut self, units: i32) {
        self.missed = self.missed.saturating_add(units);
    }

    /// A refill of `units` after give-backs for lack of room: `high` grows
    /// by as much of them as was given back since the last tick (the
    /// refill half of patch 7, for the levels above the order lists).
    #[inline]
    pub fn grow_after_give_back(
        &mut self,
        units: i32,
        p: &TunerParams,
        below_high: bool,
        k: &Knobs,
    ) {
        if self.missed > 0 && Self::may_grow(below_high, k) {
            let by = units.min(self.missed);
            self.missed -= by;
            self.grow(by, p, below_high, k);
        }
    }

    /// The tick (`decay_pcp_high`'s common part): `missed` starts over and
    /// an auto-tuned `high` above `high_min` loses an eighth, not under
    /// `high_min`. Returns whether it decayed. The owner gives back what
    /// it holds past `high`.
    #[inline]
    pub fn decay(&mut self, p: &TunerParams, k: &Knobs) -> bool {
        self.missed = 0;
        if !Self::auto_tunes(k) {
            self.high = p.high_min;
            return false;
        }
        if self.high <= p.high_min {
            return false;
        }
        self.high = (self.high - (self.high >> HIGH_DECAY_SHIFT)).max(p.high_min);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::knobs::Heuristics;

    const P: TunerParams = TunerParams {
        batch: 2,
        high_min: 64,
        high_max: 1024,
        keep: 16,
        free_count_cap: 1 << 18,
        own_free_high: OwnFreeHigh::TwiceHigh,
    };

    fn knobs(h: Heuristics, t: FreeHighThreshold, m: FreeCountMode) -> Knobs {
        Knobs {
            heuristics: h,
            free_high_threshold: t,
            free_count_mode: m,
            ..Knobs::DEFAULT
        }
    }

    #[test]
    fn grows_after_give_backs_then_decays_by_eighths() {
        let k = Knobs::DEFAULT;
        let mut t = Tuner::new(64);
        // No give-back yet: a refill does not grow high.
        t.grow_after_give_back(8, &P, false, &k);
        assert_eq!((t.high, t.missed), (64, 0));
        t.note_given_back(20);
        t.grow_after_give_back(8, &P, false, &k);
        t.grow_after_give_back(8, &P, false, &k);
        t.grow_after_give_back(8, &P, false, &k);
        assert_eq!((t.high, t.missed), (64 + 20, 0));
        // Below the high watermark: no growth (BELOW_HIGH).
        t.note_given_back(8);
        t.grow_after_give_back(8, &P, true, &k);
        assert_eq!((t.high, t.missed), (84, 8));
        // The tick: missed starts over, high loses an eighth each tick.
        let mut highs = [0; 3];
        for h in &mut highs {
            assert!(t.decay(&P, &k));
            *h = t.high;
        }
        assert_eq!(t.missed, 0);
        assert_eq!(highs, [74, 65, 64]);
        assert!(!t.decay(&P, &k));
        // The ceiling holds.
        t.note_given_back(5000);
        t.grow_after_give_back(5000, &P, false, &k);
        assert_eq!(t.high, 1024);
    }

    #[test]
    fn free_count_halves_or_counts_exactly() {
        let k = Knobs::DEFAULT;
        let mut t = Tuner::new(64);
        for _ in 0..10 {
            t.on_free(8, &P, &k);
        }
        assert_eq!(t.free_count, 80);
        t.on_alloc(8, &k);
        assert_eq!(t.free_count, 40);
        let ke = knobs(
            Heuristics::ALL,
            FreeHighThreshold::BatchPlusHalfHighMin,
            FreeCountMode::Exact,
        );
        t.on_alloc(8, &ke);
        assert_eq!(t.free_count, 32);
        for _ in 0..5 {
            t.on_alloc(8, &ke);
        }
        assert_eq!(t.free_count, -8, "exact may go negative (seed 002 v1)");
        // The cap: no growth once reached.
        let capped = TunerParams {
            free_count_cap: 20,
            ..P
        };
        let mut c = Tuner::new(64);
        for _ in 0..10 {
            c.on_free(8, &capped, &k);
        }
        assert_eq!(c.free_count, 24);
        // FREE_COUNT off: nothing counted.
        let kb = knobs(
            Heuristics::BASE,
            FreeHighThreshold::Batch,
            FreeCountMode::Halve,
        );
        let mut b = Tuner::new(64);
        b.on_free(8, &P, &kb);
        assert_eq!(b.free_count, 0);
        assert!(!b.free_high_due(&P, &kb));
    }

    #[test]
    fn thresholds_per_policy_and_level() {
        let t = Tuner::new(100);
        let th = |th, own| {
            let p = TunerParams {
                own_free_high: own,
                ..P
            };
            t.free_high_threshold(&p, &knobs(Heuristics::ALL, th, FreeCountMode::Halve))
        };
        use FreeHighThreshold::{Batch, FiveBatch};
        use OwnFreeHigh::{Never, TwiceHigh};
        for own in [OwnFreeHigh::BatchPlusHalfHighMin, TwiceHigh, Never] {
            assert_eq!(th(Batch, own), 2);
            assert_eq!(th(FiveBatch, own), 10);
        }
        let v616 = FreeHighThreshold::BatchPlusHalfHighMin;
        assert_eq!(th(v616, OwnFreeHigh::BatchPlusHalfHighMin), 2 + 32);
        assert_eq!(th(v616, TwiceHigh), 200);
        assert_eq!(th(v616, Never), i32::MAX);
    }

    #[test]
    fn free_high_cuts_high_and_keeps_the_batch() {
        let k = Knobs::DEFAULT; // BATCH_SCALE_MAX 5: cut 2 << 5 = 64
        let mut t = Tuner::new(300);
        for _ in 0..75 {
            t.on_free(8, &P, &k);
        }
        assert_eq!(t.free_count, 600);
        assert!(t.wants_free_high(200, &P, &k));
        assert!(
            !t.wants_free_high(16, &P, &k),
            "nothing past the batch kept"
        );
        assert_eq!(t.free_high(&P, &k), 16);
        assert_eq!((t.high, t.free_count), (236, 0));
        t.high = 100;
        t.free_count = 600;
        t.free_high(&P, &k);
        assert_eq!(t.high, 64, "not under high_min");
        // Without FREE_HIGH_BATCH everything goes.
        let k3 = knobs(
            Heuristics(Heuristics::ALL.0 & !FREE_HIGH_BATCH),
            FreeHighThreshold::Batch,
            FreeCountMode::Halve,
        );
        t.free_count = 2;
        assert!(t.wants_free_high(1, &P, &k3));
        assert_eq!(t.free_high(&P, &k3), 0);
    }

    #[test]
    fn base_is_a_fixed_high_without_free_high() {
        let kb = knobs(
            Heuristics::BASE,
            FreeHighThreshold::Batch,
            FreeCountMode::Halve,
        );
        let mut t = Tuner::new(500);
        t.decay(&P, &kb);
        assert_eq!(t.high, 64, "AUTO_TUNE off: high_min");
        t.note_given_back(100);
        t.grow_after_give_back(32, &P, false, &kb);
        assert_eq!(t.high, 64);
        assert_eq!(t.clamp_high(&P, &kb), 64);
        for _ in 0..100 {
            t.on_free(8, &P, &kb);
        }
        assert!(!t.wants_free_high(1000, &P, &kb));
    }
}
