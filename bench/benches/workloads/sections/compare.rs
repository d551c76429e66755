//! Our workloads against the system malloc (and peers).

use super::*;
use std::path::Path;

use crate::allocs::Which;
use crate::{progress, Opts};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::{mib, Table};

pub fn compare(opts: &Opts, _out: &Path) -> String {
    let all = Which::all();
    let mut head = vec!["workload".to_string(), "unit".to_string()];
    for w in &all {
        head.push(w.short().to_string());
    }
    for w in &all[1..] {
        head.push(format!("{} / system", w.short()));
    }
    for w in &all {
        head.push(format!("peak RSS {}", w.short()));
    }
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(
        "Throughput and peak RSS against the system malloc",
        &head_refs,
    );
    for load in loads(opts) {
        // Interleaved: every round runs each allocator once, so a ratio
        // compares runs made moments apart.
        let mut scores = vec![Runs::new(); all.len()];
        let mut ratios = vec![Runs::new(); all.len()];
        for r in 0..opts.runs {
            let mut round = vec![];
            for &w in &all {
                progress(&format!(
                    "compare: {} on {} (round {}/{})",
                    load.label(),
                    w.short(),
                    r + 1,
                    opts.runs
                ));
                let s = sample(&load, w, opts.secs);
                s.record("compare", &load.label(), w.short(), r);
                round.push(s.score);
            }
            for (i, &v) in round.iter().enumerate() {
                scores[i].push(v);
                ratios[i].push(v / round[0].max(1e-9));
            }
        }
        // Peak RSS from runs in a fresh process each.
        let peak_runs = opts.runs.min(if opts.quick { 2 } else { 3 });
        let mut peaks = vec![Runs::new(); all.len()];
        for r in 0..peak_runs {
            for (i, &w) in all.iter().enumerate() {
                progress(&format!(
                    "compare: {} on {} (peak RSS, fresh process {}/{peak_runs})",
                    load.label(),
                    w.short(),
                    r + 1
                ));
                let p = run_child(&load, w, opts.secs, &[]).map_or(f64::NAN, |r| r.2);
                crate::record(
                    "compare",
                    &load.label(),
                    w.short(),
                    r,
                    "fresh_peak_bytes",
                    p,
                );
                peaks[i].push(p);
            }
        }
        let mut row = vec![load.label(), load.unit().to_string()];
        for s in &scores {
            row.push(s.show(1));
        }
        for r in &ratios[1..] {
            row.push(r.show_with(|v| format!("{v:.2}x")));
        }
        for p in &peaks {
            row.push(p.show_with(mib));
        }
        t.row(row);
    }
    t.note = format!(
        "Throughput: higher is better; median of {} runs, interleaved (each round runs every \
         allocator once), with the range in parentheses; the ratios are each round's, so their \
         range shows how much one comparison moves. Peak RSS: peak resident memory (VmHWM) above \
         what a fresh process held before the workload started, {} run(s) each. pingpong N pairs \
         = 2N threads pinned so producer and consumer sit on different CPUs; kbuild/larson N \
         threads; {} CPUs.",
        opts.runs,
        opts.runs.min(if opts.quick { 2 } else { 3 }),
        cpus()
    );
    t.render()
}
