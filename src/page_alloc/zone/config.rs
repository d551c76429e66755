//! How a zone is configured: its size and limit, the huge-page policy,
//! the stealing rules and the dirty limit's ratio (`Zone::configure`).

use super::fallback::StealRules;

/// Transparent huge pages for the zone's memory, as the kernel's
/// `transparent_hugepage/enabled` but for this heap (see `thp.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThpPolicy {
    /// madvise(MADV_NOHUGEPAGE) on every block: no huge page, even where
    /// the system would give one.
    Never = 0,
    /// madvise(MADV_HUGEPAGE) on every block from the start.
    Always = 1,
    /// madvise(MADV_HUGEPAGE) once the heap has grown past
    /// `THP_DENSE_MIN_BYTES`: a small program keeps the RSS of 4 KiB pages,
    /// a large heap — whose pageblocks are mostly used — gets huge pages.
    Dense = 2,
}

impl ThpPolicy {
    /// The default, chosen by the measurements in the README.
    pub const DEFAULT: ThpPolicy = ThpPolicy::Dense;

    /// The policy stored as `v`.
    pub fn from_u32(v: u32) -> ThpPolicy {
        match v {
            0 => ThpPolicy::Never,
            1 => ThpPolicy::Always,
            _ => ThpPolicy::Dense,
        }
    }

    /// Its name, as `PCPALLOC_THP` takes it.
    pub fn name(self) -> &'static str {
        match self {
            ThpPolicy::Never => "never",
            ThpPolicy::Always => "always",
            ThpPolicy::Dense => "dense",
        }
    }
}

/// The dirty limit's default ratio (`dirty.rs`), in percent of the pages
/// in use. On the page band's 16 KiB – 4 MiB half, with the high orders
/// taken lowest address first (`buddy::lowest_address`), 80 holds the
/// peak RSS that 90 held before (165 MiB, 1.17x tcmalloc's) at 1.12x the
/// throughput; 85 and 90 run faster for 176 and 192 MiB (medians of 15
/// interleaved rounds). 0 leaves all to the tick.
pub const DEFAULT_DIRTY_RATIO: usize = 80;

/// How a zone is sized and behaves; fixed when the zone is configured.
#[derive(Clone, Copy, Debug)]
pub struct ZoneConfig {
    /// Bytes the zone (plus huge allocations charged to its budget) may
    /// map, or [`NO_LIMIT`].
    pub memory_limit: usize,
    /// The memory the formulas are sized from (0: the limit).
    pub size: usize,
    /// CPUs the pcp high bounds are split over.
    pub nr_cpus: usize,
    /// 0: auto-tune pcp high; ≥ 8: fixed high = managed / fraction / cpus.
    pub high_fraction: usize,
    /// Seed 004 stealing rules.
    pub steal: StealRules,
    /// Transparent huge pages.
    pub thp: ThpPolicy,
    /// Small objects grouped by lifetime: short-lived classes' slabs in
    /// reclaimable pageblocks (`heap/lifetime.rs`); off, every slab is
    /// unmovable.
    pub group_by_lifetime: bool,
    /// The dirty limit's ratio in percent of the pages in use (`dirty.rs`);
    /// 0: off.
    pub dirty_ratio: usize,
}

impl ZoneConfig {
    /// A configuration with the given limit and the seed's final rules.
    pub fn with_limit(memory_limit: usize) -> ZoneConfig {
        ZoneConfig {
            memory_limit,
            size: 0,
            nr_cpus: 1,
            high_fraction: 0,
            steal: StealRules::SEED_004,
            thp: ThpPolicy::Never,
            group_by_lifetime: true,
            dirty_ratio: DEFAULT_DIRTY_RATIO,
        }
    }
}
