//! The workload benchmark: pcpalloc against the system malloc (and peers
//! with `--features peers`), the seeds' ablation table on our workloads,
//! per-CPU against per-thread pagesets, memory given back after a burst,
//! latency against BATCH_SCALE_MAX, plots of the auto-tuning, and the
//! drop-in library under LD_PRELOAD on C programs.
//!
//! `cargo bench --bench workloads` (about 8 minutes on 2 cores) or
//! `cargo bench --bench workloads -- --quick` (under 2 minutes). Results go
//! to stdout and to target/bench/ (report.md, *.svg).

mod allocs;
mod measure;
mod preload;
mod report;
mod sections;
mod shapes;

use std::time::Instant;

/// Run parameters.
#[derive(Clone, Debug)]
pub struct Opts {
    pub quick: bool,
    /// Seconds per throughput run.
    pub secs: f64,
    /// Runs per measurement (the median is reported).
    pub runs: usize,
    /// Sections to run (empty: all).
    pub only: Vec<String>,
}

impl Opts {
    pub fn wants(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == section)
    }

    /// These options with at most `n` runs per point in quick mode (the
    /// secondary sections; the main comparison keeps its runs).
    pub fn quick_runs(&self, n: usize) -> Opts {
        let mut o = self.clone();
        if self.quick {
            o.runs = o.runs.min(n);
        }
        o
    }
}

/// Prints a progress line on stderr.
pub fn progress(msg: &str) {
    eprint!("\r\x1b[2K{msg}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        sections::child(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some("--child-burst") {
        sections::child_burst(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some("--profile") {
        sections::profile(&args[1..]);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let mut opts = Opts {
        quick,
        secs: if quick { 0.4 } else { 1.5 },
        runs: if quick { 3 } else { 5 },
        only: vec![],
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => opts.secs = it.next().and_then(|v| v.parse().ok()).expect("--secs N"),
            "--runs" => opts.runs = it.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--only" => {
                opts.only = it
                    .next()
                    .expect("--only a,b")
                    .split(',')
                    .map(String::from)
                    .collect()
            }
            _ => {}
        }
    }
    let t0 = Instant::now();
    let out_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut md = String::new();
    md.push_str(&sections::header(&opts));
    println!("{md}");
    for (name, f) in sections::SECTIONS {
        if !opts.wants(name) {
            continue;
        }
        let text = f(&opts, &out_dir);
        eprint!("\r\x1b[2K");
        println!("{text}");
        md.push_str(&text);
        md.push('\n');
    }
    let took = format!(
        "Benchmark took {:.0} s ({} mode).\n",
        t0.elapsed().as_secs_f64(),
        if quick { "quick" } else { "full" }
    );
    println!("{took}");
    md.push_str(&took);
    std::fs::write(out_dir.join("report.md"), md).unwrap();
    println!("Report and plots written to {}", out_dir.display());
}
