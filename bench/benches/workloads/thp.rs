//! Huge pages (issue 19): `bench/c/pointer_chase.c` — a heap of 64-byte
//! nodes chased in a random cycle, TLB-bound — on every allocator and on
//! pcpalloc under each `PCPALLOC_THP` policy, interleaved: time per hop,
//! the share of anonymous memory in huge pages, and what 90% of the nodes
//! freed at random leaves (pageblocks still holding a live node, resident
//! memory and its huge-page share after the idle return). Then grouping by
//! lifetime (`bench/c/phases.c`: phases of temporaries with a few objects
//! kept among them — how many pageblocks the kept ones pin), with pcpalloc
//! also by mobility alone (`PCPALLOC_GROUPING=mobility`). Then the price:
//! the peak RSS of small programs (`python3 -c pass`, `ls -la /usr/lib`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::preload::{allocators, build_lib, compile, field};
use crate::{progress, Opts};
use pcpalloc_bench::runs::Runs;
use pcpalloc_bench::table::{mib, Table};

/// One run's figures.
#[derive(Clone, Copy, Default)]
struct Sample {
    ns_per_hop: f64,
    huge_share: f64,
    blocks_live: f64,
    after_free: f64,
    after_free_huge: f64,
    peak: f64,
}

/// One run of `phases`.
#[derive(Clone, Copy, Default)]
struct Phases {
    pinned: f64,
    after: f64,
    peak: f64,
    secs: f64,
}

fn phases(bin: &Path, args: &[String], who: &Contender) -> Option<Phases> {
    let t = std::time::Instant::now();
    let o = command(bin, args, who).output().ok()?;
    let secs = t.elapsed().as_secs_f64();
    if !o.status.success() {
        return None;
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |name: &str| field(&out, name);
    Some(Phases {
        pinned: field("pageblocks_kept ")?,
        after: field("after_anon_kib ")? * 1024.0,
        peak: field("peak_kib ")? * 1024.0,
        secs,
    })
}

/// An allocator under test: its name, the library to preload, the
/// environment to set.
struct Contender {
    name: String,
    preload: Option<PathBuf>,
    env: Vec<(&'static str, &'static str)>,
}

fn command(bin: &Path, args: &[String], who: &Contender) -> Command {
    let mut c = Command::new(bin);
    c.args(args);
    if let Some(p) = &who.preload {
        c.env("LD_PRELOAD", p);
    }
    for (k, v) in &who.env {
        c.env(k, v);
    }
    c
}

fn chase(bin: &Path, args: &[String], who: &Contender) -> Option<Sample> {
    let o = command(bin, args, who).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let field = |name: &str| field(&out, name);
    Some(Sample {
        ns_per_hop: field("ns_per_hop ")?,
        huge_share: field("huge_share_end ")?,
        blocks_live: field("pageblocks_live_after ")? / field("pageblocks_before ")?,
        after_free: field("after_free_anon_kib ")? * 1024.0,
        after_free_huge: field("after_free_huge_share ")?,
        peak: field("peak_kib ")? * 1024.0,
    })
}

/// The median of figure `f` over contender `i`'s runs (NaN: none).
fn median<T>(runs: &HashMap<usize, Vec<T>>, i: usize, f: fn(&T) -> f64) -> f64 {
    match runs.get(&i) {
        Some(v) if !v.is_empty() => Runs(v.iter().map(f).collect()).median(),
        _ => f64::NAN,
    }
}

/// Peak RSS in bytes of `program args` under `who`: its ru_maxrss, taken
/// by `bench/c/maxrss.c`, which forks it from a process of its own — the
/// ru_maxrss of a child of this process would start from this process's
/// size, and getrusage's RUSAGE_CHILDREN is the most over every child.
fn peak_rss(maxrss: &Path, program: &str, args: &[&str], who: &Contender) -> Option<f64> {
    let mut c = Command::new(maxrss);
    if let Some(p) = &who.preload {
        c.arg(format!("LD_PRELOAD={}", p.display()));
    }
    for (k, v) in &who.env {
        c.arg(format!("{k}={v}"));
    }
    c.arg("--").arg(program).args(args);
    let o = c.stderr(std::process::Stdio::null()).output().ok()?;
    let out = String::from_utf8_lossy(&o.stdout);
    let ok = o.status.success() && field(&out, "status ") == Some(0.0);
    // The program's own output comes first; the helper's lines last.
    ok.then(|| field(&out, "maxrss_kib "))
        .flatten()
        .map(|kib| kib * 1024.0)
}

pub fn section(opts: &Opts, out: &Path) -> String {
    progress("thp: building libpcpalloc.so");
    let Some(lib) = build_lib() else {
        return "### Huge pages\n\nlibpcpalloc.so could not be built; section skipped.\n".into();
    };
    let cdir = out.join("c");
    std::fs::create_dir_all(&cdir).unwrap();
    let Some(bin) = compile("pointer_chase", &cdir) else {
        return "### Huge pages\n\npointer_chase.c could not be compiled; section skipped.\n"
            .into();
    };
    let Some(phases_bin) = compile("phases", &cdir) else {
        return "### Huge pages\n\nphases.c could not be compiled; section skipped.\n".into();
    };
    let Some(maxrss) = compile("maxrss", &cdir) else {
        return "### Huge pages\n\nmaxrss.c could not be compiled; section skipped.\n".into();
    };
    let mut who: Vec<Contender> = Vec::new();
    for (name, pre) in allocators(lib.clone(), opts) {
        if name == "pcpalloc" {
            for policy in ["dense", "always", "never"] {
                who.push(Contender {
                    name: format!("pcpalloc {policy}"),
                    preload: Some(lib.clone()),
                    env: vec![("PCPALLOC_THP", policy)],
                });
            }
            who.push(Contender {
                name: "pcpalloc dense, by mobility".into(),
                preload: Some(lib.clone()),
                env: vec![("PCPALLOC_GROUPING", "mobility")],
            });
        } else {
            if name == "mimalloc" {
                // What mimalloc 2.3 and 3.3 do by default: huge pages for
                // their segments (Debian's 2.0.9 does not).
                who.push(Contender {
                    name: "mimalloc, huge pages".into(),
                    preload: pre.clone(),
                    env: vec![("MIMALLOC_LARGE_OS_PAGES", "1")],
                });
            }
            who.push(Contender {
                name: name.to_string(),
                preload: pre,
                env: vec![],
            });
        }
    }
    let (mib_heap, secs) = if opts.quick { (256, 1.5) } else { (1024, 4.0) };
    let runs = if opts.quick { 1 } else { opts.runs.min(3) };
    let args = [mib_heap.to_string(), secs.to_string(), "2.5".to_string()];
    let phase_args = if opts.quick {
        ["6", "64", "1.5"]
    } else {
        ["6", "256", "2.5"]
    }
    .map(String::from);
    let mut phase_samples: HashMap<usize, Vec<Phases>> = HashMap::new();
    let mut samples: HashMap<usize, Vec<Sample>> = HashMap::new();
    let mut rss: HashMap<(usize, usize), Vec<f64>> = HashMap::new();
    let small: [(&str, &str, &[&str]); 2] = [
        ("python3 -c pass", "python3", &["-c", "pass"]),
        ("ls -la /usr/lib", "ls", &["-la", "/usr/lib"]),
    ];
    for r in 0..runs {
        for (i, w) in who.iter().enumerate() {
            progress(&format!(
                "thp: round {}/{runs}: pointer chase on {}",
                r + 1,
                w.name
            ));
            if let Some(s) = chase(&bin, &args, w) {
                samples.entry(i).or_default().push(s);
            }
            progress(&format!(
                "thp: round {}/{runs}: phases on {}",
                r + 1,
                w.name
            ));
            if let Some(s) = phases(&phases_bin, &phase_args, w) {
                phase_samples.entry(i).or_default().push(s);
            }
        }
    }
    for _ in 0..5 {
        for (i, w) in who.iter().enumerate() {
            for (k, (_, prog, a)) in small.iter().enumerate() {
                if let Some(v) = peak_rss(&maxrss, prog, a, w) {
                    rss.entry((k, i)).or_default().push(v);
                }
            }
        }
    }
    let med = |i: usize, f: fn(&Sample) -> f64| median(&samples, i, f);
    let pct = |v: f64| {
        if v.is_finite() {
            format!("{:.0}%", v * 100.0)
        } else {
            "-".into()
        }
    };
    let mut head = vec!["figure".to_string()];
    head.extend(who.iter().map(|w| w.name.clone()));
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(
        "Huge pages: a TLB-bound heap, and what it costs small programs",
        &head_refs,
    );
    let mut row = |label: &str, f: &dyn Fn(usize) -> String| {
        let mut v = vec![label.to_string()];
        v.extend((0..who.len()).map(f));
        t.row(v);
    };
    row("ns per hop", &|i| {
        format!("{:.0}", med(i, |s| s.ns_per_hop))
    });
    row("anonymous memory in huge pages", &|i| {
        pct(med(i, |s| s.huge_share))
    });
    row("peak RSS", &|i| mib(med(i, |s| s.peak)));
    row("pageblocks with a live node after 90% freed", &|i| {
        pct(med(i, |s| s.blocks_live))
    });
    row("anonymous memory after 90% freed", &|i| {
        mib(med(i, |s| s.after_free))
    });
    row("... of it in huge pages", &|i| {
        pct(med(i, |s| s.after_free_huge))
    });
    let pmed = |i: usize, f: fn(&Phases) -> f64| median(&phase_samples, i, f);
    row("phases: pageblocks holding a kept object", &|i| {
        format!("{:.0}", pmed(i, |s| s.pinned))
    });
    row("phases: resident after the temporaries", &|i| {
        mib(pmed(i, |s| s.after))
    });
    row("phases: peak RSS", &|i| mib(pmed(i, |s| s.peak)));
    row("phases: time, s", &|i| {
        format!("{:.2}", pmed(i, |s| s.secs))
    });
    for (k, (label, _, _)) in small.iter().enumerate() {
        let label = format!("peak RSS of {label}");
        row(&label, &|i| match rss.get(&(k, i)) {
            Some(v) if !v.is_empty() => mib(Runs(v.clone()).median()),
            _ => "-".into(),
        });
    }
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .unwrap_or_else(|_| "missing".into());
    t.note = format!(
        "bench/c/pointer_chase.c, written from issue 19's description: {mib_heap} MiB of 64-byte \
         nodes, each its own malloc, linked in one random cycle and chased for {secs} s; the \
         huge-page share is smaps_rollup's AnonHugePages over Anonymous at the end of the chase. \
         Then 90% of the nodes are freed at random and, 2.5 s later, what stays is read again. \
         bench/c/phases.c {phase}: rounds of temporaries (128-511 B, up to {pmib} MiB) freed in \
         random order, one 16-95 B object kept per 16 of them (10 MiB of them with 256 MiB); the kept \
         objects' pageblocks, and what stays resident {pwait} s after. \
         Medians of {runs} interleaved rounds; small programs: medians of 5 runs, each one's \
         ru_maxrss from wait4 in bench/c/maxrss.c, which forks it (its floor: {floor}, /bin/true's). \
         System THP setting: {}.",
        thp.trim(),
        floor = peak_rss(&maxrss, "true", &[], &Contender { name: String::new(), preload: None, env: vec![] })
            .map_or("-".into(), mib),
        phase = phase_args.join(" "),
        pmib = phase_args[1],
        pwait = phase_args[2],
    );
    t.render()
}
