//! The seeds' ablation table on our workloads.

use super::*;
use std::path::Path;

use pcpalloc::internals;

use crate::allocs::Which;
use crate::Opts;
use pcpalloc_bench::rows::ROWS;
use pcpalloc_bench::table::Table;

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
        for row in ROWS {
            let (name, knobs) = (row.label, row.knobs);
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
