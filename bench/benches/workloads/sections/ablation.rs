//! The seeds' ablation table on our workloads.

use super::*;
use std::path::Path;

use pcpalloc::internals::{self, FreeCountMode, FreeHighThreshold, Heuristics, Knobs};

use crate::allocs::Which;
use crate::Opts;
use pcpalloc_bench::table::Table;

/// The cover letter's rows, then seed 002's free_count variants.
pub fn ablation_rows() -> Vec<(&'static str, Knobs)> {
    let k = |patch: u32, mode: FreeCountMode, th: FreeHighThreshold| Knobs {
        heuristics: Heuristics::row(patch),
        batch_scale_max: internals::Knobs::DEFAULT.batch_scale_max,
        free_count_mode: mode,
        free_high_threshold: th,
    };
    use FreeCountMode::*;
    use FreeHighThreshold::*;
    vec![
        ("base (v6.6)", k(0, Halve, Batch)),
        ("+1 prev_free_high_order", k(1, Halve, Batch)),
        ("+3 free_high_batch", k(3, Halve, Batch)),
        ("+5 alloc_factor", k(5, Halve, Batch)),
        ("+7 auto-tune high", k(7, Halve, Batch)),
        ("+8 below_high", k(8, Halve, Batch)),
        ("+9 free_count (v6.7)", k(9, Halve, Batch)),
        ("seed 002 v1: exact", k(9, Exact, Batch)),
        ("seed 002 v2: 5*batch", k(9, Halve, FiveBatch)),
        ("v6.16: batch+high_min/2", k(9, Halve, BatchPlusHalfHighMin)),
        (
            "exact + batch+high_min/2",
            k(9, Exact, BatchPlusHalfHighMin),
        ),
    ]
}

pub fn ablation(opts: &Opts, _out: &Path) -> String {
    let opts = &opts.quick_runs(2);
    let saved = internals::knobs();
    let mut text = String::new();
    for load in [
        Load {
            name: "pingpong",
            threads: 2,
        },
        Load {
            name: "kbuild",
            threads: 4,
        },
    ] {
        let mut t = Table::new(
            &format!(
                "Ablation on {} (pcpalloc, rows cumulative as in the cover letter)",
                load.label()
            ),
            &[
                "row",
                "score",
                "zone lock contention",
                "free_high",
                "alloc_zone",
            ],
        );
        let mut base: Option<Sample> = None;
        for (name, knobs) in ablation_rows() {
            internals::set_knobs(knobs);
            let s = measure(&load, Which::Pcpalloc, opts, &format!("ablation {name}"));
            let b = *base.get_or_insert(s);
            t.row(vec![
                name.to_string(),
                format!("{:.1}", s.score / b.score.max(1e-9) * 100.0),
                format!("{:.2}%", s.contention),
                format!("{:.0}", s.free_high),
                format!("{:.1}", s.alloc_zone / b.alloc_zone.max(1.0) * 100.0),
            ]);
        }
        t.note = format!(
            "score: {} relative to base = 100. zone lock contention: time spent waiting for the zone \
             lock as a share of thread time (CPU time + wait). free_high: drains for consecutive high-order frees. alloc_zone: pages taken \
             from the zone on refill, relative to base = 100. Medians of {} runs.",
            load.unit(),
            opts.runs
        );
        text.push_str(&t.render());
        text.push('\n');
    }
    internals::set_knobs(saved);
    text
}
