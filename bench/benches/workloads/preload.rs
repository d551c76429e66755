//! The drop-in library measured: C programs — our workload shapes and the
//! classic allocator benchmarks (larson with its published arguments,
//! rptest, glibc's bench-malloc-thread, malloc-large, xmalloc-test,
//! sh6bench, cache-scratch), written from their published descriptions in
//! bench/c/ — each a fresh process under LD_PRELOAD, against the system
//! malloc and the peers Debian packages (libmimalloc2.0, libjemalloc2,
//! libtcmalloc-minimal4) when they are installed, and an earlier
//! libpcpalloc.so with `--baseline`. Runs are interleaved: every allocator
//! runs each program once per round.
//!
//! The `instructions` section counts, with callgrind, the instructions
//! spent inside the allocator per 1000 instructions of the program's own
//! code — a figure that repeats from run to run, unlike times.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::measure::median;
use crate::{progress, Opts};
use pcpalloc_bench::table::{mib, Table};

/// How a program's time is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Timed {
    /// Wall time of the process (fixed work).
    Wall,
    /// The `rtime` line it prints (fixed time: 1e9 / throughput).
    Reported,
}

/// A program, what it does, its arguments (quick, full) and how it is
/// timed.
struct Program {
    name: &'static str,
    what: &'static str,
    quick: &'static [&'static str],
    full: &'static [&'static str],
    timed: Timed,
}

const PROGRAMS: &[Program] = &[
    Program {
        name: "larson_server",
        what: "larson, published arguments: 8-1000 B, 5000 blocks/thread, 2 threads",
        quick: &["2", "8", "1000", "5000", "100", "4141", "2"],
        full: &["5", "8", "1000", "5000", "100", "4141", "2"],
        timed: Timed::Reported,
    },
    Program {
        name: "larson",
        what: "larson, 4 chains of thread generations, 8 B-4 KiB",
        quick: &["1"],
        full: &["2"],
        timed: Timed::Wall,
    },
    Program {
        name: "rptest",
        what: "rptest: 2 threads, 8-16000 B, cross-thread frees",
        quick: &["20", "2"],
        full: &["50", "2"],
        timed: Timed::Wall,
    },
    Program {
        name: "glibc_thread",
        what: "bench-malloc-thread: 2 threads, 4 B-32 KiB",
        quick: &["2", "1"],
        full: &["2", "2"],
        timed: Timed::Reported,
    },
    Program {
        name: "malloc_large",
        what: "malloc-large: 5-25 MiB buffers, 20 live",
        quick: &["400"],
        full: &["2000"],
        timed: Timed::Wall,
    },
    Program {
        name: "xmalloc_test",
        what: "xmalloc-test: 2 producers, 2 consumers",
        quick: &["1"],
        full: &["2"],
        timed: Timed::Wall,
    },
    Program {
        name: "sh6bench",
        what: "sh6bench-like: 4 threads, LIFO/FIFO rounds",
        quick: &["1"],
        full: &["3"],
        timed: Timed::Wall,
    },
    Program {
        name: "cache_scratch",
        what: "cache-scratch: 4 threads, passive false sharing",
        quick: &["1"],
        full: &["2"],
        timed: Timed::Wall,
    },
    Program {
        name: "pingpong",
        what: "pingpong: 2 pairs, 8-32 KiB buffers across CPUs",
        quick: &["1"],
        full: &["2"],
        timed: Timed::Wall,
    },
    Program {
        name: "kbuild",
        what: "kbuild: 4 workers, short jobs",
        quick: &["1"],
        full: &["2"],
        timed: Timed::Wall,
    },
];

fn workspace() -> PathBuf {
    pcpalloc_bench::preload::workspace()
}

/// Builds libpcpalloc.so in its own target directory (cargo holds the main
/// one while benchmarks run) and returns its path.
pub(crate) fn build_lib() -> Option<PathBuf> {
    pcpalloc_bench::preload::build_lib(&workspace().join("target/preload"))
}

pub(crate) fn compile(name: &str, out: &Path) -> Option<PathBuf> {
    let bin = out.join(name);
    let ok = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("c/{name}.c")))
        .args(["-lm", "-ldl"])
        .status()
        .ok()?
        .success();
    ok.then_some(bin)
}

/// The allocators to compare: the system's, ours, an earlier build of ours
/// (`--baseline`), and the Debian peers that are installed.
pub(crate) fn allocators(lib: PathBuf, opts: &Opts) -> Vec<(&'static str, Option<PathBuf>)> {
    let mut v: Vec<(&str, Option<PathBuf>)> = vec![("system", None), ("pcpalloc", Some(lib))];
    if let Some(b) = &opts.baseline {
        v.push(("before", Some(b.clone())));
    }
    let dir = Path::new("/usr/lib/x86_64-linux-gnu");
    for (name, file) in [
        ("mimalloc", "libmimalloc.so.2"),
        ("jemalloc", "libjemalloc.so.2"),
        ("tcmalloc", "libtcmalloc_minimal.so.4"),
    ] {
        let p = dir.join(file);
        if p.exists() {
            v.push((name, Some(p)));
        }
    }
    v
}

/// Runs `bin args` with `preload`; returns (seconds, peak bytes). The
/// program reports its own VmHWM (ru_maxrss of a child of a large process
/// would report the parent's size).
fn run(bin: &Path, args: &[&str], preload: Option<&Path>, timed: Timed) -> Option<(f64, f64)> {
    let mut c = Command::new(bin);
    c.args(args);
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    let t0 = Instant::now();
    let o = c.output().ok()?;
    let wall = t0.elapsed().as_secs_f64();
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |name: &str| -> Option<f64> {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    let kib = field("peak_kib ")?;
    let secs = match timed {
        Timed::Wall => wall,
        Timed::Reported => field("rtime ")?,
    };
    o.status.success().then_some((secs, kib * 1024.0))
}

fn geomean(v: &[f64]) -> f64 {
    let ok: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if ok.is_empty() {
        return f64::NAN;
    }
    (ok.iter().map(|x| x.ln()).sum::<f64>() / ok.len() as f64).exp()
}

pub fn section(opts: &Opts, out: &Path) -> String {
    let opts = &opts.quick_runs(1);
    progress("preload: building libpcpalloc.so");
    let Some(lib) = build_lib() else {
        return "### LD_PRELOAD\n\nlibpcpalloc.so could not be built; section skipped.\n".into();
    };
    let cdir = out.join("c");
    std::fs::create_dir_all(&cdir).unwrap();
    let allocs = allocators(lib, opts);
    let progs: Vec<(&Program, PathBuf)> = PROGRAMS
        .iter()
        .filter_map(|p| compile(p.name, &cdir).map(|b| (p, b)))
        .collect();
    // Interleaved: each round runs every program on every allocator.
    let mut samples: HashMap<(usize, usize), Vec<(f64, f64)>> = HashMap::new();
    for r in 0..opts.runs {
        for (pi, (p, bin)) in progs.iter().enumerate() {
            for (ai, (name, pre)) in allocs.iter().enumerate() {
                progress(&format!(
                    "preload: round {}/{}: {} on {name}",
                    r + 1,
                    opts.runs,
                    p.name
                ));
                let args = if opts.quick { p.quick } else { p.full };
                if let Some(s) = run(bin, args, pre.as_deref(), p.timed) {
                    samples.entry((pi, ai)).or_default().push(s);
                }
            }
        }
    }
    let med = |pi: usize, ai: usize, f: fn(&(f64, f64)) -> f64| -> f64 {
        match samples.get(&(pi, ai)) {
            Some(v) if !v.is_empty() => median(&mut v.iter().map(f).collect::<Vec<_>>()),
            _ => f64::NAN,
        }
    };
    let mimalloc = allocs.iter().position(|a| a.0 == "mimalloc");
    let mut head: Vec<String> = vec!["program".into(), "system (s)".into()];
    for (n, _) in &allocs[1..] {
        head.push(format!("{n} / system"));
    }
    if mimalloc.is_some() {
        head.push("pcpalloc / mimalloc".into());
        if opts.baseline.is_some() {
            head.push("before / mimalloc".into());
        }
    }
    for (n, _) in &allocs {
        head.push(format!("RSS {n}"));
    }
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(
        "The drop-in library: C programs under LD_PRELOAD",
        &head_refs,
    );
    let mut ratios: Vec<Vec<f64>> = vec![vec![]; head.len()];
    for (pi, (p, _)) in progs.iter().enumerate() {
        let times: Vec<f64> = (0..allocs.len()).map(|ai| med(pi, ai, |s| s.0)).collect();
        let rss: Vec<f64> = (0..allocs.len()).map(|ai| med(pi, ai, |s| s.1)).collect();
        let mut row = vec![p.what.to_string(), format!("{:.3}", times[0])];
        let mut col = 2;
        for tm in &times[1..] {
            row.push(format!("{:.2}", tm / times[0]));
            ratios[col].push(tm / times[0]);
            col += 1;
        }
        if let Some(mi) = mimalloc {
            row.push(format!("{:.2}", times[1] / times[mi]));
            ratios[col].push(times[1] / times[mi]);
            col += 1;
            if opts.baseline.is_some() {
                row.push(format!("{:.2}", times[2] / times[mi]));
                ratios[col].push(times[2] / times[mi]);
            }
        }
        for m in &rss {
            row.push(mib(*m));
        }
        t.row(row);
    }
    let mut row = vec!["geometric mean".to_string(), String::new()];
    for r in &ratios[2..] {
        if !r.is_empty() {
            row.push(format!("{:.2}", geomean(r)));
        }
    }
    while row.len() < head.len() {
        row.push(String::new());
    }
    t.row(row);
    t.note = format!(
        "Time of the system malloc in seconds, then time ratios (lower is better): each allocator's \
         over the system's, and ours (and the earlier build's) over mimalloc's; medians of {} \
         interleaved rounds. Programs printing `rtime` (fixed duration, 1e9 / throughput) are \
         timed by it, the others by wall time. RSS: peak resident set of the process (VmHWM). \
         Peers are Debian's packages under LD_PRELOAD; sources in bench/c/.",
        opts.runs
    );
    t.render()
}

/// Allocator instructions per 1000 instructions of the program's own code,
/// from a callgrind profile: the program's functions are those of its own
/// binary; the allocator's, those of the preloaded library (or, for the
/// system malloc, libc's malloc family).
pub(crate) fn instructions_per_1000(
    profile: &str,
    program: &Path,
    lib: Option<&Path>,
) -> Option<f64> {
    let text = std::fs::read_to_string(profile).ok()?;
    let real = |p: &str| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p));
    let prog = real(&program.to_string_lossy());
    let lib = lib.map(|l| real(&l.to_string_lossy()));
    let mut names: HashMap<String, String> = HashMap::new();
    let (mut ob, mut func) = (String::new(), String::new());
    let (mut prog_ir, mut alloc_ir) = (0u64, 0u64);
    let mut skip = false;
    let libc_alloc = [
        "malloc",
        "free",
        "calloc",
        "realloc",
        "_int_",
        "tcache",
        "malloc_",
        "sysmalloc",
        "unlink_chunk",
        "arena_",
        "__libc_",
        "_mid_memalign",
        "memalign",
        "posix_memalign",
    ];
    let resolve = |names: &mut HashMap<String, String>, kind: &str, v: &str| -> String {
        if let Some(rest) = v.strip_prefix('(') {
            let (id, name) = rest.split_once(')').unwrap_or((rest, ""));
            let key = format!("{kind}{id}");
            let name = name.trim();
            if !name.is_empty() {
                names.insert(key.clone(), name.to_string());
            }
            return names.get(&key).cloned().unwrap_or_default();
        }
        v.to_string()
    };
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("ob=") {
            ob = resolve(&mut names, "ob", v);
        } else if let Some(v) = line.strip_prefix("fn=") {
            func = resolve(&mut names, "fn", v);
        } else if let Some(v) = line.strip_prefix("cob=") {
            resolve(&mut names, "ob", v);
        } else if let Some(v) = line.strip_prefix("cfn=") {
            resolve(&mut names, "fn", v);
        } else if line.starts_with("calls=") {
            skip = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if skip {
                skip = false;
                continue;
            }
            let ir: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let o = real(&ob);
            if o == prog {
                prog_ir += ir;
            } else if let Some(l) = &lib {
                if &o == l {
                    alloc_ir += ir;
                }
            } else if ob.contains("/libc.so") && libc_alloc.iter().any(|f| func.starts_with(f)) {
                alloc_ir += ir;
            }
        }
    }
    (prog_ir > 0).then(|| alloc_ir as f64 * 1000.0 / prog_ir as f64)
}

/// The `instructions` section: callgrind on the small-object programs.
pub fn instructions(opts: &Opts, out: &Path) -> String {
    let title = "Allocator instructions per 1000 instructions of the program";
    if !Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return format!("### {title}\n\nvalgrind is not installed; section skipped.\n");
    }
    progress("instructions: building libpcpalloc.so");
    let Some(lib) = build_lib() else {
        return format!("### {title}\n\nlibpcpalloc.so could not be built; section skipped.\n");
    };
    let cdir = out.join("c");
    std::fs::create_dir_all(&cdir).unwrap();
    // tcmalloc's instructions do not show up under its library's name in
    // callgrind's profile (too few to be true), so it is left out here.
    let allocs: Vec<_> = allocators(lib, opts)
        .into_iter()
        .filter(|a| a.0 != "tcmalloc")
        .collect();
    // Short runs: callgrind runs programs about 50 times slower.
    let cases: [(&str, &[&str]); 5] = [
        (
            "larson_server",
            &["1", "8", "1000", "5000", "100", "4141", "2"],
        ),
        ("glibc_thread", &["1", "1"]),
        ("sh6bench", &["1"]),
        ("xmalloc_test", &["1"]),
        ("rptest", &["4", "2"]),
    ];
    let mut head = vec!["program"];
    head.extend(allocs.iter().map(|a| a.0));
    let mut t = Table::new(title, &head);
    for (name, args) in cases {
        let Some(bin) = compile(name, &cdir) else {
            continue;
        };
        let mut row = vec![format!("{name} {}", args.join(" "))];
        for (aname, pre) in &allocs {
            progress(&format!("instructions: {name} on {aname} (callgrind)"));
            let profile = out.join(format!("callgrind.{name}.{aname}"));
            let mut c = Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", profile.display()))
                .arg(&bin)
                .args(args);
            if let Some(p) = pre {
                c.env("LD_PRELOAD", p);
            }
            let ok = c.output().is_ok_and(|o| o.status.success());
            let v = ok
                .then(|| instructions_per_1000(&profile.to_string_lossy(), &bin, pre.as_deref()))
                .flatten();
            let _ = std::fs::remove_file(&profile);
            row.push(v.map_or("-".into(), |v| format!("{v:.0}")));
        }
        t.row(row);
    }
    t.note = "Instructions executed inside the allocator (the preloaded library; for the system \
              malloc, libc's malloc family) per 1000 instructions of the program's own code, counted \
              by valgrind's callgrind, which runs threads one at a time: a measure of work per \
              operation that repeats from run to run. Lower is better."
        .into();
    t.render()
}
