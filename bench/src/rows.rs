//! The ablation rows: the cover letter's cumulative patch rows of the PCP
//! auto-tuning series, then seed 002's free_count variants and v6.16's
//! free_high threshold. Shared by the in-process ablation and the replay.

use pcpalloc::internals::{FreeCountMode, FreeHighThreshold, Heuristics, Knobs};

/// One row: a short id (for `--rows`), its label, and its knobs.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// What `--rows` calls it.
    pub id: &'static str,
    /// The table's label.
    pub label: &'static str,
    /// The knobs it runs with.
    pub knobs: Knobs,
}

const fn k(patch: u32, mode: FreeCountMode, th: FreeHighThreshold) -> Knobs {
    Knobs {
        heuristics: Heuristics::row(patch),
        batch_scale_max: Knobs::DEFAULT.batch_scale_max,
        free_count_mode: mode,
        free_high_threshold: th,
        fixed_high: false,
    }
}

use FreeCountMode::*;
use FreeHighThreshold::*;

/// Every row, in table order. The first is the base the others are
/// compared with.
pub const ROWS: [Row; 11] = [
    Row {
        id: "base",
        label: "base (v6.6)",
        knobs: k(0, Halve, Batch),
    },
    Row {
        id: "1",
        label: "+1 prev_free_high_order",
        knobs: k(1, Halve, Batch),
    },
    Row {
        id: "3",
        label: "+3 free_high_batch",
        knobs: k(3, Halve, Batch),
    },
    Row {
        id: "5",
        label: "+5 alloc_factor",
        knobs: k(5, Halve, Batch),
    },
    Row {
        id: "7",
        label: "+7 auto-tune high",
        knobs: k(7, Halve, Batch),
    },
    Row {
        id: "8",
        label: "+8 below_high",
        knobs: k(8, Halve, Batch),
    },
    Row {
        id: "9",
        label: "+9 free_count (v6.7)",
        knobs: k(9, Halve, Batch),
    },
    Row {
        id: "exact",
        label: "seed 002 v1: exact",
        knobs: k(9, Exact, Batch),
    },
    Row {
        id: "5batch",
        label: "seed 002 v2: 5*batch",
        knobs: k(9, Halve, FiveBatch),
    },
    Row {
        id: "v6.16",
        label: "v6.16: batch+high_min/2",
        knobs: k(9, Halve, BatchPlusHalfHighMin),
    },
    Row {
        id: "exact+v6.16",
        label: "exact + batch+high_min/2",
        knobs: k(9, Exact, BatchPlusHalfHighMin),
    },
];

/// The rows named in `list` (comma-separated ids, or `all`), in table
/// order; the base row is always first. An unknown id is an error naming
/// the known ones.
pub fn select(list: &str) -> Result<Vec<Row>, String> {
    if list.trim() == "all" {
        return Ok(ROWS.to_vec());
    }
    let mut want = vec!["base"];
    for id in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !ROWS.iter().any(|r| r.id == id) {
            let known: Vec<_> = ROWS.iter().map(|r| r.id).collect();
            return Err(format!("unknown row {id:?}; rows are {}", known.join(", ")));
        }
        want.push(id);
    }
    Ok(ROWS
        .iter()
        .filter(|r| want.contains(&r.id))
        .copied()
        .collect())
}
