//! The page-granular band (issue 18): `bench/c/page_band.c` on two bands of
//! block sizes, 8 KiB – 256 KiB and 16 KiB – 4 MiB, on every allocator
//! interleaved — throughput and peak RSS (medians of the rounds), the
//! zone-lock acquisitions per 1000 operations under pcpalloc, and the
//! allocator's instructions per 1000 operations under callgrind (a short
//! run, threads serialised). Last, the band under `bench/c/band_bound.c`,
//! almost no allocator at all: a bound no allocator's throughput can pass
//! by much on this machine.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::preload::{allocators, build_lib, callgrind_counts, compile, compile_as, field};
use crate::{progress, Opts};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::{mib, Table};

/// The bands: label, smallest and largest block in KiB.
const BANDS: [(&str, u64, u64); 2] = [("8 KiB - 256 KiB", 8, 256), ("16 KiB - 4 MiB", 16, 4096)];

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Sample {
    mops: f64,
    peak: f64,
    zone_locks: f64,
}

fn run(bin: &Path, args: &[String], preload: Option<&Path>) -> Option<Sample> {
    let mut c = Command::new(bin);
    c.args(args);
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    let o = c.output().ok()?;
    if !o.status.success() {
        return None;
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |name: &str| field(&out, name);
    Some(Sample {
        mops: field("mops ")?,
        peak: field("peak_kib ")? * 1024.0,
        zone_locks: field("zone_locks_per_1000 ").unwrap_or(f64::NAN),
    })
}

pub fn section(opts: &Opts, out: &Path) -> String {
    let opts = &opts.quick_runs(1);
    progress("band: building libpcpalloc.so");
    let Some(lib) = build_lib() else {
        return "### The page-granular band\n\nlibpcpalloc.so could not be built; section skipped.\n"
            .into();
    };
    let cdir = out.join("c");
    std::fs::create_dir_all(&cdir).unwrap();
    let Some(bin) = compile("page_band", &cdir) else {
        return "### The page-granular band\n\npage_band.c could not be compiled; section skipped.\n"
            .into();
    };
    let mut allocs = allocators(lib, opts);
    if let Some(b) = compile_bound(&cdir) {
        allocs.push(("bound", Some(b)));
    }
    let ops = if opts.quick { 200_000 } else { 800_000 };
    let mut samples: HashMap<(usize, usize), Vec<Sample>> = HashMap::new();
    for r in 0..opts.runs {
        for (bi, (_, lo, hi)) in BANDS.iter().enumerate() {
            let args = [lo.to_string(), hi.to_string(), ops.to_string()];
            for (ai, (name, pre)) in allocs.iter().enumerate() {
                progress(&format!(
                    "band: round {}/{}: {lo}-{hi} KiB on {name}",
                    r + 1,
                    opts.runs
                ));
                if let Some(s) = run(&bin, &args, pre.as_deref()) {
                    samples.entry((bi, ai)).or_default().push(s);
                }
            }
        }
    }
    let med = |bi: usize, ai: usize, f: fn(&Sample) -> f64| -> f64 {
        match samples.get(&(bi, ai)) {
            Some(v) if !v.is_empty() => Runs(v.iter().map(f).collect()).median(),
            _ => f64::NAN,
        }
    };
    let mut head = vec!["band".to_string(), "figure".to_string()];
    head.extend(allocs.iter().map(|a| a.0.to_string()));
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(
        "The page-granular band: blocks of 8 KiB - 4 MiB",
        &head_refs,
    );
    // Allocator instructions per 1000 operations: a short callgrind run.
    let cg_ops = 20_000u64;
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    for (bi, (label, lo, hi)) in BANDS.iter().enumerate() {
        let mut mops = vec![label.to_string(), "M ops/s".into()];
        let mut rss = vec![String::new(), "peak RSS".into()];
        let mut locks = vec![String::new(), "zone locks / 1000 ops".into()];
        let mut instr = vec![String::new(), "allocator instructions / op".into()];
        for (ai, (name, pre)) in allocs.iter().enumerate() {
            mops.push(format!("{:.2}", med(bi, ai, |s| s.mops)));
            rss.push(mib(med(bi, ai, |s| s.peak)));
            let l = med(bi, ai, |s| s.zone_locks);
            locks.push(if l.is_finite() {
                format!("{l:.1}")
            } else {
                "-".into()
            });
            let v = if valgrind && *name != "tcmalloc" && *name != "bound" {
                progress(&format!("band: {lo}-{hi} KiB on {name} (callgrind)"));
                let args = [lo.to_string(), hi.to_string(), cg_ops.to_string()];
                allocator_ir_per_op(&bin, &args, pre.as_deref(), out, name, cg_ops)
            } else {
                None
            };
            instr.push(v.map_or("-".into(), |v| format!("{v:.0}")));
        }
        t.row(mops);
        t.row(rss);
        t.row(locks);
        t.row(instr);
    }
    t.note = format!(
        "bench/c/page_band.c, written from issue 18's description: 2 threads each keeping 64 live \
         blocks of log-uniform random size in the band; each operation frees one (a quarter \
         handed to the other thread and freed there) and allocates one, touching its first and \
         last byte; {ops} operations. Medians of {} interleaved rounds. Zone locks: pcpalloc's \
         zone-lock acquisitions per 1000 operations. Instructions: executed inside the allocator \
         per operation, callgrind, {cg_ops} operations (tcmalloc's do not show under its \
         library's name). bound: bench/c/band_bound.c preloaded, not an allocator — per-thread \
         last-in first-out lists of whole pages, nothing given back, counted or checked (about \
         15 instructions an operation): what the program's own work allows.",
        opts.runs
    );
    t.render()
}

/// `bench/c/band_bound.c` as a library to preload.
fn compile_bound(out: &Path) -> Option<std::path::PathBuf> {
    let flags = [
        "-O2",
        "-fno-builtin",
        "-shared",
        "-fPIC",
        "-ftls-model=initial-exec",
    ];
    compile_as("band_bound", out.join("band_bound.so"), &flags, &[])
}

/// Allocator instructions per operation: callgrind's count of the
/// allocator's instructions over `ops`.
fn allocator_ir_per_op(
    bin: &Path,
    args: &[String],
    preload: Option<&Path>,
    out: &Path,
    tag: &str,
    ops: u64,
) -> Option<f64> {
    let profile = out.join(format!("callgrind.page_band.{tag}"));
    let mut c = Command::new("valgrind");
    c.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", profile.display()))
        .arg(bin)
        .args(args);
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    let ok = c.output().is_ok_and(|o| o.status.success());
    let counts = ok
        .then(|| callgrind_counts(&profile.to_string_lossy(), bin, preload))
        .flatten();
    let _ = std::fs::remove_file(&profile);
    let (_, alloc_ir) = counts?;
    Some(alloc_ir as f64 / ops as f64)
}
