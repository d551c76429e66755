//! Our workloads against the system malloc (and peers).

use super::*;
use std::path::Path;

use crate::allocs::Which;
use crate::{progress, Opts};
use pcpalloc_bench::table::{mib, ratio, Table};

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
        let mut samples: Vec<Sample> = all
            .iter()
            .map(|&w| measure(&load, w, opts, "compare"))
            .collect();
        // Peak RSS from one run per allocator in a fresh process.
        for (s, &w) in samples.iter_mut().zip(&all) {
            progress(&format!(
                "compare: {} on {} (peak RSS, fresh process)",
                load.label(),
                w.short()
            ));
            s.peak = run_child(&load, w, opts.secs, &[]).map_or(f64::NAN, |r| r.2);
        }
        let mut row = vec![load.label(), load.unit().to_string()];
        for s in &samples {
            row.push(format!("{:.1}", s.score));
        }
        for s in &samples[1..] {
            row.push(ratio(s.score / samples[0].score.max(1e-9)));
        }
        for s in &samples {
            row.push(mib(s.peak));
        }
        t.row(row);
    }
    t.note = "Throughput: higher is better, median of the runs; the ratios come from the same \
              process run. Peak RSS: peak resident memory of one run in a fresh process, above what \
              that process held before the workload started (VmHWM). pingpong N pairs = 2N threads \
              pinned so producer and consumer sit on different CPUs; kbuild/larson N threads; 2 CPUs."
        .into();
    t.render()
}
