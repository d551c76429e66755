//! The report's sections.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pcpalloc::tunables::{self, FreeCountMode, FreeHighThreshold, Heuristics, Knobs};

use crate::allocs::Which;
use crate::measure::{cpu_ns, median, peak_rss, reset_peak, rss};
use crate::report::{line_chart, mib, ratio, Series, Table};
use crate::shapes::{self, Outcome};
use crate::{progress, with_alloc, Opts};

type Section = fn(&Opts, &Path) -> String;

/// Every section, in report order.
pub static SECTIONS: &[(&str, Section)] = &[
    ("compare", compare),
    ("ablation", ablation),
    ("pcp", pcp_modes),
    ("burst", burst_idle),
    ("latency", latency),
    ("plot", autotune_plot),
    ("preload", crate::preload::section),
];

pub fn header(opts: &Opts) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_string();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total = mem
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let date = Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "## pcpalloc workload benchmark\n\n{date}, {model}, {cpus} CPUs, {:.0} GiB RAM; {} runs of {:.1} s per point, medians.\n",
        total as f64 / (1 << 20) as f64,
        opts.runs,
        opts.secs
    )
}

/// A workload with its parameters.
#[derive(Clone, Copy)]
struct Load {
    name: &'static str,
    threads: usize,
}

impl Load {
    /// The workload named `name` with `threads` threads (command line).
    fn from_args(name: &str, threads: &str) -> Load {
        let name = match name {
            "pingpong" => "pingpong",
            "kbuild" => "kbuild",
            _ => "larson",
        };
        Load {
            name,
            threads: threads.parse().expect("a thread count"),
        }
    }

    fn label(&self) -> String {
        match self.name {
            "pingpong" => format!("pingpong {} pairs", self.threads),
            n => format!("{n} {} threads", self.threads),
        }
    }
    fn run(&self, w: Which, secs: f64) -> Outcome {
        with_alloc!(w, |a| match self.name {
            "pingpong" => shapes::pingpong(a, self.threads, secs),
            "kbuild" => shapes::kbuild(a, self.threads, secs),
            _ => shapes::larson(a, self.threads, secs),
        })
    }
    fn unit(&self) -> &'static str {
        match self.name {
            "pingpong" => "MB/s",
            "kbuild" => "jobs/s",
            _ => "Mops/s",
        }
    }
    fn score(&self, o: &Outcome) -> f64 {
        match self.name {
            "pingpong" => o.bytes as f64 / o.elapsed / 1e6,
            "kbuild" => o.ops as f64 / o.elapsed,
            _ => o.ops as f64 / o.elapsed / 1e6,
        }
    }
}

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Sample {
    score: f64,
    peak: f64,
    contention: f64,
    free_high: f64,
    alloc_zone: f64,
}

/// Zone lock wait as a share of thread time: wait / (CPU time + wait). A
/// futex lock sleeps rather than spins, so waiting is not CPU time; this
/// is the analogue of the seeds' "cycles% of spinlock contention".
fn contention(wait_ns: u64, cpu_ns: u64) -> f64 {
    wait_ns as f64 * 100.0 / (wait_ns + cpu_ns).max(1) as f64
}

fn zone_counters() -> (u64, u64, u64) {
    let s = pcpalloc::stats();
    (
        s.zone.lock_wait_ns,
        s.pcp_total.free_high,
        s.pcp_total.alloc_zone,
    )
}

/// Runs `load` on `w` once, from a settled allocator, and measures it.
fn sample(load: &Load, w: Which, secs: f64) -> Sample {
    w.settle();
    std::thread::sleep(Duration::from_millis(20));
    let base = rss();
    reset_peak();
    let (wait0, fh0, az0) = zone_counters();
    let cpu0 = cpu_ns();
    let o = load.run(w, secs);
    let cpu = cpu_ns() - cpu0;
    let (wait1, fh1, az1) = zone_counters();
    Sample {
        score: load.score(&o),
        peak: peak_rss().saturating_sub(base) as f64,
        contention: contention(wait1 - wait0, cpu),
        free_high: (fh1 - fh0) as f64,
        alloc_zone: (az1 - az0) as f64,
    }
}

/// The median of each field over `runs` samples.
fn measure(load: &Load, w: Which, opts: &Opts, what: &str) -> Sample {
    let mut v: Vec<Sample> = Vec::new();
    for r in 0..opts.runs {
        progress(&format!(
            "{what}: {} on {} (run {}/{})",
            load.label(),
            w.short(),
            r + 1,
            opts.runs
        ));
        v.push(sample(load, w, opts.secs));
    }
    let med = |f: fn(&Sample) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    Sample {
        score: med(|s| s.score),
        peak: med(|s| s.peak),
        contention: med(|s| s.contention),
        free_high: med(|s| s.free_high),
        alloc_zone: med(|s| s.alloc_zone),
    }
}

/// The three workloads at their default sizes.
fn main_loads() -> Vec<Load> {
    vec![
        Load {
            name: "pingpong",
            threads: 2,
        },
        Load {
            name: "kbuild",
            threads: 4,
        },
        Load {
            name: "larson",
            threads: 4,
        },
    ]
}

fn loads(opts: &Opts) -> Vec<Load> {
    let mut v = main_loads();
    if !opts.quick {
        v.insert(
            0,
            Load {
                name: "pingpong",
                threads: 1,
            },
        );
        v.insert(
            2,
            Load {
                name: "pingpong",
                threads: 8,
            },
        );
        v.push(Load {
            name: "kbuild",
            threads: 1,
        });
        v.push(Load {
            name: "kbuild",
            threads: 16,
        });
        v.push(Load {
            name: "larson",
            threads: 1,
        });
        v.push(Load {
            name: "larson",
            threads: 16,
        });
    }
    v
}

fn compare(opts: &Opts, _out: &Path) -> String {
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

/// The cover letter's rows, then seed 002's free_count variants.
fn ablation_rows() -> Vec<(&'static str, Knobs)> {
    let k = |patch: u32, mode: FreeCountMode, th: FreeHighThreshold| Knobs {
        heuristics: Heuristics::row(patch),
        batch_scale_max: tunables::DEFAULT_BATCH_SCALE_MAX,
        free_count_mode: mode,
        free_high_threshold: th,
    };
    use FreeCountMode::*;
    use FreeHighThreshold::*;
    vec![
        ("base (v6.6)", k(0, Halve, Batch)),
        ("+1 prev_free_high_order", k(1, Halve, Batch)),
        ("+3 free_high_batch", k(3, Halve, Batch)),
        ("+5 alloc_factor", k(5, Halve, Batch)),
        ("+7 auto-tune high", k(7, Halve, Batch)),
        ("+8 below_high", k(8, Halve, Batch)),
        ("+9 free_count (v6.7)", k(9, Halve, Batch)),
        ("seed 002 v1: exact", k(9, Exact, Batch)),
        ("seed 002 v2: 5*batch", k(9, Halve, FiveBatch)),
        ("v6.16: batch+high_min/2", k(9, Halve, BatchPlusHalfHighMin)),
        (
            "exact + batch+high_min/2",
            k(9, Exact, BatchPlusHalfHighMin),
        ),
    ]
}

fn ablation(opts: &Opts, _out: &Path) -> String {
    let opts = &opts.quick_runs(2);
    let saved = tunables::knobs();
    let mut text = String::new();
    for load in [
        Load {
            name: "pingpong",
            threads: 2,
        },
        Load {
            name: "kbuild",
            threads: 4,
        },
    ] {
        let mut t = Table::new(
            &format!(
                "Ablation on {} (pcpalloc, rows cumulative as in the cover letter)",
                load.label()
            ),
            &[
                "row",
                "score",
                "zone lock contention",
                "free_high",
                "alloc_zone",
            ],
        );
        let mut base: Option<Sample> = None;
        for (name, knobs) in ablation_rows() {
            tunables::set_knobs(knobs);
            let s = measure(&load, Which::Pcpalloc, opts, &format!("ablation {name}"));
            let b = *base.get_or_insert(s);
            t.row(vec![
                name.to_string(),
                format!("{:.1}", s.score / b.score.max(1e-9) * 100.0),
                format!("{:.2}%", s.contention),
                format!("{:.0}", s.free_high),
                format!("{:.1}", s.alloc_zone / b.alloc_zone.max(1.0) * 100.0),
            ]);
        }
        t.note = format!(
            "score: {} relative to base = 100. zone lock contention: time spent waiting for the zone \
             lock as a share of thread time (CPU time + wait). free_high: drains for consecutive high-order frees. alloc_zone: pages taken \
             from the zone on refill, relative to base = 100. Medians of {} runs.",
            load.unit(),
            opts.runs
        );
        text.push_str(&t.render());
        text.push('\n');
    }
    tunables::set_knobs(saved);
    text
}

/// Child mode: runs one workload in a fresh process — for PCPALLOC_PCP,
/// which is read once at start, and for peak RSS, which is only fair when
/// no allocator carries memory over from an earlier run — and prints
/// "score contention peak_bytes".
pub fn child(args: &[String]) {
    let load = Load::from_args(&args[0], &args[1]);
    let secs: f64 = args[2].parse().unwrap();
    let w = args
        .get(3)
        .and_then(|n| Which::all().into_iter().find(|w| w.short() == n))
        .unwrap_or(Which::Pcpalloc);
    let s = sample(&load, w, secs);
    println!("{} {} {}", s.score, s.contention, s.peak);
}

/// Runs `load` on `w` in a child process with `env`; returns
/// (score, contention, peak bytes) or None if it failed.
fn run_child(load: &Load, w: Which, secs: f64, env: &[(&str, &str)]) -> Option<(f64, f64, f64)> {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe);
    c.args([
        "--child",
        load.name,
        &load.threads.to_string(),
        &secs.to_string(),
        w.short(),
    ]);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().ok()?;
    let v: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.len() == 3).then(|| (v[0], v[1], v[2]))
}

fn pcp_modes(opts: &Opts, _out: &Path) -> String {
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
            let mut scores = vec![];
            let mut cont = vec![];
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
                    scores.push(sc);
                    cont.push(co);
                }
            }
            res.push((median(&mut scores), median(&mut cont)));
        }
        t.row(vec![
            format!("{} ({})", load.label(), load.unit()),
            format!("{:.1}", res[0].0),
            format!("{:.1}", res[1].0),
            ratio(res[1].0 / res[0].0.max(1e-9)),
            format!("{:.2}%", res[0].1),
            format!("{:.2}%", res[1].1),
        ]);
    }
    let mut text = t.render();
    text.push('\n');
    text.push_str(&page_throughput(opts));
    text
}

/// Page alloc/free throughput through the pagesets against straight from
/// the zone (zone lock every time), order 0 and 2, 1 and 4 threads.
fn page_throughput(opts: &Opts) -> String {
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
                let mut scores = vec![];
                let mut conts = vec![];
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
                    scores.push(pages);
                    conts.push(contention(w1 - w0, c));
                }
                figs.push((median(&mut scores), median(&mut conts)));
            }
            row.push(format!("{:.2}", figs[0].0 / 1e6));
            row.push(format!("{:.2}", figs[1].0 / 1e6));
            row.push(ratio(figs[0].0 / figs[1].0.max(1e-9)));
            row.push(format!("{:.1}%", figs[0].1));
            row.push(format!("{:.1}%", figs[1].1));
            t.row(row);
        }
    }
    t.note = "Each thread allocates 64 blocks, then frees them, in a loop; pages/s counts pages \
              allocated. 4 threads run on 2 CPUs."
        .into();
    t.render()
}

fn page_loop(order: u32, threads: usize, pcp: bool, secs: f64) -> f64 {
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
                        *h = if pcp {
                            pcpalloc::alloc_pages(order, pcpalloc::MigrateType::Movable)
                        } else {
                            pcpalloc::alloc_pages_zone(order, pcpalloc::MigrateType::Movable)
                        };
                        assert!(!h.is_null());
                        // SAFETY: a page-sized block we own.
                        unsafe { h.write(1) };
                    }
                    for h in held.iter() {
                        // SAFETY: allocated just above with this order.
                        unsafe {
                            if pcp {
                                pcpalloc::free_pages(*h, order)
                            } else {
                                pcpalloc::free_pages_zone(*h, order)
                            }
                        }
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

const COLORS: [&str; 5] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

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

fn burst_idle(opts: &Opts, out: &Path) -> String {
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

fn latency(opts: &Opts, _out: &Path) -> String {
    let saved = tunables::knobs();
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
    for scale in 0..=tunables::MAX_BATCH_SCALE_MAX {
        for order in [0u32, 3] {
            progress(&format!(
                "latency: pages order {order}, BATCH_SCALE_MAX {scale}"
            ));
            tunables::set_knobs(Knobs {
                batch_scale_max: scale,
                ..saved
            });
            pcpalloc::trim();
            let alloc_one =
                || pcpalloc::alloc_pages(order, pcpalloc::MigrateType::Movable) as usize;
            // SAFETY: the block came from alloc_pages with this order.
            let free_one = |p: usize| unsafe { pcpalloc::free_pages(p as *mut u8, order) };
            // One untimed round first, so the zone has grown; then each
            // timed round starts from drained pagesets, so it refills.
            shapes::latency(alloc_one, free_one, || {}, 4096 >> order, 1);
            pcpalloc::state::ZONE.take_bulk_max();
            let (la, lf) = shapes::latency(
                alloc_one,
                free_one,
                || {
                    pcpalloc::pcp::pool::drain_all(&pcpalloc::state::ZONE);
                },
                4096 >> order,
                rounds / 4,
            );
            let bulk = pcpalloc::state::ZONE.take_bulk_max();
            t.row(vec![
                format!("pcpalloc pages order {order}, BATCH_SCALE_MAX={scale}"),
                fmt(&la),
                fmt(&lf),
                bulk.to_string(),
            ]);
        }
    }
    tunables::set_knobs(saved);
    t.note =
        "Bursts of allocations then their frees, each call timed (a timer read costs ~20 ns). \
              The page rows allocate 16 MiB in a burst from drained pagesets: refills and drains \
              grow as batch << \
              alloc_factor and free_count, up to batch << BATCH_SCALE_MAX (seed 000 patch 4); the \
              last column is the largest number of pages moved under one zone-lock hold, which is \
              what the patch bounds. The max latency follows it, but single samples also catch \
              preemption and page faults."
            .into();
    t.render()
}

fn autotune_plot(opts: &Opts, out: &Path) -> String {
    let work = if opts.quick { 2.0 } else { 4.0 };
    let churn = 1.0;
    let idle = if opts.quick { 6.0 } else { 10.0 };
    // Everything on CPU 0, so one pageset sees all of it.
    // SAFETY: cpu_set_t is plain data; all zeroes is a valid value.
    let mut saved_set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-parameter of the right size.
    unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved_set) };
    shapes::pin(0);
    assert!(pcpalloc::state::ensure_init());
    pcpalloc::trim();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let samples = std::sync::Mutex::new(vec![]);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (st, _) = pcpalloc::pcp::pool::cpu_pageset(0).snapshot();
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
                held.push(pcpalloc::alloc_pages(0, pcpalloc::MigrateType::Movable) as usize);
            }
            for p in held.drain(..) {
                // SAFETY: an order-0 block from alloc_pages.
                unsafe { pcpalloc::free_pages(p as *mut u8, 0) };
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
    std::fs::write(out.join("pcp_autotune.svg"), svg).unwrap();
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
        "### Auto-tuning made visible\n\nCPU 0's pageset (target/bench/pcp_autotune.svg): `high` rose to \
         {peak_kbuild:.0} pages during kbuild and to {peak_churn:.0} during order-0 churn (high_min {}, \
         high_max {}), then decayed by an eighth per tick to {:.0}, with {:.0} pages still cached, \
         after {idle:.0} s idle. burst_idle.svg shows RSS coming back after a burst.",
        p.high_min, p.high_max, last.0, last.1
    );
    s
}

/// `--profile <load> <threads> <secs> <alloc>`: runs one workload alone
/// (for perf and friends).
pub fn profile(args: &[String]) {
    let load = Load::from_args(&args[0], &args[1]);
    let secs: f64 = args[2].parse().unwrap();
    let w = if args.get(3).map(String::as_str) == Some("system") {
        Which::System
    } else {
        Which::Pcpalloc
    };
    let s = sample(&load, w, secs);
    println!(
        "{} {:.1} {}, contention {:.2}%, free_high {}, alloc_zone {}, peak {}",
        load.label(),
        s.score,
        load.unit(),
        s.contention,
        s.free_high,
        s.alloc_zone,
        mib(s.peak)
    );
    if w == Which::Pcpalloc {
        let mut t = String::new();
        pcpalloc::stats().write_text(&mut t).unwrap();
        eprintln!("{t}");
    }
}
