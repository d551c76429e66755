//! Latency and BATCH_SCALE_MAX.

use std::path::Path;

use pcpalloc::internals::{self, Knobs};

use crate::allocs::Which;
use crate::shapes;
use crate::{progress, with_alloc, Opts};
use pcpalloc_bench::table::Table;

pub fn latency(opts: &Opts, _out: &Path) -> String {
    assert!(internals::ensure_init());
    let saved = internals::knobs();
    let rounds = if opts.quick { 200 } else { 1000 };
    let mut t = Table::new(
        "Single-thread alloc/free latency (ns): p50 / p99 / p99.9 / max",
        &["case", "alloc", "free", "largest refill/drain (pages)"],
    );
    let fmt =
        |l: &shapes::Latency| format!("{:.0} / {:.0} / {:.0} / {:.0}", l.p50, l.p99, l.p999, l.max);
    for w in Which::all() {
        for size in [16usize, 1024, 16384] {
            progress(&format!("latency: {} {size} B", w.short()));
            w.settle();
            let (la, lf) = with_alloc!(w, |a| shapes::latency(
                || crate::allocs::alloc(a, size) as usize,
                |p| crate::allocs::free(a, p as *mut u8, size),
                || {},
                1024,
                rounds
            ));
            t.row(vec![
                format!("{} {size} B", w.short()),
                fmt(&la),
                fmt(&lf),
                String::new(),
            ]);
        }
    }
    for scale in 0..=6 {
        for order in [0u32, 3] {
            progress(&format!(
                "latency: pages order {order}, BATCH_SCALE_MAX {scale}"
            ));
            internals::set_knobs(Knobs {
                batch_scale_max: scale,
                ..saved
            });
            pcpalloc::trim();
            let alloc_one = || pcpalloc_bench::pages::alloc(order, true) as usize;
            // SAFETY: the block came from pages::alloc with this order.
            let free_one = |p: usize| unsafe {
                pcpalloc_bench::pages::free(p as *mut internals::Page, order, true)
            };
            // One untimed round first, so the zone has grown; then each
            // timed round starts from drained pagesets, so it refills.
            shapes::latency(alloc_one, free_one, || {}, 4096 >> order, 1);
            internals::page_allocator().zone.take_bulk_max();
            let (la, lf) = shapes::latency(
                alloc_one,
                free_one,
                || {
                    internals::page_allocator().drain_all();
                },
                4096 >> order,
                rounds / 4,
            );
            let bulk = internals::page_allocator().zone.take_bulk_max();
            t.row(vec![
                format!("pcpalloc pages order {order}, BATCH_SCALE_MAX={scale}"),
                fmt(&la),
                fmt(&lf),
                bulk.to_string(),
            ]);
        }
    }
    internals::set_knobs(saved);
    t.note = format!(
        "Bursts of allocations then their frees, each call timed (a timer read costs {:.0} ns \
         here, included). The percentiles are over the calls of {rounds} bursts: p50 is the \
         median and max the top of the range. The page rows allocate 16 MiB in a burst from \
         drained pagesets: refills and drains grow as batch << alloc_factor and free_count, up to \
         batch << BATCH_SCALE_MAX (\"mm: restrict the pcp batch scale factor to avoid too long \
         latency\", Linux 6.7); the last column is the largest number of pages moved under one zone-lock hold, which is \
              what the patch bounds. The max latency follows it, but single samples also catch \
              preemption and page faults.",
        timer_ns()
    );
    t.render()
}

/// What one read of the clock costs, in nanoseconds.
fn timer_ns() -> f64 {
    let n = 100_000;
    let t0 = std::time::Instant::now();
    let mut last = t0;
    for _ in 0..n {
        last = std::hint::black_box(std::time::Instant::now());
    }
    (last - t0).as_nanos() as f64 / n as f64
}
