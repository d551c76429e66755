//! One workload alone, for profilers.

use super::*;

use crate::allocs::Which;
use pcpalloc_bench::table::mib;

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
