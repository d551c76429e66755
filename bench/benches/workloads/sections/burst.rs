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
    println!("huge {}", anon_huge_bytes());
}

/// This process's anonymous memory in huge pages (smaps_rollup's
/// AnonHugePages), in bytes: khugepaged may collapse a 2 MiB range of a
/// MADV_HUGEPAGE mapping with one resident page into a huge page while
/// the process sleeps, which raises its RSS.
fn anon_huge_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// One run of burst-idle: RSS before the burst, its peak, samples of
/// (seconds after the frees, RSS), and the huge pages at the end.
type BurstRun = (u64, u64, Vec<(f64, u64)>, u64);

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
    let mut huge = 0;
    let samples = lines
        .filter_map(|l| {
            if let Some(h) = l.strip_prefix("huge ") {
                huge = h.parse().ok()?;
                return None;
            }
            let mut it = l.split(' ');
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    Some((*v.first()?, *v.get(1)?, samples, huge))
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
            "in huge pages at 5 s",
        ],
    );
    let mut series = vec![];
    for (i, w) in Which::all().into_iter().enumerate() {
        let mut cols = vec![Runs::new(); 6];
        for r in 0..runs {
            progress(&format!(
                "burst-idle: {} (fresh process {}/{runs})",
                w.short(),
                r + 1
            ));
            let Some((baseline, peak, samples, huge)) = burst_run(w, total) else {
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
            let figs = [above(peak), at(0.0), at(1.0), at(2.0), at(4.9), huge as f64];
            for (k, (c, v)) in cols.iter_mut().zip(figs).enumerate() {
                c.push(v);
                let metric = [
                    "peak",
                    "at_free",
                    "after_1s",
                    "after_2s",
                    "after_5s",
                    "anon_huge_5s",
                ][k];
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
    t.note = format!(
        "Each allocator in a fresh process, {runs} run(s) (medians, range in parentheses); RSS \
         above what it held before the burst, sampled every 100 ms after the frees ({}, the first \
         run); the last column is the process's anonymous memory in huge pages at the end. \
         pcpalloc, without its background thread (the default), gives the burst back at the \
         frees themselves; glibc keeps freed small blocks until malloc_trim. RSS can rise while \
         the process sleeps: khugepaged collapses a 2 MiB range of a MADV_HUGEPAGE mapping that \
         holds even one resident page (max_ptes_none {}) into a huge page, at its next scan.",
        plot.display(),
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/khugepaged/max_ptes_none")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    );
    t.render()
}
