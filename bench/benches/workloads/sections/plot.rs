//! The auto-tuning plot.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use pcpalloc::internals::{self};

use crate::shapes;
use crate::{progress, Opts};
use pcpalloc_bench::chart::{line_chart, Series, COLORS};

pub fn autotune_plot(opts: &Opts, out: &Path) -> String {
    let work = if opts.quick { 2.0 } else { 4.0 };
    let churn = 1.0;
    let idle = if opts.quick { 6.0 } else { 10.0 };
    // Everything on CPU 0, so one pageset sees all of it.
    // SAFETY: cpu_set_t is plain data; all zeroes is a valid value.
    let mut saved_set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-parameter of the right size.
    unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved_set) };
    shapes::pin(0);
    assert!(internals::ensure_init());
    pcpalloc::trim();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let samples = std::sync::Mutex::new(vec![]);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (st, _) = internals::page_allocator()
                    .pagesets
                    .cpu_pageset(0)
                    .snapshot();
                samples.lock().unwrap().push((
                    t0.elapsed().as_secs_f64(),
                    st.high as f64,
                    st.count as f64,
                ));
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        progress("plot: kbuild, order-0 churn, then idle");
        shapes::kbuild(&pcpalloc::PcpAlloc, 2, work);
        // Order-0 page churn: refills raise high; no high-order frees
        // knock it down, so the idle decay shows.
        let t1 = Instant::now();
        let mut held = Vec::with_capacity(3000);
        while t1.elapsed().as_secs_f64() < churn {
            for _ in 0..3000 {
                held.push(pcpalloc_bench::pages::alloc(0, true));
            }
            for p in held.drain(..) {
                // SAFETY: an order-0 block from pages::alloc.
                unsafe { pcpalloc_bench::pages::free(p, 0, true) };
            }
        }
        std::thread::sleep(Duration::from_secs_f64(idle));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // SAFETY: restores the affinity read above.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &saved_set) };
    let v = samples.into_inner().unwrap();
    let p = pcpalloc::stats().zone.pcp;
    let end = work + churn + idle;
    let series = vec![
        Series {
            name: "high".into(),
            color: COLORS[0],
            points: v.iter().map(|x| (x.0, x.1)).collect(),
        },
        Series {
            name: "count".into(),
            color: COLORS[1],
            points: v.iter().map(|x| (x.0, x.2)).collect(),
        },
        Series {
            name: "high_min".into(),
            color: COLORS[2],
            points: vec![(0.0, p.high_min as f64), (end, p.high_min as f64)],
        },
    ];
    let svg = line_chart(
        "CPU 0's pageset: high and count through kbuild, order-0 churn, then idle",
        "seconds",
        "pages",
        &series,
        &[(work, "churn"), (work + churn, "idle")],
    );
    let plot = out.join("pcp_autotune.svg");
    std::fs::write(&plot, svg).unwrap();
    let peak_kbuild = v
        .iter()
        .filter(|x| x.0 < work)
        .map(|x| x.1)
        .fold(0.0, f64::max);
    let peak_churn = v
        .iter()
        .filter(|x| x.0 >= work && x.0 < work + churn + 0.2)
        .map(|x| x.1)
        .fold(0.0, f64::max);
    let last = v.last().map(|x| (x.1, x.2)).unwrap_or_default();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Auto-tuning made visible\n\nCPU 0's pageset ({}), in a process started with \
         PCPALLOC_BACKGROUND={} so that ticks run while it is idle: `high` rose to \
         {peak_kbuild:.0} pages during kbuild and to {peak_churn:.0} during order-0 churn (high_min {}, \
         high_max {}), then decayed by an eighth per tick to {:.0}, with {:.0} pages still cached, \
         after {idle:.0} s idle. burst_idle.svg shows RSS coming back after a burst.",
        plot.display(),
        std::env::var("PCPALLOC_BACKGROUND").unwrap_or_else(|_| "unset".into()),
        p.high_min,
        p.high_max,
        last.0,
        last.1
    );
    s
}
