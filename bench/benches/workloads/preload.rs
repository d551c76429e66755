//! The drop-in library measured: C programs — our workload shapes and the
//! classic allocator benchmarks of mimalloc-bench (larson and larson-sized,
//! rptest, glibc's bench-malloc-thread, malloc-large, xmalloc-test,
//! sh6bench, sh8bench, mleak, alloc-test, cache-scratch), written from the
//! published description of each in bench/c/ (same logic, same arguments;
//! the published arguments, scaled to 2 CPUs) — each a fresh process under
//! LD_PRELOAD, against the system
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

use crate::{progress, Opts};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::{mib, Table};

/// How a program's time is read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timed {
    /// Wall time of the process (fixed work).
    Wall,
    /// The `rtime` line it prints (fixed time: 1e9 / throughput).
    Reported,
}

/// A program, what it does, its arguments (quick, full) and how it is
/// timed.
pub(crate) struct Program {
    pub(crate) name: &'static str,
    pub(crate) what: &'static str,
    pub(crate) quick: &'static [&'static str],
    pub(crate) full: &'static [&'static str],
    pub(crate) timed: Timed,
}

pub(crate) const PROGRAMS: &[Program] = &[
    Program {
        name: "larson_server",
        what: "larsonN: new/delete[], 8-1000 B, 5000 blocks/thread, 2 threads",
        quick: &["2", "8", "1000", "5000", "100", "4141", "2"],
        full: &["5", "8", "1000", "5000", "100", "4141", "2"],
        timed: Timed::Reported,
    },
    Program {
        name: "larson",
        what: "larsonN-sized: larson with sized delete[], 2 threads",
        quick: &["2", "8", "1000", "5000", "100", "4141", "2"],
        full: &["5", "8", "1000", "5000", "100", "4141", "2"],
        timed: Timed::Reported,
    },
    Program {
        name: "rptest",
        what: "rptestN: 2 threads, 8-16000 B, cross-thread batches",
        quick: &["2", "0", "1", "2", "500", "1000", "100", "8", "16000"],
        full: &["2", "0", "1", "2", "500", "1000", "100", "8", "16000"],
        timed: Timed::Reported,
    },
    Program {
        name: "glibc_thread",
        what: "glibc-thread: bench-malloc-thread, 2 threads, 4 B-32 KiB",
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
        what: "xmalloc-testN: 2 producers, 2 consumers, 64 B",
        quick: &["-w", "2", "-t", "2", "-s", "64"],
        full: &["-w", "2", "-t", "5", "-s", "64"],
        timed: Timed::Reported,
    },
    Program {
        name: "sh6bench",
        what: "sh6benchN: 4 threads, 1-1000 B",
        quick: &["4", "5000"],
        full: &["4"],
        timed: Timed::Wall,
    },
    Program {
        name: "sh8bench",
        what: "sh8benchN: 4 threads, size histogram, main-thread blocks",
        quick: &["4", "175000", "250000", "2500000"],
        full: &["4"],
        timed: Timed::Wall,
    },
    Program {
        name: "mleak",
        what: "mleak: 10 short threads per round (mleak10 / mleak100)",
        quick: &["5"],
        full: &["50"],
        timed: Timed::Wall,
    },
    Program {
        name: "alloc_test",
        what: "alloc-testN: 2 threads, 5 B-1 KiB, Pareto slots",
        quick: &["2", "20000000"],
        full: &["2"],
        timed: Timed::Wall,
    },
    Program {
        name: "cache_scratch",
        what: "cache-scratchN: 2 threads, 1 B objects",
        quick: &["2", "1000", "1", "1000000", "2"],
        full: &["2", "1000", "1", "2000000", "2"],
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

/// Builds libpcpalloc.so in its own target directory beside the one the
/// benchmark was built in (cargo holds that one while benchmarks run) and
/// returns its path.
pub(crate) fn build_lib() -> Option<PathBuf> {
    pcpalloc_bench::preload::build_lib(&pcpalloc_bench::preload::target_dir().join("preload"))
}

/// Where the system keeps its shared libraries: the first of these that
/// exists.
const LIB_DIRS: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

/// `bench/c/{name}.c` as a program `out/{name}`.
pub(crate) fn compile(name: &str, out: &Path) -> Option<PathBuf> {
    compile_as(name, out.join(name), &["-O2", "-pthread"], &["-lm", "-ldl"])
}

/// `bench/c/{name}.c` compiled with `flags` to `file`, linked with `libs`.
pub(crate) fn compile_as(
    name: &str,
    file: PathBuf,
    flags: &[&str],
    libs: &[&str],
) -> Option<PathBuf> {
    let ok = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&file)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("c/{name}.c")))
        .args(libs)
        .status()
        .ok()?
        .success();
    ok.then_some(file)
}

/// The allocators to compare: the system's, ours, an earlier build of ours
/// (`--baseline`), and the Debian peers that are installed.
pub(crate) fn allocators(lib: PathBuf, opts: &Opts) -> Vec<(&'static str, Option<PathBuf>)> {
    let mut v: Vec<(&str, Option<PathBuf>)> = vec![("system", None), ("pcpalloc", Some(lib))];
    if let Some(b) = &opts.baseline {
        v.push(("before", Some(b.clone())));
    }
    for (name, file) in [
        ("mimalloc", "libmimalloc.so.2"),
        ("jemalloc", "libjemalloc.so.2"),
        ("tcmalloc", "libtcmalloc_minimal.so.4"),
    ] {
        if let Some(p) = LIB_DIRS
            .iter()
            .map(|d| Path::new(d).join(file))
            .find(|p| p.exists())
        {
            v.push((name, Some(p)));
        }
    }
    // The peers bench/peers/build.sh builds from their crates' sources.
    let built = pcpalloc_bench::preload::target_dir().join("peers");
    for (name, file) in [
        ("mimalloc-2.3", "libmimalloc-v2.so"),
        ("mimalloc-3.3", "libmimalloc-v3.so"),
        ("snmalloc", "libsnmallocshim.so"),
    ] {
        let p = built.join(file);
        if p.exists() {
            v.push((name, Some(p)));
        }
    }
    v
}

/// Keys of the per-round ratios of ours to each allocator: `EACH + ai`.
const EACH: usize = 200;

/// Runs `bin args` with `preload`; returns (seconds, peak bytes). The
/// program reports its own VmHWM (ru_maxrss of a child of a large process
/// would report the parent's size).
/// The number on the line of a program's output that starts with `name`
/// (`"peak_kib "`, `"rtime "`).
pub(crate) fn field(out: &str, name: &str) -> Option<f64> {
    out.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

fn run(bin: &Path, args: &[&str], preload: Option<&Path>, timed: Timed) -> Option<(f64, f64)> {
    run_with(bin, args, preload, &[], timed)
}

/// [`run`] with these environment variables set too.
pub(crate) fn run_with(
    bin: &Path,
    args: &[&str],
    preload: Option<&Path>,
    env: &[(&str, &std::ffi::OsStr)],
    timed: Timed,
) -> Option<(f64, f64)> {
    let mut c = Command::new(bin);
    c.args(args);
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    c.envs(env.iter().copied());
    let t0 = Instant::now();
    let o = c.output().ok()?;
    let wall = t0.elapsed().as_secs_f64();
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |name: &str| field(&out, name);
    let kib = field("peak_kib ")?;
    let secs = match timed {
        Timed::Wall => wall,
        Timed::Reported => field("rtime ")?,
    };
    o.status.success().then_some((secs, kib * 1024.0))
}

pub(crate) fn geomean(v: &[f64]) -> f64 {
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
    // Each round's time ratio of every allocator to the system's (and to
    // mimalloc's), for the ranges.
    let mut round_ratios: HashMap<(usize, usize), Runs> = HashMap::new();
    let mimalloc = allocs.iter().position(|a| a.0 == "mimalloc");
    for r in 0..opts.runs {
        for (pi, (p, bin)) in progs.iter().enumerate() {
            let mut times = vec![f64::NAN; allocs.len()];
            for (ai, (name, pre)) in allocs.iter().enumerate() {
                progress(&format!(
                    "preload: round {}/{}: {} on {name}",
                    r + 1,
                    opts.runs,
                    p.name
                ));
                let args = if opts.quick { p.quick } else { p.full };
                if let Some(s) = run(bin, args, pre.as_deref(), p.timed) {
                    crate::record("preload", p.name, name, r, "seconds", s.0);
                    crate::record("preload", p.name, name, r, "peak_bytes", s.1);
                    samples.entry((pi, ai)).or_default().push(s);
                    times[ai] = s.0;
                }
            }
            for ai in 1..allocs.len() {
                round_ratios
                    .entry((pi, ai))
                    .or_default()
                    .push(times[ai] / times[0]);
            }
            for (ai, t) in times.iter().enumerate() {
                round_ratios
                    .entry((pi, EACH + ai))
                    .or_default()
                    .push(times[1] / t);
            }
            if let Some(mi) = mimalloc {
                round_ratios
                    .entry((pi, 100 + 1))
                    .or_default()
                    .push(times[1] / times[mi]);
                if opts.baseline.is_some() {
                    round_ratios
                        .entry((pi, 100 + 2))
                        .or_default()
                        .push(times[2] / times[mi]);
                }
            }
        }
    }
    let runs_of = |pi: usize, ai: usize, f: fn(&(f64, f64)) -> f64| -> Runs {
        samples
            .get(&(pi, ai))
            .map(|v| v.iter().map(f).collect())
            .unwrap_or_default()
    };
    let ratio_of = |pi: usize, key: usize| -> Runs {
        round_ratios.get(&(pi, key)).cloned().unwrap_or_default()
    };
    // Ours over the fastest other allocator (the system's included, the
    // earlier build of ours not): our median time over the least of the
    // others' medians — not each round's least time, which the noise of
    // many allocators would pull down.
    let over_fastest = |pi: usize| -> f64 {
        let med = |ai: usize| runs_of(pi, ai, |s| s.0).median();
        let fastest = (0..allocs.len())
            .filter(|&ai| ai != 1 && allocs[ai].0 != "before")
            .map(med)
            .filter(|t| t.is_finite())
            .fold(f64::INFINITY, f64::min);
        med(1) / fastest
    };
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
    if allocs.len() > 2 {
        head.push("pcpalloc / fastest".into());
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
    let two = |v: f64| format!("{v:.2}");
    for (pi, (p, _)) in progs.iter().enumerate() {
        let mut row = vec![p.what.to_string(), runs_of(pi, 0, |s| s.0).show(3)];
        let mut col = 2;
        for ai in 1..allocs.len() {
            let r = ratio_of(pi, ai);
            row.push(r.show_with(two));
            ratios[col].push(r.median());
            col += 1;
        }
        if mimalloc.is_some() {
            let r = ratio_of(pi, 101);
            row.push(r.show_with(two));
            ratios[col].push(r.median());
            col += 1;
            if opts.baseline.is_some() {
                let r = ratio_of(pi, 102);
                row.push(r.show_with(two));
                ratios[col].push(r.median());
                col += 1;
            }
        }
        if allocs.len() > 2 {
            let r = over_fastest(pi);
            row.push(two(r));
            ratios[col].push(r);
        }
        for ai in 0..allocs.len() {
            row.push(runs_of(pi, ai, |s| s.1).show_with(mib));
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
    let peers: Vec<String> = allocs
        .iter()
        .filter(|a| !["system", "pcpalloc", "before"].contains(&a.0))
        .filter_map(|a| Some(a.1.as_ref()?.display().to_string()))
        .collect();
    t.note = format!(
        "Time of the system malloc in seconds, then time ratios (lower is better): each allocator's \
         over the system's, and ours (and the earlier build's) over mimalloc's, each round's ratio; \
         medians of {} interleaved round(s), range in parentheses (the geometric mean is over the \
         medians); pcpalloc / fastest is our median time over the least median of the others \
         (the system's included). Programs printing `rtime` (fixed duration, 1e9 / throughput) are timed by it, \
         the others by wall time. RSS: peak resident set of the process (VmHWM). Peers found \
         installed and preloaded: {}. Sources in bench/c/.",
        opts.runs,
        if peers.is_empty() {
            "none".to_string()
        } else {
            peers.join(", ")
        }
    );
    let mut text = t.render();
    // Ours over each allocator, the geometric mean over the programs, and
    // the programs where ours is more than 1.10x the fastest.
    let names: Vec<&str> = allocs.iter().map(|a| a.0).collect();
    let mut g = Table::new(
        "pcpalloc's time over each allocator's, geometric mean over the programs",
        &names,
    );
    g.row(
        (0..allocs.len())
            .map(|ai| {
                let med: Vec<f64> = (0..progs.len())
                    .map(|pi| ratio_of(pi, EACH + ai).median())
                    .collect();
                format!("{:.3}", geomean(&med))
            })
            .collect(),
    );
    let slow: Vec<&str> = progs
        .iter()
        .enumerate()
        .filter(|(pi, _)| over_fastest(*pi) > 1.10)
        .map(|(_, (p, _))| p.name)
        .collect();
    g.note = format!(
        "Medians of each round's ratio, per program. Programs where pcpalloc took more than 1.10x \
         the fastest other allocator's time: {}.",
        if slow.is_empty() {
            "none".to_string()
        } else {
            slow.join(", ")
        }
    );
    text.push_str(&g.render());
    text
}

/// Allocator instructions per 1000 instructions of the program's own code,
/// from a callgrind profile (see [`callgrind_counts`]).
pub(crate) fn instructions_per_1000(
    profile: &str,
    program: &Path,
    lib: Option<&Path>,
) -> Option<f64> {
    let (prog_ir, alloc_ir) = callgrind_counts(profile, program, lib)?;
    Some(alloc_ir as f64 * 1000.0 / prog_ir as f64)
}

/// The instructions of the program's own code and of the allocator in a
/// callgrind profile: the program's functions are those of its own binary;
/// the allocator's, those of the preloaded library (or, for the system
/// malloc, libc's malloc family). `None` if the profile cannot be read or
/// shows no instruction of the program.
pub(crate) fn callgrind_counts(
    profile: &str,
    program: &Path,
    lib: Option<&Path>,
) -> Option<(u64, u64)> {
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
    (prog_ir > 0).then_some((prog_ir, alloc_ir))
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
        ("sh6bench", &["4", "400"]),
        ("xmalloc_test", &["-w", "2", "-t", "1", "-s", "64"]),
        (
            "rptest",
            &["2", "0", "1", "2", "500", "1000", "100", "8", "16000"],
        ),
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
              operation that repeats from run to run, so one run each. Lower is better."
        .into();
    t.render()
}
