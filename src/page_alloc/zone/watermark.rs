//! The kernel's sizing formulas: watermarks (`__setup_per_zone_wmarks`),
//! the pcp batch (`zone_batchsize`) and the pcp high bounds
//! (`zone_highsize`). Pure functions of page counts.

use crate::util::rounddown_pow_of_two;

/// Index of the min watermark.
pub(crate) const WMARK_MIN: usize = 0;
/// Index of the low watermark.
pub(crate) const WMARK_LOW: usize = 1;
/// Index of the high watermark.
pub(crate) const WMARK_HIGH: usize = 2;

/// The kernel's `watermark_scale_factor` default, in 1/10000 of memory.
pub(crate) const WATERMARK_SCALE_FACTOR: usize = 10;
/// Bounds on `min_free_kbytes` (calculate_min_free_kbytes).
pub(crate) const MIN_FREE_KBYTES_MIN: u64 = 128;
/// Upper bound on `min_free_kbytes`.
pub(crate) const MIN_FREE_KBYTES_MAX: u64 = 262_144;
/// The smallest manual high fraction (MIN_PERCPU_PAGELIST_HIGH_FRACTION);
/// it also defines `high_max` when auto-tuning.
pub(crate) const MIN_PERCPU_PAGELIST_HIGH_FRACTION: usize = 8;

/// `min_free_kbytes = 4 * sqrt(managed_kbytes)`, clamped.
pub(crate) fn min_free_kbytes(managed_pages: usize) -> u64 {
    let kbytes = managed_pages as u64 * 4;
    (kbytes * 16)
        .isqrt()
        .clamp(MIN_FREE_KBYTES_MIN, MIN_FREE_KBYTES_MAX)
}

/// Watermarks `[min, low, high]` in pages for a zone of `managed` pages:
/// `low = min + max(min/4, managed*10/10000)`, `high = low + that`.
pub(crate) fn watermarks(managed: usize) -> [usize; 3] {
    if managed == 0 {
        return [0; 3];
    }
    let min = (min_free_kbytes(managed) / 4) as usize;
    let tmp = (min / 4).max(managed * WATERMARK_SCALE_FACTOR / 10_000);
    [min, min + tmp, min + 2 * tmp]
}

/// The pcp batch for a zone of `pages` pages (zone_batchsize):
/// `b = min(pages/1024, 256) / 4` (at least 1), then
/// `rounddown_pow_of_two(b + b/2) - 1`; 63 for a zone of a GiB or more.
pub(crate) fn zone_batchsize(pages: usize) -> u32 {
    let b = ((pages >> 10).min(256) / 4).max(1);
    let b = rounddown_pow_of_two(b + b / 2) - 1;
    b.max(1) as u32
}

/// The pcp high for `total_pages` split over `nr_cpus`, at least
/// `batch * 4` (zone_highsize).
pub(crate) fn zone_highsize(total_pages: usize, nr_cpus: usize, batch: u32) -> u32 {
    let high = total_pages / nr_cpus.max(1);
    (high as u64)
        .max(u64::from(batch) << 2)
        .min(i32::MAX as u64) as u32
}

/// Batch and high bounds handed to the pagesets of a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpParams {
    /// Pages moved per refill/drain step.
    pub batch: u32,
    /// Lower bound of the auto-tuned high.
    pub high_min: u32,
    /// Upper bound of the auto-tuned high.
    pub high_max: u32,
}

/// The pcp bounds as pcpalloc sets them (a heap has no fixed RAM to take
/// the kernel's zone-size fractions of): `batch` from the memory limit, `high_min` from the
/// heap's own low watermark, `high_max` from the limit / 8; each split over
/// the CPUs. A manual `high_fraction` (≥ 8) sets both bounds to
/// `managed / fraction / cpus`, which turns auto-tuning off.
pub(crate) fn pcp_params(
    managed: usize,
    limit_pages: usize,
    nr_cpus: usize,
    high_fraction: usize,
) -> PcpParams {
    let batch = zone_batchsize(limit_pages);
    if let Some(share) = managed.checked_div(high_fraction) {
        let h = zone_highsize(share, nr_cpus, batch);
        return PcpParams {
            batch,
            high_min: h,
            high_max: h,
        };
    }
    let high_min = zone_highsize(watermarks(managed)[WMARK_LOW], nr_cpus, batch);
    let high_max = zone_highsize(
        limit_pages / MIN_PERCPU_PAGELIST_HIGH_FRACTION,
        nr_cpus,
        batch,
    )
    .max(high_min);
    PcpParams {
        batch,
        high_min,
        high_max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_matches_the_kernel() {
        // A GiB or more: 63, as in the kernel on any real machine.
        assert_eq!(zone_batchsize(1 << 18), 63);
        assert_eq!(zone_batchsize(6 << 20), 63);
        // 256 MiB: min(64, 256)/4 = 16 -> rounddown(24) - 1 = 15.
        assert_eq!(zone_batchsize(1 << 16), 15);
        // Tiny zones: 1.
        assert_eq!(zone_batchsize(1024), 1);
    }

    #[test]
    fn watermarks_follow_the_formula() {
        // 1 GiB: min_free_kbytes = sqrt(1048576*16) = 4096 KiB = 1024 pages;
        // tmp = max(256, 262) = 262.
        assert_eq!(watermarks(1 << 18), [1024, 1286, 1548]);
        // 4 MiB: sqrt(4096*16) = 256 KiB = 64 pages; tmp = max(16, 1) = 16.
        assert_eq!(watermarks(1024), [64, 80, 96]);
        // Clamped below at 128 KiB.
        assert_eq!(watermarks(16)[0], 32);
    }

    #[test]
    fn pcp_bounds() {
        let p = pcp_params(1 << 18, 1 << 22, 2, 0);
        assert_eq!(p.batch, 63);
        assert_eq!(p.high_min, 643); // max(1286/2, 63*4)
        assert_eq!(pcp_params(1024, 1 << 22, 2, 0).high_min, 252); // young heap: 4*batch
        assert_eq!(p.high_max, (1 << 22) / 8 / 2);
        let m = pcp_params(1 << 18, 1 << 22, 2, 8);
        assert_eq!(m.high_min, m.high_max);
        assert_eq!(m.high_min, (1 << 18) / 8 / 2);
    }
}
