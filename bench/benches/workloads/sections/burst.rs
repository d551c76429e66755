//! Memory coming back after a burst.

use std::path::Path;
use std::process::Command;

use crate::allocs::Which;
use crate::shapes;
use crate::{progress, with_alloc, Opts};
use pcpalloc_bench::chart::{line_chart, Series, COLORS};
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

pub fn burst_idle(opts: &Opts, out: &Path) -> String {
    let total = if opts.quick { 128 << 20 } else { 256 << 20 };
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
    let exe = std::env::current_exe().unwrap();
    let mut series = vec![];
    for (i, w) in Which::all().into_iter().enumerate() {
        progress(&format!("burst-idle: {} (fresh process)", w.short()));
        let o = Command::new(&exe)
            .args(["--child-burst", w.short(), &total.to_string(), "5"])
            .output()
            .expect("run child");
        let text = String::from_utf8_lossy(&o.stdout);
        let mut lines = text.lines();
        let Some(first) = lines.next() else { continue };
        let v: Vec<u64> = first.split(' ').filter_map(|x| x.parse().ok()).collect();
        let (baseline, peak) = (v[0], v[1]);
        let samples: Vec<(f64, u64)> = lines
            .filter_map(|l| {
                let mut it = l.split(' ');
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
            })
            .collect();
        let above = |v: u64| v.saturating_sub(baseline) as f64;
        let at = |s: f64| {
            samples
                .iter()
                .find(|p| p.0 >= s)
                .or(samples.last())
                .map(|p| above(p.1))
                .unwrap_or(0.0)
        };
        t.row(vec![
            w.name().into(),
            mib(above(peak)),
            mib(at(0.0)),
            mib(at(1.0)),
            mib(at(2.0)),
            mib(at(4.9)),
        ]);
        series.push(Series {
            name: w.short().into(),
            color: COLORS[i % COLORS.len()],
            points: samples
                .iter()
                .map(|&(s, r)| (s, above(r) / (1 << 20) as f64))
                .collect(),
        });
    }
    let svg = line_chart(
        "RSS after freeing a burst (above the pre-burst baseline)",
        "seconds after the frees",
        "MiB",
        &series,
        &[],
    );
    std::fs::write(out.join("burst_idle.svg"), svg).unwrap();
    t.note = "Each allocator in a fresh process; RSS above what it held before the burst, sampled every \
              100 ms after the frees (target/bench/burst_idle.svg). pcpalloc gives idle memory back on \
              its 1 s tick; glibc keeps freed small blocks until malloc_trim."
        .into();
    t.render()
}
