//! The drop-in library measured: C programs — our workload shapes and the
//! standard allocator benchmarks (larson, xmalloc-test, sh6bench,
//! cache-scratch, glibc's bench-malloc-thread) — run with and without
//! LD_PRELOAD, and with the peers Debian packages (libmimalloc2.0,
//! libjemalloc2, libtcmalloc-minimal4) when they are installed. Each run is
//! a fresh process: wall time and peak RSS (VmHWM) of the whole run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::measure::median;
use crate::report::{mib, ratio, Table};
use crate::{progress, Opts};

const PROGRAMS: &[(&str, &str)] = &[
    ("pingpong", "2 pairs, 8-32 KiB buffers across CPUs"),
    ("kbuild", "4 workers, short jobs"),
    ("larson", "4 chains of thread generations"),
    ("xmalloc_test", "2 producers, 2 consumers"),
    ("sh6bench", "4 threads, LIFO/FIFO rounds"),
    ("cache_scratch", "4 threads, false sharing"),
    ("glibc_thread", "bench-malloc-thread, 4 threads"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds libpcpalloc.so in its own target directory (cargo holds the main
/// one while benchmarks run) and returns its path.
fn build_lib() -> Option<PathBuf> {
    let dir = root().join("target/preload");
    let ok = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "pcpalloc-preload",
            "--target-dir",
        ])
        .arg(&dir)
        .current_dir(root())
        .status()
        .ok()?
        .success();
    let lib = dir.join("release/libpcpalloc.so");
    (ok && lib.exists()).then_some(lib)
}

fn compile(name: &str, out: &Path) -> Option<PathBuf> {
    let bin = out.join(name);
    let ok = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(root().join("benches/c").join(format!("{name}.c")))
        .status()
        .ok()?
        .success();
    ok.then_some(bin)
}

/// Runs `bin scale` with `preload` (if any); returns (seconds, peak bytes).
/// The program reports its own VmHWM: ru_maxrss of a child started from a
/// large process would report the parent's size.
fn run(bin: &Path, scale: u32, preload: Option<&Path>) -> Option<(f64, f64)> {
    let mut c = Command::new(bin);
    c.arg(scale.to_string());
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    let t0 = Instant::now();
    let o = c.output().ok()?;
    let secs = t0.elapsed().as_secs_f64();
    let out = String::from_utf8_lossy(&o.stdout);
    let kib: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("peak_kib "))
        .and_then(|v| v.trim().parse().ok())?;
    o.status.success().then_some((secs, kib * 1024.0))
}

pub fn section(opts: &Opts, out: &Path) -> String {
    let opts = &opts.quick_runs(1);
    progress("preload: building libpcpalloc.so");
    let Some(lib) = build_lib() else {
        return "### LD_PRELOAD\n\nlibpcpalloc.so could not be built; section skipped.\n".into();
    };
    let cdir = out.join("c");
    std::fs::create_dir_all(&cdir).unwrap();
    let peers_dir = Path::new("/usr/lib/x86_64-linux-gnu");
    let mut allocs: Vec<(&str, Option<PathBuf>)> = vec![("system", None), ("pcpalloc", Some(lib))];
    for (name, file) in [
        ("mimalloc", "libmimalloc.so.2"),
        ("jemalloc", "libjemalloc.so.2"),
        ("tcmalloc", "libtcmalloc_minimal.so.4"),
    ] {
        let p = peers_dir.join(file);
        if p.exists() {
            allocs.push((name, Some(p)));
        }
    }
    let scale = if opts.quick { 1 } else { 2 };
    let mut head: Vec<String> = vec!["program".into(), "system (s)".into()];
    for (n, _) in &allocs[1..] {
        head.push(format!("{n} speedup"));
    }
    for (n, _) in &allocs {
        head.push(format!("RSS {n}"));
    }
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(
        "The drop-in library: C programs under LD_PRELOAD",
        &head_refs,
    );
    for (prog, what) in PROGRAMS {
        let Some(bin) = compile(prog, &cdir) else {
            continue;
        };
        let mut times = vec![];
        let mut rss = vec![];
        for (name, pre) in &allocs {
            let mut ts = vec![];
            let mut rs = vec![];
            for r in 0..opts.runs {
                progress(&format!(
                    "preload: {prog} on {name} (run {}/{})",
                    r + 1,
                    opts.runs
                ));
                if let Some((s, m)) = run(&bin, scale, pre.as_deref()) {
                    ts.push(s);
                    rs.push(m);
                }
            }
            times.push(if ts.is_empty() {
                f64::NAN
            } else {
                median(&mut ts)
            });
            rss.push(if rs.is_empty() {
                f64::NAN
            } else {
                median(&mut rs)
            });
        }
        let mut row = vec![format!("{prog} ({what})"), format!("{:.2}", times[0])];
        for tm in &times[1..] {
            row.push(ratio(times[0] / tm));
        }
        for m in &rss {
            row.push(mib(*m));
        }
        t.row(row);
    }
    t.note = format!(
        "Wall time of the whole process, median of {} runs; speedup = system time / allocator time \
         (higher is better). RSS: peak resident set of the process (VmHWM at exit). Peers are Debian's \
         packages loaded with LD_PRELOAD. Sources in benches/c/.",
        opts.runs
    );
    t.render()
}
