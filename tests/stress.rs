//! Stress: 16 threads on 2 CPUs, mixed allocation sizes from 1 B to
//! 6 MiB, cross-thread frees through shared bins, thread churn, every block
//! pattern-checked before it is freed; then the whole heap's invariants.
//! PCPTEST_STRESS_SECS sets the duration (default 8 s).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pcpalloc::PcpAlloc;

#[global_allocator]
static GLOBAL: PcpAlloc = PcpAlloc;

/// A block with its size and fill byte.
struct Block {
    p: usize,
    n: usize,
    tag: u8,
}

fn make(rng: &mut u64, tag: u8) -> Block {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let r = *rng;
    let n = match r % 100 {
        0 => (4 << 20) | ((r >> 20) as usize % (2 << 20)), // huge
        1..=5 => 8192 + (r >> 8) as usize % (1 << 20),     // large
        6..=20 => 512 + (r >> 8) as usize % 7680,          // medium slabs
        _ => 1 + (r >> 8) as usize % 512,                  // small
    };
    // SAFETY: size > 0; freed with the same layout in check_free.
    let p = unsafe { std::alloc::alloc(std::alloc::Layout::from_size_align_unchecked(n, 1)) };
    assert!(!p.is_null());
    // SAFETY: p holds n bytes.
    unsafe {
        p.write_bytes(tag, n.min(64));
        p.add(n - 1).write(tag);
        if n > 128 {
            p.add(n / 2).write(tag ^ 0xFF);
        }
    }
    Block {
        p: p as usize,
        n,
        tag,
    }
}

fn check_free(b: Block) {
    let p = b.p as *mut u8;
    // SAFETY: a live block of b.n bytes.
    unsafe {
        for i in 0..b.n.min(64) {
            assert_eq!(*p.add(i), b.tag, "block corrupted at {i} of {}", b.n);
        }
        assert_eq!(*p.add(b.n - 1), b.tag);
        if b.n > 128 {
            assert_eq!(*p.add(b.n / 2), b.tag ^ 0xFF);
        }
        std::alloc::dealloc(p, std::alloc::Layout::from_size_align_unchecked(b.n, 1));
    }
}

/// Scoped threads count as finished when their closure returns, before the
/// OS thread has run its exit hooks (ours among them, which give the heap
/// back). Waits until only the test thread and the harness are left
/// (pcpalloc starts no thread of its own unless asked).
fn wait_for_exited_threads() {
    let t0 = Instant::now();
    loop {
        let n = std::fs::read_dir("/proc/self/task").unwrap().count();
        if n <= 2 || t0.elapsed() > Duration::from_secs(10) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sixteen_threads_cross_frees_and_churn() {
    let secs: f64 = std::env::var("PCPTEST_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8.0);
    const THREADS: usize = 16;
    const BINS: usize = 64;
    let bins: Vec<Mutex<Vec<Block>>> = (0..BINS).map(|_| Mutex::new(Vec::new())).collect();
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let generations = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (bins, stop, ops, generations) = (&bins, &stop, &ops, &generations);
            s.spawn(move || {
                let mut gen = 0u64;
                while !stop.load(Relaxed) {
                    // Each generation is a new thread: heaps are abandoned
                    // and adopted, objects outlive their allocating thread.
                    let seed = (t as u64 + 1) * 0x9E37_79B9 + gen;
                    std::thread::scope(|s2| {
                        s2.spawn(move || {
                            let mut rng = seed | 1;
                            let mut mine: Vec<Block> = Vec::new();
                            for i in 0..3000u64 {
                                let tag = (rng % 251) as u8 + 1;
                                mine.push(make(&mut rng, tag));
                                if mine.len() > 64 || i % 3 == 0 {
                                    let b = mine.swap_remove((rng as usize) % mine.len());
                                    // Hand it to some other thread, or free it.
                                    if rng.is_multiple_of(2) {
                                        bins[(rng as usize >> 3) % BINS].lock().unwrap().push(b);
                                    } else {
                                        check_free(b);
                                    }
                                }
                                if i % 16 == 0 {
                                    let taken = std::mem::take(
                                        &mut *bins[(rng as usize >> 5) % BINS].lock().unwrap(),
                                    );
                                    for b in taken {
                                        check_free(b);
                                    }
                                }
                                if stop.load(Relaxed) {
                                    break;
                                }
                            }
                            // Leave some behind for others to free.
                            let keep = mine.len() / 2;
                            for b in mine.drain(keep..) {
                                bins[(b.p >> 6) % BINS].lock().unwrap().push(b);
                            }
                            for b in mine {
                                check_free(b);
                            }
                            ops.fetch_add(3000, Relaxed);
                        });
                    });
                    gen += 1;
                }
                generations.fetch_add(gen, Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Relaxed);
    });
    for bin in &bins {
        for b in std::mem::take(&mut *bin.lock().unwrap()) {
            check_free(b);
        }
    }
    drop(bins);
    println!(
        "stress: {:.1} s, {} thread generations, {} ops",
        t0.elapsed().as_secs_f64(),
        generations.load(Relaxed),
        ops.load(Relaxed)
    );
    wait_for_exited_threads();
    let _quiet = pcpalloc::internals::pause();
    let (slabs, live) = pcpalloc::internals::check_invariants_quiescent();
    pcpalloc::trim();
    let cached_after_trim = pcpalloc::stats().pcp_count;
    let (slabs_after, live_after) = pcpalloc::internals::check_invariants_quiescent();
    assert_eq!(live, live_after, "trim changed the number of live objects");
    assert!(slabs_after <= slabs);
    let s = pcpalloc::stats();
    assert_eq!(cached_after_trim, 0, "trim left pages in the pagesets");
    assert!(s.heaps[0] >= 2, "threads got heaps");
    assert!(s.remote_frees > 0, "cross-thread frees happened");
    println!("invariants hold: {slabs_after} slabs, {live_after} live objects after trim");
}
