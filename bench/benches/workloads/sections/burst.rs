//! Memory coming back after a burst.

use std::path::Path;
use std::process::Command;

use crate::allocs::Which;
use crate::shapes;
use crate::{progress, with_alloc, Opts};
use pcpalloc_bench::chart::{line_chart, Series, COLORS};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::{mib, Table};

/// Child mode for burst-idle: `--child-burst <alloc> <bytes> <idle secs>`,
/// prints "baseline peak" then one "seconds rss" line per sample.
pub fn child_burst(args: &[String]) {
    let w = Which::all()
        .into_iter()
        .find(|w| w.short() == args[0])
        .unwrap_or(Which::Pcpalloc);
    let total: usize = args[1].parse().unwrap();
    let idle: f64 = args[2].parse().unwrap();
    let tr = with_alloc!(w, |a| shapes::burst(a, total, idle));
    println!("{} {}", tr.baseline, tr.peak);
    for (t, r) in tr.samples {
        println!("{t} {r}");
    }
}

/// One run of burst-idle: RSS before the burst, its peak, and samples of
/// (seconds after the frees, RSS).
type BurstRun = (u64, u64, Vec<(f64, u64)>);

/// One run of burst-idle in a fresh process.
fn burst_run(w: Which, total: usize) -> Option<BurstRun> {
    let exe = std::env::current_exe().unwrap();
    let o = Command::new(&exe)
        .args(["--child-burst", w.short(), &total.to_string(), "5"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines();
    let v: Vec<u64> = lines
        .next()?
        .split(' ')
        .filter_map(|x| x.parse().ok())
        .collect();
    let samples = lines
        .filter_map(|l| {
            let mut it = l.split(' ');
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    Some((*v.first()?, *v.get(1)?, samples))
}

pub fn burst_idle(opts: &Opts, out: &Path) -> String {
    let total = if opts.quick { 128 << 20 } else { 256 << 20 };
    let runs = if opts.quick { 2 } else { opts.runs.min(3) };
    let mut t = Table::new(
        &format!(
            "burst-idle: {} allocated in small and page-sized blocks, all freed, then idle",
            mib(total as f64)
        ),
        &[
            "allocator",
            "peak",
            "at free",
            "after 1 s",
            "after 2 s",
            "after 5 s",
        ],
    );
    let mut series = vec![];
    for (i, w) in Which::all().into_iter().enumerate() {
        let mut cols = vec![Runs::new(); 5];
        for r in 0..runs {
            progress(&format!(
                "burst-idle: {} (fresh process {}/{runs})",
                w.short(),
                r + 1
            ));
            let Some((baseline, peak, samples)) = burst_run(w, total) else {
                continue;
            };
            let above = |v: u64| v.saturating_sub(baseline) as f64;
            let at = |s: f64| {
                samples
                    .iter()
                    .find(|p| p.0 >= s)
                    .or(samples.last())
                    .map(|p| above(p.1))
                    .unwrap_or(0.0)
            };
            let figs = [above(peak), at(0.0), at(1.0), at(2.0), at(4.9)];
            for (k, (c, v)) in cols.iter_mut().zip(figs).enumerate() {
                c.push(v);
                let metric = ["peak", "at_free", "after_1s", "after_2s", "after_5s"][k];
                crate::record("burst", "burst-idle", w.short(), r, metric, v);
            }
            if r == 0 {
                series.push(Series {
                    name: w.short().into(),
                    color: COLORS[i % COLORS.len()],
                    points: samples
                        .iter()
                        .map(|&(s, rss)| (s, above(rss) / (1 << 20) as f64))
                        .collect(),
                });
            }
        }
        let mut row = vec![w.name().to_string()];
        row.extend(cols.iter().map(|c| c.show_with(mib)));
        t.row(row);
    }
    let svg = line_chart(
        "RSS after freeing a burst (above the pre-burst baseline)",
        "seconds after the frees",
        "MiB",
        &series,
        &[],
    );
    let plot = out.join("burst_idle.svg");
    std::fs::write(&plot, svg).unwrap();
    let tick = pcpalloc::internals::SETTINGS
        .decay_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    t.note = format!(
        "Each allocator in a fresh process, {runs} run(s) (medians, range in parentheses); RSS \
         above what it held before the burst, sampled every 100 ms after the frees ({}, the first \
         run). pcpalloc gives idle memory back on its tick (PCPALLOC_DECAY_MS, {tick} ms here); \
         glibc keeps freed small blocks until malloc_trim.",
        plot.display()
    );
    t.render()
}
