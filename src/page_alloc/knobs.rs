//! The page allocator's knobs: which of seed 000's heuristics run, the
//! batch scale, seed 002's free_count policy and whether a manual high
//! fraction fixed the pagesets' high — read on every operation as one
//! packed word (`PageAllocator::set_knobs`), so the benchmark can run the
//! seeds' ablation rows inside one process. Every cache level reads them
//! through the one tuner (`pcp/tuner.rs`), so each knob applies at every
//! level. The runtime sets them from the environment
//! (`settings/`).

use core::fmt::{self, Write};

/// One PCP heuristic of seed 000, as a bit; [`Heuristics`] is a set of them.
pub(crate) mod heuristic {
    /// Patch 1: free_high only on the second consecutive high-order free.
    pub(crate) const PREV_FREE_HIGH_ORDER: u32 = 1 << 0;
    /// Patches 2–3: keep `batch` pages before a free_high drain when this
    /// CPU's cache slice exceeds 3 × batch pages.
    pub(crate) const FREE_HIGH_BATCH: u32 = 1 << 1;
    /// Patch 5: scale the order-0 refill batch with alloc_factor.
    pub(crate) const ALLOC_FACTOR: u32 = 1 << 2;
    /// Patches 6–7: auto-tune high between high_min and high_max, decay it
    /// every tick.
    pub(crate) const AUTO_TUNE: u32 = 1 << 3;
    /// Patch 8: stop growing / shrink high while the zone is below its high
    /// watermark.
    pub(crate) const BELOW_HIGH: u32 = 1 << 4;
    /// Patch 9: count consecutive freed pages (free_count) instead of
    /// doubling free_factor.
    pub(crate) const FREE_COUNT: u32 = 1 << 5;
    /// Every heuristic (the series as merged in v6.7).
    pub(crate) const ALL: u32 = (1 << 6) - 1;
}

/// A set of `heuristic` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heuristics(pub u32);

impl Heuristics {
    /// Every heuristic on.
    pub const ALL: Heuristics = Heuristics(heuristic::ALL);
    /// None: the pre-series (v6.6) pageset.
    pub const BASE: Heuristics = Heuristics(0);

    /// Whether heuristic `h` is on.
    #[inline]
    pub fn has(self, h: u32) -> bool {
        self.0 & h != 0
    }

    /// The cumulative ablation rows of the cover letter, by patch number:
    /// `row(0)` = base, `row(1)` = +1, `row(3)` = +1..3, …, `row(9)` = all.
    pub const fn row(patch: u32) -> Heuristics {
        use heuristic::*;
        let mut h = 0;
        if patch >= 1 {
            h |= PREV_FREE_HIGH_ORDER;
        }
        if patch >= 3 {
            h |= FREE_HIGH_BATCH;
        }
        if patch >= 5 {
            h |= ALLOC_FACTOR;
        }
        if patch >= 7 {
            h |= AUTO_TUNE;
        }
        if patch >= 8 {
            h |= BELOW_HIGH;
        }
        if patch >= 9 {
            h |= FREE_COUNT;
        }
        Heuristics(h)
    }
}

/// What an allocation from a pageset does to free_count (seed 002).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeCountMode {
    /// v6.7: halve it (`free_count >>= 1`).
    Halve = 0,
    /// Dhama v1: subtract the pages allocated (`free_count -= 1 << order`).
    Exact = 1,
}

/// The free_count level at which consecutive high-order frees drain the
/// pageset (free_high), seed 002's variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeHighThreshold {
    /// v6.7: `free_count >= batch`.
    Batch = 0,
    /// Dhama v2: `free_count >= 5 * batch`.
    FiveBatch = 1,
    /// v6.16: `free_count >= batch + high_min / 2`.
    BatchPlusHalfHighMin = 2,
}

/// The knobs the PCP code reads on every operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knobs {
    /// Heuristics in force.
    pub heuristics: Heuristics,
    /// BATCH_SCALE_MAX (seed 000 patch 4), 0..=6.
    pub batch_scale_max: u32,
    /// free_count decrement on allocation.
    pub free_count_mode: FreeCountMode,
    /// free_high threshold.
    pub free_high_threshold: FreeHighThreshold,
    /// A manual high fraction (`PCPALLOC_HIGH_FRACTION`) fixed the
    /// pagesets' high: no level auto-tunes.
    pub fixed_high: bool,
}

impl Knobs {
    /// The defaults (chosen from the benchmark's ablation table; see the
    /// README).
    pub const DEFAULT: Knobs = Knobs {
        heuristics: Heuristics::ALL,
        batch_scale_max: DEFAULT_BATCH_SCALE_MAX,
        free_count_mode: FreeCountMode::Halve,
        free_high_threshold: FreeHighThreshold::BatchPlusHalfHighMin,
        fixed_high: false,
    };
}

/// The kernel's CONFIG_PCP_BATCH_SCALE_MAX default.
pub(crate) const DEFAULT_BATCH_SCALE_MAX: u32 = 5;
/// Largest allowed BATCH_SCALE_MAX.
pub(crate) const MAX_BATCH_SCALE_MAX: u32 = 6;
impl Knobs {
    /// The knobs packed in one word, so the PCP paths read them with a
    /// single load: bits 0..8 heuristics, 8..12 BATCH_SCALE_MAX, 12
    /// free_count mode, 13..15 free_high threshold, 15 fixed high.
    pub const fn to_bits(self) -> u32 {
        (self.heuristics.0 & 0xff)
            | (self.batch_scale_max & 0xf) << 8
            | (self.free_count_mode as u32) << 12
            | (self.free_high_threshold as u32) << 13
            | (self.fixed_high as u32) << 15
    }

    /// The knobs from [`to_bits`](Self::to_bits) (table lookups, no
    /// branches: every cache level decodes them on its slow paths).
    #[inline]
    pub fn from_bits(v: u32) -> Knobs {
        const MODES: [FreeCountMode; 2] = [FreeCountMode::Halve, FreeCountMode::Exact];
        const THRESHOLDS: [FreeHighThreshold; 4] = [
            FreeHighThreshold::Batch,
            FreeHighThreshold::FiveBatch,
            FreeHighThreshold::BatchPlusHalfHighMin,
            FreeHighThreshold::BatchPlusHalfHighMin,
        ];
        Knobs {
            heuristics: Heuristics(v & 0xff),
            batch_scale_max: ((v >> 8) & 0xf).min(MAX_BATCH_SCALE_MAX),
            free_count_mode: MODES[((v >> 12) & 1) as usize],
            free_high_threshold: THRESHOLDS[((v >> 13) & 3) as usize],
            fixed_high: v & (1 << 15) != 0,
        }
    }
}

/// Parses a heuristics list: `all`, `base`/`none`, patch numbers
/// 1,3,5,7,8,9 or names, each optionally prefixed by `-` (remove) or `+`.
/// Items apply left to right starting from the empty set, so `all,-8` is
/// everything but BELOW_HIGH and `9` alone is just free_count.
pub(crate) fn parse_heuristics(v: &[u8]) -> Option<Heuristics> {
    use heuristic::*;
    let mut h = 0u32;
    for item in v.trim_ascii().split(|&c| c == b',') {
        let item = item.trim_ascii();
        let (remove, name) = match item {
            [b'-', rest @ ..] => (true, rest),
            [b'+', rest @ ..] => (false, rest),
            _ => (false, item),
        };
        let bits = match name {
            b"all" => ALL,
            b"base" | b"none" => {
                h = 0;
                continue;
            }
            b"1" | b"prev_free_high_order" => PREV_FREE_HIGH_ORDER,
            b"3" | b"free_high_batch" => FREE_HIGH_BATCH,
            b"5" | b"alloc_factor" => ALLOC_FACTOR,
            b"7" | b"auto_tune" => AUTO_TUNE,
            b"8" | b"below_high" => BELOW_HIGH,
            b"9" | b"free_count" => FREE_COUNT,
            _ => return None,
        };
        if remove {
            h &= !bits;
        } else {
            h |= bits;
        }
    }
    Some(Heuristics(h))
}

/// Writes a heuristics set as `PCPALLOC_HEURISTICS` would take it: `all`,
/// `base`, or the names of those on.
pub(crate) fn write_heuristics(w: &mut dyn Write, h: Heuristics) -> fmt::Result {
    use heuristic::*;
    if h == Heuristics::ALL {
        return w.write_str("all");
    }
    if h == Heuristics::BASE {
        return w.write_str("base");
    }
    let names = [
        (PREV_FREE_HIGH_ORDER, "prev_free_high_order"),
        (FREE_HIGH_BATCH, "free_high_batch"),
        (ALLOC_FACTOR, "alloc_factor"),
        (AUTO_TUNE, "auto_tune"),
        (BELOW_HIGH, "below_high"),
        (FREE_COUNT, "free_count"),
    ];
    let mut first = true;
    for (bit, name) in names {
        if h.has(bit) {
            if !first {
                w.write_str(",")?;
            }
            w.write_str(name)?;
            first = false;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use heuristic::*;

    #[test]
    fn heuristics_lists_parse() {
        assert_eq!(parse_heuristics(b"all"), Some(Heuristics::ALL));
        assert_eq!(parse_heuristics(b"base"), Some(Heuristics::BASE));
        assert_eq!(
            parse_heuristics(b"1,3"),
            Some(Heuristics(PREV_FREE_HIGH_ORDER | FREE_HIGH_BATCH))
        );
        assert_eq!(
            parse_heuristics(b"all,-8"),
            Some(Heuristics(ALL & !BELOW_HIGH))
        );
        assert_eq!(
            parse_heuristics(b"free_count"),
            Some(Heuristics(FREE_COUNT))
        );
        assert_eq!(parse_heuristics(b"1,x"), None);
    }

    #[test]
    fn ablation_rows_are_cumulative() {
        assert_eq!(Heuristics::row(0), Heuristics::BASE);
        assert_eq!(Heuristics::row(9), Heuristics::ALL);
        assert!(Heuristics::row(5).has(ALLOC_FACTOR) && !Heuristics::row(5).has(AUTO_TUNE));
    }

    #[test]
    fn knobs_round_trip() {
        for h in [Heuristics::ALL, Heuristics::BASE, Heuristics::row(5)] {
            for mode in [FreeCountMode::Halve, FreeCountMode::Exact] {
                for th in [
                    FreeHighThreshold::Batch,
                    FreeHighThreshold::FiveBatch,
                    FreeHighThreshold::BatchPlusHalfHighMin,
                ] {
                    for fixed_high in [false, true] {
                        let k = Knobs {
                            heuristics: h,
                            batch_scale_max: 6,
                            free_count_mode: mode,
                            free_high_threshold: th,
                            fixed_high,
                        };
                        assert_eq!(Knobs::from_bits(k.to_bits()), k);
                    }
                }
            }
        }
    }
}
