//! The workloads, each generic over the allocator and taking its thread
//! count and duration as parameters.
//!
//! - `pingpong`: the seeds' network case (lmbench AF_UNIX, netperf,
//!   iperf3): producer/consumer pairs pass 8–32 KiB buffers (page orders
//!   1–3) through a small queue; the consumer reads and frees them on its
//!   own CPU. Threads are pinned, producer and consumer of a pair on
//!   different CPUs: left to itself the scheduler sometimes puts a pair on
//!   one CPU (everything stays in that core's cache) and sometimes not,
//!   which swamps any allocator difference.
//! - `kbuild`: the build-server case: workers run many short jobs that
//!   allocate small objects and page-sized buffers, use them and free
//!   everything at the end; every eighth job runs on a short-lived thread.
//! - `larson`: server churn: threads replace random objects of 8 B–4 KiB
//!   in a shared-nothing slot array, then hand the array to a new thread,
//!   which frees what the old one allocated.
//! - `burst`: a large burst of allocations, all freed, then idle while RSS
//!   is sampled: does the memory come back?
//! - `latency`: single-thread alloc/free latency percentiles.

use std::alloc::GlobalAlloc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::time::{Duration, Instant};

use crate::allocs::{alloc, free};
use crate::measure::{rss, secs, Rng};

/// What a throughput run did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// Units of work (jobs, buffers, replacements).
    pub ops: u64,
    /// Bytes moved (pingpong).
    pub bytes: u64,
    /// Wall seconds.
    pub elapsed: f64,
}

/// A bounded single-producer single-consumer queue of (pointer, size).
struct Ring {
    ptr: Box<[AtomicUsize]>,
    len: Box<[AtomicUsize]>,
    head: AtomicUsize,
    _pad: [u64; 7],
    tail: AtomicUsize,
}

impl Ring {
    fn new(cap: usize) -> Ring {
        Ring {
            ptr: (0..cap).map(|_| AtomicUsize::new(0)).collect(),
            len: (0..cap).map(|_| AtomicUsize::new(0)).collect(),
            head: AtomicUsize::new(0),
            _pad: [0; 7],
            tail: AtomicUsize::new(0),
        }
    }
    fn push(&self, p: usize, n: usize, stop: &AtomicBool) -> bool {
        let cap = self.ptr.len();
        let t = self.tail.load(Relaxed);
        let mut spins = 0;
        while t - self.head.load(Acquire) == cap {
            if stop.load(Relaxed) {
                return false;
            }
            backoff(&mut spins);
        }
        self.ptr[t % cap].store(p, Relaxed);
        self.len[t % cap].store(n, Relaxed);
        self.tail.store(t + 1, Release);
        true
    }
    fn pop(&self, stop: &AtomicBool) -> Option<(usize, usize)> {
        let cap = self.ptr.len();
        let h = self.head.load(Relaxed);
        let mut spins = 0;
        while self.tail.load(Acquire) == h {
            if stop.load(Relaxed) && self.tail.load(Acquire) == h {
                return None;
            }
            backoff(&mut spins);
        }
        let r = (
            self.ptr[h % cap].load(Relaxed),
            self.len[h % cap].load(Relaxed),
        );
        self.head.store(h + 1, Release);
        Some(r)
    }
}

fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Pins the calling thread to `cpu` (modulo the CPUs available).
pub fn pin(cpu: usize) {
    if let Err(e) = pcpalloc_bench::pin::pin(cpu) {
        eprintln!("warning: cannot pin a thread: {e}");
    }
}

/// Producer/consumer pairs passing 8–32 KiB buffers. Reports bytes.
pub fn pingpong<A: GlobalAlloc + Sync>(a: &A, pairs: usize, secs_: f64) -> Outcome {
    let stop = AtomicBool::new(false);
    let bytes = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let rings: Vec<Ring> = (0..pairs).map(|_| Ring::new(32)).collect();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for (i, ring) in rings.iter().enumerate() {
            let (stop, bytes, ops) = (&stop, &bytes, &ops);
            s.spawn(move || {
                pin(2 * i);
                let mut rng = Rng::new(i as u64 + 1);
                loop {
                    let n = rng.range(8 << 10, 32 << 10) as usize & !63;
                    let p = alloc(a, n);
                    // SAFETY: p holds n bytes.
                    unsafe { p.write_bytes(i as u8 + 1, n) };
                    if !ring.push(p as usize, n, stop) {
                        free(a, p, n);
                        break;
                    }
                }
            });
            s.spawn(move || {
                pin(2 * i + 1);
                let mut local = 0u64;
                let mut count = 0u64;
                let mut sum = 0u64;
                while let Some((p, n)) = ring.pop(stop) {
                    let p = p as *mut u8;
                    let mut off = 0;
                    while off < n {
                        // SAFETY: p holds n bytes; read one byte per line.
                        sum = sum.wrapping_add(unsafe { p.add(off).read() } as u64);
                        off += 64;
                    }
                    free(a, p, n);
                    local += n as u64;
                    count += 1;
                }
                std::hint::black_box(sum);
                bytes.fetch_add(local, Relaxed);
                ops.fetch_add(count, Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs_));
        stop.store(true, Relaxed);
    });
    Outcome {
        ops: ops.load(Relaxed),
        bytes: bytes.load(Relaxed),
        elapsed: secs(t0),
    }
}

/// One kbuild job: a compiler process in miniature.
fn kbuild_job<A: GlobalAlloc>(
    a: &A,
    rng: &mut Rng,
    small: &mut Vec<(usize, usize)>,
    pages: &mut Vec<(usize, usize)>,
) {
    let nsmall = rng.range(300, 1500) as usize;
    let npages = rng.range(4, 24) as usize;
    for _ in 0..nsmall {
        let n = if rng.below(8) == 0 {
            rng.range(256, 2048)
        } else {
            rng.range(16, 192)
        } as usize;
        let p = alloc(a, n);
        // SAFETY: p holds n bytes.
        unsafe { p.write_bytes(1, n.min(64)) };
        small.push((p as usize, n));
    }
    for _ in 0..npages {
        let n = rng.range(1, 16) as usize * 4096;
        let p = alloc(a, n);
        let mut off = 0;
        while off < n {
            // SAFETY: p holds n bytes.
            unsafe { p.add(off).write(2) };
            off += 4096;
        }
        pages.push((p as usize, n));
    }
    // Work on the data a little, then exit: everything is freed.
    let mut sum = 0usize;
    for &(p, n) in small.iter().step_by(3) {
        // SAFETY: live block of n ≥ 1 bytes.
        sum = sum.wrapping_add(unsafe { *(p as *const u8) } as usize + n);
    }
    std::hint::black_box(sum);
    for (p, n) in small.drain(..) {
        free(a, p as *mut u8, n);
    }
    for (p, n) in pages.drain(..).rev() {
        free(a, p as *mut u8, n);
    }
}

/// Workers running short jobs; every eighth job on a short-lived thread.
/// Reports jobs.
pub fn kbuild<A: GlobalAlloc + Sync>(a: &A, workers: usize, secs_: f64) -> Outcome {
    let stop = AtomicBool::new(false);
    let jobs = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for w in 0..workers {
            let (stop, jobs) = (&stop, &jobs);
            s.spawn(move || {
                let mut rng = Rng::new(w as u64 * 7 + 3);
                let mut small = Vec::with_capacity(2048);
                let mut pages = Vec::with_capacity(32);
                let mut n = 0u64;
                while !stop.load(Relaxed) {
                    if n % 8 == 7 {
                        let seed = rng.next();
                        std::thread::scope(|s2| {
                            s2.spawn(|| {
                                let mut r = Rng::new(seed);
                                let (mut sm, mut pg) =
                                    (Vec::with_capacity(2048), Vec::with_capacity(32));
                                kbuild_job(a, &mut r, &mut sm, &mut pg);
                            });
                        });
                    } else {
                        kbuild_job(a, &mut rng, &mut small, &mut pages);
                    }
                    n += 1;
                }
                jobs.fetch_add(n, Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs_));
        stop.store(true, Relaxed);
    });
    Outcome {
        ops: jobs.load(Relaxed),
        bytes: 0,
        elapsed: secs(t0),
    }
}

const LARSON_SLOTS: usize = 1000;
const LARSON_ROUNDS: usize = 10_000;

/// Larson: replace random objects; every LARSON_ROUNDS replacements a
/// thread hands its slots to a new thread and exits. Reports replacements.
pub fn larson<A: GlobalAlloc + Sync>(a: &A, threads: usize, secs_: f64) -> Outcome {
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (stop, ops) = (&stop, &ops);
            s.spawn(move || {
                let mut rng = Rng::new(t as u64 + 11);
                let mut slots: Vec<(usize, usize)> = (0..LARSON_SLOTS)
                    .map(|_| {
                        let n = rng.range(8, 4096) as usize;
                        (alloc(a, n) as usize, n)
                    })
                    .collect();
                while !stop.load(Relaxed) {
                    // A new thread takes over the slots: it frees what the
                    // previous one allocated.
                    let seed = rng.next();
                    slots = std::thread::scope(|s2| {
                        s2.spawn(move || {
                            let mut r = Rng::new(seed);
                            for _ in 0..LARSON_ROUNDS {
                                let i = r.below(LARSON_SLOTS as u64) as usize;
                                let (p, n) = slots[i];
                                free(a, p as *mut u8, n);
                                let m = r.range(8, 4096) as usize;
                                let q = alloc(a, m);
                                // SAFETY: q holds m ≥ 8 bytes.
                                unsafe { (q as *mut u64).write(m as u64) };
                                slots[i] = (q as usize, m);
                            }
                            slots
                        })
                        .join()
                        .unwrap()
                    });
                    ops.fetch_add(LARSON_ROUNDS as u64, Relaxed);
                }
                for (p, n) in slots {
                    free(a, p as *mut u8, n);
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs_));
        stop.store(true, Relaxed);
    });
    Outcome {
        ops: ops.load(Relaxed),
        bytes: 0,
        elapsed: secs(t0),
    }
}

/// The RSS trace of a burst: samples (seconds since the frees, RSS bytes).
pub struct BurstTrace {
    pub baseline: u64,
    pub peak: u64,
    pub samples: Vec<(f64, u64)>,
}

/// Allocates `total` bytes in a mix of small objects and page-sized
/// buffers, touches them, frees them all, then samples RSS every 100 ms
/// for `idle_secs` seconds.
pub fn burst<A: GlobalAlloc>(a: &A, total: usize, idle_secs: f64) -> BurstTrace {
    let baseline = rss();
    let mut rng = Rng::new(5);
    let mut blocks: Vec<(usize, usize)> = Vec::with_capacity(total / 64);
    let mut got = 0;
    while got < total {
        let n = match rng.below(10) {
            0 => rng.range(8192, 65536),
            1..=3 => rng.range(512, 4096),
            _ => rng.range(16, 256),
        } as usize;
        let p = alloc(a, n);
        // SAFETY: p holds n bytes.
        unsafe { p.write_bytes(7, n) };
        blocks.push((p as usize, n));
        got += n;
    }
    let peak = rss();
    // Free in an order that leaves no trivially returnable tail.
    let mut i = 0;
    while i < blocks.len() {
        let (p, n) = blocks[i];
        free(a, p as *mut u8, n);
        i += 2;
    }
    i = 1;
    while i < blocks.len() {
        let (p, n) = blocks[i];
        free(a, p as *mut u8, n);
        i += 2;
    }
    drop(blocks);
    let t0 = Instant::now();
    let mut samples = vec![(0.0, rss())];
    while secs(t0) < idle_secs {
        std::thread::sleep(Duration::from_millis(100));
        samples.push((secs(t0), rss()));
    }
    BurstTrace {
        baseline,
        peak,
        samples,
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

fn percentiles(h: &hdrhistogram::Histogram<u64>) -> Latency {
    Latency {
        p50: h.value_at_quantile(0.5) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        p999: h.value_at_quantile(0.999) as f64,
        max: h.max() as f64,
    }
}

/// A histogram of nanoseconds, 3 significant figures, auto-resizing.
fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new(3).expect("histogram")
}

/// Times `rounds` bursts of `burst` allocations followed by their frees,
/// one operation at a time, calling `prep` (untimed) before each round.
/// Returns (alloc, free) latencies.
pub fn latency(
    mut alloc_one: impl FnMut() -> usize,
    mut free_one: impl FnMut(usize),
    mut prep: impl FnMut(),
    burst: usize,
    rounds: usize,
) -> (Latency, Latency) {
    let (mut la, mut lf) = (histogram(), histogram());
    let mut held = Vec::with_capacity(burst);
    for _ in 0..rounds {
        prep();
        for _ in 0..burst {
            let t = Instant::now();
            let p = alloc_one();
            la.record(t.elapsed().as_nanos() as u64).expect("record");
            held.push(p);
        }
        for p in held.drain(..) {
            let t = Instant::now();
            free_one(p);
            lf.record(t.elapsed().as_nanos() as u64).expect("record");
        }
    }
    (percentiles(&la), percentiles(&lf))
}
