//! Criterion microbenchmarks of the fast paths, pcpalloc against the system
//! allocator: malloc/free pairs by size, and page alloc/free by order
//! through the pagesets against straight from the zone.
//!
//! `cargo bench --bench micro`

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pcpalloc::internals;
use pcpalloc::PcpAlloc;
use pcpalloc_bench::pages;

const SIZES: [usize; 5] = [16, 64, 256, 1024, 16384];

fn pair<A: GlobalAlloc>(a: &A, l: Layout) {
    // SAFETY: non-zero size; freed with the same layout.
    unsafe {
        let p = a.alloc(l);
        black_box(p).write(1);
        a.dealloc(p, l);
    }
}

/// A burst of 100 allocations, then their frees: exercises refills and
/// list walks, not just the hottest block.
fn burst<A: GlobalAlloc>(a: &A, l: Layout, held: &mut [*mut u8; 100]) {
    // SAFETY: as in pair.
    unsafe {
        for h in held.iter_mut() {
            *h = a.alloc(l);
            h.write(1);
        }
        for h in held.iter() {
            a.dealloc(*h, l);
        }
    }
}

fn malloc_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("malloc_free_pair");
    for size in SIZES {
        let l = Layout::from_size_align(size, 8).unwrap();
        g.bench_with_input(BenchmarkId::new("pcpalloc", size), &l, |b, &l| {
            b.iter(|| pair(&PcpAlloc, l))
        });
        g.bench_with_input(BenchmarkId::new("system", size), &l, |b, &l| {
            b.iter(|| pair(&System, l))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("malloc_free_burst100");
    for size in SIZES {
        let l = Layout::from_size_align(size, 8).unwrap();
        let mut held = [std::ptr::null_mut(); 100];
        g.bench_with_input(BenchmarkId::new("pcpalloc", size), &l, |b, &l| {
            b.iter(|| burst(&PcpAlloc, l, &mut held))
        });
        g.bench_with_input(BenchmarkId::new("system", size), &l, |b, &l| {
            b.iter(|| burst(&System, l, &mut held))
        });
    }
    g.finish();
}

fn pages(c: &mut Criterion) {
    assert!(internals::ensure_init());
    let mut g = c.benchmark_group("page_alloc_free");
    for order in 0..=3u32 {
        for (name, pcp) in [("pcp", true), ("zone", false)] {
            g.bench_with_input(BenchmarkId::new(name, order), &order, |b, &o| {
                b.iter(|| {
                    let p = pages::alloc(o, pcp);
                    // SAFETY: a block of this order, freed at once the way
                    // it came.
                    unsafe {
                        pages::addr(black_box(p)).write(1);
                        pages::free(p, o, pcp);
                    }
                })
            });
        }
        let l = Layout::from_size_align(4096 << order, 4096).unwrap();
        g.bench_with_input(BenchmarkId::new("system_aligned", order), &l, |b, &l| {
            b.iter(|| pair(&System, l))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = malloc_free, pages
}
criterion_main!(benches);
