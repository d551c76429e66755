//! Per-CPU against per-thread pagesets, and the page allocator with and
//! without pagesets.

use super::*;
use std::path::Path;
use std::time::{Duration, Instant};

use pcpalloc::internals::{self};

use crate::allocs::Which;
use crate::measure::cpu_ns;
use crate::{progress, Opts};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::Table;

pub fn pcp_modes(opts: &Opts, _out: &Path) -> String {
    let opts = &opts.quick_runs(2);
    let mut t = Table::new(
        "Per-CPU against per-thread pagesets (PCPALLOC_PCP)",
        &[
            "workload",
            "cpu",
            "thread",
            "thread / cpu",
            "contention cpu",
            "contention thread",
        ],
    );
    let mut loads = main_loads();
    if !opts.quick {
        loads.push(Load {
            name: "kbuild",
            threads: 1,
        });
    }
    for load in loads {
        let mut res = vec![];
        for mode in ["cpu", "thread"] {
            let mut scores = Runs::new();
            let mut cont = Runs::new();
            for r in 0..opts.runs {
                progress(&format!(
                    "pcp modes: {} PCPALLOC_PCP={mode} (run {}/{})",
                    load.label(),
                    r + 1,
                    opts.runs
                ));
                if let Some((sc, co, _)) =
                    run_child(&load, Which::Pcpalloc, opts.secs, &[("PCPALLOC_PCP", mode)])
                {
                    crate::record("pcp", &load.label(), mode, r, "score", sc);
                    crate::record("pcp", &load.label(), mode, r, "contention_percent", co);
                    scores.push(sc);
                    cont.push(co);
                }
            }
            res.push((scores, cont));
        }
        let ratio = res[1].0.median() / res[0].0.median().max(1e-9);
        t.row(vec![
            format!("{} ({})", load.label(), load.unit()),
            res[0].0.show(1),
            res[1].0.show(1),
            format!("{ratio:.2}x"),
            res[0].1.show_with(|v| format!("{v:.2}%")),
            res[1].1.show_with(|v| format!("{v:.2}%")),
        ]);
    }
    t.note = format!(
        "Each run a fresh process with PCPALLOC_PCP set; medians of {} runs, range in parentheses; \
         thread / cpu is the ratio of the medians.",
        opts.runs
    );
    let mut text = t.render();
    text.push('\n');
    text.push_str(&page_throughput(opts));
    text
}

/// Page alloc/free throughput through the pagesets against straight from
/// the zone (zone lock every time), order 0 and 2, 1 and 4 threads.
pub fn page_throughput(opts: &Opts) -> String {
    let mut t = Table::new(
        "Page allocator throughput: PCP on vs off (zone lock every time)",
        &[
            "order",
            "threads",
            "PCP on (Mpages/s)",
            "PCP off (Mpages/s)",
            "on / off",
            "contention on",
            "contention off",
        ],
    );
    for order in [0u32, 2] {
        for threads in [1usize, 4] {
            let mut row = vec![order.to_string(), threads.to_string()];
            let mut figs = vec![];
            for pcp in [true, false] {
                let mut scores = Runs::new();
                let mut conts = Runs::new();
                for r in 0..opts.runs {
                    progress(&format!(
                        "pages: order {order}, {threads} threads, PCP {} (run {}/{})",
                        if pcp { "on" } else { "off" },
                        r + 1,
                        opts.runs
                    ));
                    pcpalloc::trim();
                    let (w0, _, _) = zone_counters();
                    let c0 = cpu_ns();
                    let pages = page_loop(order, threads, pcp, opts.secs);
                    let c = cpu_ns() - c0;
                    let (w1, _, _) = zone_counters();
                    let case = format!("order {order}, {threads} threads");
                    let variant = if pcp { "pcp on" } else { "pcp off" };
                    crate::record("pages", &case, variant, r, "pages_per_s", pages);
                    scores.push(pages);
                    conts.push(contention(w1 - w0, c));
                }
                figs.push((scores, conts));
            }
            row.push(figs[0].0.map(|v| v / 1e6).show(2));
            row.push(figs[1].0.map(|v| v / 1e6).show(2));
            row.push(format!(
                "{:.2}x",
                figs[0].0.median() / figs[1].0.median().max(1e-9)
            ));
            row.push(figs[0].1.show_with(|v| format!("{v:.1}%")));
            row.push(figs[1].1.show_with(|v| format!("{v:.1}%")));
            t.row(row);
        }
    }
    t.note = format!(
        "Each thread allocates 64 blocks, then frees them, in a loop; pages/s counts pages \
         allocated; medians of {} runs, range in parentheses; on / off is the ratio of the \
         medians. {} CPUs.",
        opts.runs,
        cpus()
    );
    t.render()
}

pub fn page_loop(order: u32, threads: usize, pcp: bool, secs: f64) -> f64 {
    assert!(internals::ensure_init());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let total = std::sync::atomic::AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut held = [std::ptr::null_mut(); 64];
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for h in held.iter_mut() {
                        *h = pcpalloc_bench::pages::alloc(order, pcp);
                        assert!(!h.is_null());
                        // SAFETY: a block of at least a page, ours.
                        unsafe { pcpalloc_bench::pages::addr(*h).write(1) };
                    }
                    for h in held.iter() {
                        // SAFETY: allocated just above with this order
                        // and path.
                        unsafe { pcpalloc_bench::pages::free(*h, order, pcp) };
                    }
                    n += 64;
                }
                total.fetch_add(n << order, std::sync::atomic::Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    total.load(std::sync::atomic::Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}
