//! The report's sections, one file each; what they share is here: the
//! workloads and how one is measured.

mod ablation;
mod burst;
mod compare;
mod latency;
mod pcp_modes;
mod plot;
mod profile;

pub use burst::child_burst;
pub use profile::profile;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pcpalloc::internals::{self};

use crate::allocs::Which;
use crate::measure::{cpu_ns, peak_rss, reset_peak, rss};
use crate::shapes::{self, Outcome};
use crate::{progress, with_alloc, Opts};
use pcpalloc_bench::runs::Runs;

type Section = fn(&Opts, &Path) -> String;

/// Every section, in report order.
pub static SECTIONS: &[(&str, Section)] = &[
    ("compare", compare::compare),
    ("ablation", ablation::ablation),
    ("pcp", pcp_modes::pcp_modes),
    ("burst", burst::burst_idle),
    ("latency", latency::latency),
    ("plot", plot::autotune_plot),
    ("preload", crate::preload::section),
    ("band", crate::band::section),
    ("thp", crate::thp::section),
    ("instructions", crate::preload::instructions),
    ("profile_cost", crate::profile_cost::section),
];

/// The settings a section's process starts with (the allocator reads
/// them once, at its start): the auto-tuning plot shows what the ticks do
/// to an idle pageset, and an idle process without the background thread
/// runs no tick.
pub fn section_env(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "plot" => &[("PCPALLOC_BACKGROUND", "1")],
        _ => &[],
    }
}

pub fn header(opts: &Opts, m: &crate::machine::Machine) -> String {
    format!(
        "## pcpalloc workload benchmark\n\n{}, commit {}{}, {}, {} CPUs, {:.0} GiB RAM, {}, glibc {}; \
         load average {} at the start. {} mode: {} runs of {:.1} s per point. Figures are \
         medians, with the range over the runs in parentheses.\n",
        m.utc,
        m.commit,
        if m.dirty { " (with uncommitted changes)" } else { "" },
        m.cpu_model,
        m.cpus_usable,
        m.mem_gib,
        m.kernel.split(' ').take(2).collect::<Vec<_>>().join(" "),
        m.glibc,
        m.load,
        if opts.quick { "Quick" } else { "Full" },
        opts.runs,
        opts.secs
    )
}

/// A workload with its parameters.
#[derive(Clone, Copy)]
pub struct Load {
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
pub struct Sample {
    score: f64,
    peak: f64,
    contention: f64,
    free_high: f64,
    alloc_zone: f64,
}

/// Zone lock wait as a share of thread time: wait / (CPU time + wait). A
/// futex lock sleeps rather than spins, so waiting is not CPU time; this
/// is the analogue of the seeds' "cycles% of spinlock contention".
pub use internals::contention_percent as contention;

pub fn zone_counters() -> (u64, u64, u64) {
    let s = pcpalloc::stats();
    (
        s.zone.lock_wait_ns,
        s.pcp_total.free_high,
        s.pcp_total.alloc_zone,
    )
}

/// Runs `load` on `w` once, from a settled allocator, and measures it.
pub fn sample(load: &Load, w: Which, secs: f64) -> Sample {
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

impl Sample {
    /// Records this run's figures in samples.csv.
    pub fn record(&self, section: &str, case: &str, variant: &str, run: usize) {
        for (metric, v) in [
            ("score", self.score),
            ("peak_bytes", self.peak),
            ("contention_percent", self.contention),
            ("free_high", self.free_high),
            ("alloc_zone", self.alloc_zone),
        ] {
            crate::record(section, case, variant, run, metric, v);
        }
    }
}

/// Each figure over the runs of a measurement.
#[derive(Clone, Default)]
pub struct Measured {
    pub score: Runs,
    pub contention: Runs,
    pub free_high: Runs,
    pub alloc_zone: Runs,
}

impl Measured {
    pub fn push(&mut self, s: &Sample) {
        self.score.push(s.score);
        self.contention.push(s.contention);
        self.free_high.push(s.free_high);
        self.alloc_zone.push(s.alloc_zone);
    }
}

/// `opts.runs` runs of `load` on `w`, each recorded under `section` and
/// `variant`.
pub fn measure(load: &Load, w: Which, opts: &Opts, section: &str, variant: &str) -> Measured {
    let mut m = Measured::default();
    for r in 0..opts.runs {
        progress(&format!(
            "{section}: {} on {} {variant} (run {}/{})",
            load.label(),
            w.short(),
            r + 1,
            opts.runs
        ));
        let s = sample(load, w, opts.secs);
        s.record(section, &load.label(), variant, r);
        m.push(&s);
    }
    m
}

/// How many CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The three workloads at their default sizes.
pub fn main_loads() -> Vec<Load> {
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

pub fn loads(opts: &Opts) -> Vec<Load> {
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
pub fn run_child(
    load: &Load,
    w: Which,
    secs: f64,
    env: &[(&str, &str)],
) -> Option<(f64, f64, f64)> {
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
