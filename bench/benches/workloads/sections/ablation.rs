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
        let mut base: Option<(f64, f64)> = None;
        for row in ROWS {
            let (name, knobs) = (row.label, row.knobs);
            internals::set_knobs(knobs);
            let m = measure(&load, Which::Pcpalloc, opts, "ablation", name);
            let (bs, bz) = *base.get_or_insert((m.score.median(), m.alloc_zone.median()));
            t.row(vec![
                name.to_string(),
                m.score.map(|v| v / bs.max(1e-9) * 100.0).show(1),
                m.contention.show_with(|v| format!("{v:.2}%")),
                m.free_high.show(0),
                m.alloc_zone.map(|v| v / bz.max(1.0) * 100.0).show(1),
            ]);
        }
        t.note = format!(
            "score: {} relative to the base row's median = 100. zone lock contention: time spent \
             waiting for the zone lock as a share of thread time (CPU time + wait). free_high: \
             drains for consecutive high-order frees. alloc_zone: pages taken from the zone on \
             refill, relative to the base row's median = 100. Medians of {} runs, range in \
             parentheses.",
            load.unit(),
            opts.runs
        );
        text.push_str(&t.render());
        text.push('\n');
    }
    internals::set_knobs(saved);
    text
}
