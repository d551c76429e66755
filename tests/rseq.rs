//! Issue 45: the CPU pagesets entered by a restartable sequence (on glibc's
//! rseq area, or on one of pcpalloc's own) or by sched_getcpu and a
//! try-lock, each forced with PCPALLOC_PCP_ENTRY: every block's contents
//! survive threads moved between CPUs, signalled, forking and exiting
//! mid-work (tests/c/rseq_stress.c), and one thread's scripted sequence
//! leaves the pagesets' heuristics counters the same whatever the entry
//! (tests/c/rseq_script.c).

mod support;

use std::time::Duration;

use support::*;

/// An entry as the report names it, and the environment that forces it.
/// Our own area needs glibc not to register one (its tunable).
const ENTRIES: [(&str, &[(&str, &str)]); 3] = [
    ("rseq-glibc", &[("PCPALLOC_PCP_ENTRY", "rseq-glibc")]),
    (
        "rseq-own",
        &[
            ("PCPALLOC_PCP_ENTRY", "rseq-own"),
            ("GLIBC_TUNABLES", "glibc.pthread.rseq=0"),
        ],
    ),
    ("getcpu", &[("PCPALLOC_PCP_ENTRY", "getcpu")]),
];

/// The value of the report line `name VALUE`.
fn line<'a>(report: &'a str, name: &str) -> Option<&'a str> {
    report
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
}

/// Whether this kernel gives an rseq entry at all (`auto` takes one).
fn rseq_here() -> bool {
    let r = on_pcpalloc("rseq_script", &["10"], &[("PCPALLOC_STATS", "1")], QUICK);
    r.assert_ok();
    line(&r.stderr(), "pcp_entry") != Some("getcpu")
}

/// Every entry, forced, under the stress program: the report says the
/// entry asked for is live (where the kernel has rseq), the program
/// checked every block, and the scheduling happened (migrations, signals
/// handled, forks, thread exits).
#[test]
fn every_block_survives_migrations_signals_forks_and_exits_in_each_entry() {
    let rseq = rseq_here();
    if !rseq {
        skip("no rseq entry on this kernel: only getcpu is checked");
    }
    let mut failures = Vec::new();
    for (entry, env) in ENTRIES {
        if entry != "getcpu" && !rseq {
            continue;
        }
        let mut env = env.to_vec();
        env.push(("PCPALLOC_STATS", "1"));
        let r = on_pcpalloc("rseq_stress", &["1500"], &env, LONG);
        let (out, err) = (r.stdout(), r.stderr());
        let ok = r.out.status.success() && !r.timed_out && out.contains("rseq_stress ok");
        let live = line(&err, "pcp_entry");
        eprintln!(
            "{entry}: {} pcp_index {:?} pcp_rseq_aborts {:?} pcp_lock_busy {:?}",
            out.trim(),
            line(&err, "pcp_index"),
            line(&err, "pcp_rseq_aborts"),
            line(&err, "pcp_lock_busy"),
        );
        if !ok {
            failures.push(format!("{entry}: {}", r.describe()));
            continue;
        }
        if live != Some(entry) {
            failures.push(format!("{entry}: the report says pcp_entry {live:?}"));
        }
        let count = |what: &str| -> u64 {
            let mut w = out.split_whitespace();
            w.find(|&x| x == what);
            w.next().and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        for what in [
            "checked",
            "migrations",
            "signals_handled",
            "forks",
            "thread_exits",
        ] {
            if count(what) == 0 {
                failures.push(format!("{entry}: no {what}: {}", out.trim()));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same single-thread sequence, pinned to CPU 0 and without a tick
/// (decay every minute), under each entry: every counter of the pagesets'
/// heuristics in the report (count, high, free_count, refills, drains,
/// free_high, the large lists' counts…) is the same as with getcpu.
#[test]
fn heuristics_counters_are_the_same_whatever_the_entry() {
    if !require("taskset") {
        return;
    }
    let rseq = rseq_here();
    let counters = |env: &[(&str, &str)]| -> (String, Vec<String>) {
        let mut c = std::process::Command::new("taskset");
        c.args(["-c", "0"])
            .arg(c_program("rseq_script"))
            .arg("20000")
            .env("LD_PRELOAD", preload_lib());
        c.env("PCPALLOC_STATS", "1")
            .env("PCPALLOC_DECAY_MS", "60000")
            .env("PCPALLOC_PCP", "cpu");
        for (k, v) in env {
            c.env(k, v);
        }
        let r = run_for(&mut c, QUICK);
        r.assert_says("rseq_script ok");
        let err = r.stderr();
        let entry = line(&err, "pcp_entry").unwrap_or("?").to_string();
        let lines = err
            .lines()
            .filter(|l| {
                [
                    "pcp_",
                    "alloc_zone ",
                    "free_zone ",
                    "free_high ",
                    "pageset0_",
                ]
                .iter()
                .any(|p| l.starts_with(p))
                    && !["pcp_entry ", "pcp_index ", "pcp_rseq_aborts "]
                        .iter()
                        .any(|p| l.starts_with(p))
            })
            .map(str::to_string)
            .collect();
        (entry, lines)
    };
    let (_, want) = counters(ENTRIES[2].1);
    assert!(
        want.iter().any(|l| l.starts_with("pcp_large_alloc ")),
        "no counters in the report: {want:?}"
    );
    for (entry, env) in &ENTRIES[..2] {
        if !rseq {
            continue;
        }
        let (live, got) = counters(env);
        assert_eq!(&live, entry);
        let diff: Vec<_> = want
            .iter()
            .zip(&got)
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("getcpu {a} / {entry} {b}"))
            .collect();
        assert!(diff.is_empty() && want.len() == got.len(), "{diff:#?}");
        eprintln!("{entry}: {} counters equal to getcpu's", got.len());
    }
}

/// Under valgrind (memcheck, pcpalloc's malloc kept), which does not run
/// restartable sequences, the entry is getcpu whatever is asked.
#[test]
fn valgrind_enters_through_getcpu() {
    if !require("valgrind") {
        return;
    }
    let mut c = std::process::Command::new("valgrind");
    c.args([
        "-q",
        "--error-exitcode=9",
        "--soname-synonyms=somalloc=nouse",
    ])
    .arg(c_program("rseq_script"))
    .arg("200")
    .env("LD_PRELOAD", preload_lib())
    .env("PCPALLOC_STATS", "1")
    .env("PCPALLOC_PCP_ENTRY", "rseq-glibc");
    let r = run_for(&mut c, LONG);
    r.assert_says("rseq_script ok");
    assert_eq!(
        line(&r.stderr(), "pcp_entry"),
        Some("getcpu"),
        "{}",
        r.describe()
    );
}

/// The lock-prefixed (and xchg) instructions of the preloaded library that
/// execute, by function, between the marks of `rseq_lock_free` (window 0:
/// blocks of 16 KiB through the large lists; window 1: slabs made and
/// emptied through the order lists), counted with a breakpoint on each
/// (tests/rseq_lock_count.py under gdb).
fn locked_executions(entry: &str) -> Vec<(usize, String, u64)> {
    let mut c = std::process::Command::new("gdb");
    c.args(["-batch", "-nx"])
        .arg("-ex")
        .arg(format!(
            "set environment LD_PRELOAD={}",
            preload_lib().display()
        ))
        .arg("-ex")
        .arg(format!("set environment PCPALLOC_PCP_ENTRY={entry}"))
        .arg("-x")
        .arg(root().join("tests/rseq_lock_count.py"))
        .arg("--args")
        .arg(c_program("rseq_lock_free"))
        .arg("4")
        .env("RSEQ_LOCK_LIB", preload_lib());
    let r = run_for(&mut c, Duration::from_secs(300));
    let out = r.stdout();
    assert!(
        out.contains("rseq_lock_free ok") && out.contains("\ndone"),
        "{}",
        r.describe()
    );
    out.lines()
        .filter_map(|l| {
            let l = l.strip_prefix("window ")?;
            let (w, rest) = l.split_once(' ')?;
            let (f, n) = rest.rsplit_once(' ')?;
            Some((w.parse().ok()?, f.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// No lock-prefixed instruction on the pagesets' pop and push with rseq:
/// between the marks, the functions that enter a pageset and do nothing
/// else atomic — `large::alloc` and `Pages::free_large_many` (the large
/// lists), `Pages::free` (the order lists) — execute none; with getcpu
/// they execute one per entry (the try-lock's CAS), which shows the count
/// sees them. (`Pages::alloc`, inlined into the slabs' refill, is mixed
/// with the heap's own atomics there: printed, not asserted.)
#[test]
fn no_lock_prefixed_instruction_enters_a_pageset_with_rseq() {
    if !require("gdb") || !require("objdump") || !rseq_here() {
        return;
    }
    let entering = [
        "pcpalloc::large::alloc",
        "pcpalloc::page_alloc::Pages::free_large_many",
        "pcpalloc::page_alloc::Pages::free",
    ];
    let sum = |v: &[(usize, String, u64)], f: &str| -> u64 {
        v.iter().filter(|(_, g, _)| g == f).map(|x| x.2).sum()
    };
    let rseq = locked_executions("rseq-glibc");
    let getcpu = locked_executions("getcpu");
    let refill = "pcpalloc::heap::refill::<impl pcpalloc::heap::heap::Owned>::alloc_slow";
    for f in entering.iter().chain([&refill]) {
        eprintln!(
            "{f}: rseq-glibc {}, getcpu {}",
            sum(&rseq, f),
            sum(&getcpu, f)
        );
    }
    for f in entering {
        assert_eq!(
            sum(&rseq, f),
            0,
            "{f} executes lock-prefixed instructions with rseq: {rseq:#?}"
        );
        assert!(
            sum(&getcpu, f) > 0,
            "{f}: no CAS seen with getcpu either: {getcpu:#?}"
        );
    }
}
