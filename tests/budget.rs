//! Issue 16, "the memory budget, and the heap that gives memory back": each
//! row of the issue's table as a C program (tests/c/budget_*.c) run under
//! LD_PRELOAD=libpcpalloc.so, asserting what glibc does or what the issue
//! asks for. Programs that make sense without pcpalloc run on glibc too,
//! as the reference. Every run has a time limit: a hang fails the test.

mod support;

use std::process::Command;

use support::*;

/// Row 1: free an 8 MiB block, malloc(64 GiB) fails with ENOMEM, then
/// 256 x 1 MiB and 4 x 8 MiB all succeed and mapped_bytes stays sane.
/// The 64 GiB request must fail as on glibc where the kernel would refuse
/// it (overcommit_memory 0 or 2 and more than RAM + swap).
/// (Before: every later malloc needing new pages returned NULL and
/// mapped_bytes wrapped below zero.)
#[test]
fn refused_huge_request_leaves_the_budget_intact() {
    on_glibc("budget_after_enomem", &[]).assert_says("budget_after_enomem ok");
    on_pcpalloc("budget_after_enomem", &[], &[], QUICK).assert_says("budget_after_enomem ok");
}

/// Row 2: python3: bytearray(10 MiB) freed, bytearray(100 GiB) raises
/// MemoryError, then 64 x bytearray(1 MiB) succeed. (Before: MemoryError
/// for the 1 MiB ones.) Python is run only if malloc(100 GiB) fails where
/// the kernel would refuse it, as glibc's does.
#[test]
fn python_recovers_from_memory_error() {
    if !require("python3") {
        return;
    }
    let script = r#"
import sys
b = bytearray(10 << 20)
b[-1] = 1
del b
try:
    x = bytearray(100 << 30)
    print("note: bytearray(100 GiB) succeeded here")
    del x
except MemoryError:
    print("bytearray(100 GiB): MemoryError")
keep = []
for i in range(64):
    try:
        keep.append(bytearray(1 << 20))
    except MemoryError:
        print("FAIL: bytearray(1 MiB) number %d after the MemoryError raised MemoryError" % (i + 1))
        sys.exit(1)
print("python ok")
"#;
    // Python writes every byte of a bytearray it gets: where the kernel
    // grants 100 GiB (overcommit_memory 1) the row cannot be run safely.
    let system = on_glibc("budget_absurd", &["100"]);
    system.assert_ok();
    if system.stdout().contains("granted") {
        skip("malloc(100 GiB) succeeds on glibc here: python would write 100 GiB");
        return;
    }
    // And if our malloc grants
    // 100 GiB the kernel would refuse (glibc's fails), python would be
    // OOM-killed, and take the machine's memory with it. Ask first.
    let guard = on_pcpalloc("budget_absurd", &["100"], &[], QUICK);
    guard.assert_ok();
    assert!(
        !guard.stdout().contains("granted, kernel refuses"),
        "malloc(100 GiB) succeeded on a machine that cannot back it (glibc's fails); \
         python would memset it and be OOM-killed, so it is not run:\n{}",
        guard.describe()
    );
    let reference = run_for(
        Command::new("python3")
            .args(["-c", script])
            .env_remove("LD_PRELOAD"),
        QUICK,
    );
    reference.assert_says("python ok");
    let r = run_for(preloaded("python3").args(["-c", script]), QUICK);
    r.assert_says("python ok");
}

/// Row 3: three untouched malloc of 45% of MemTotal each all succeed
/// without PCPALLOC_MEMORY_LIMIT (address space never touched is not
/// memory). Skipped under strict overcommit (vm.overcommit_memory = 2).
#[test]
fn untouched_address_space_is_not_charged() {
    let mode = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").unwrap_or_default();
    if mode.trim() == "2" {
        skip("vm.overcommit_memory is 2 (strict): glibc would refuse too");
        return;
    }
    on_glibc("budget_overcommit", &[]).assert_says("budget_overcommit ok");
    on_pcpalloc("budget_overcommit", &[], &[], QUICK).assert_says("budget_overcommit ok");
}

/// Row 4: PCPALLOC_MEMORY_LIMIT=64MiB, 4 threads: fill with 1 MiB blocks
/// until NULL, free all, fill with 8 MiB blocks until NULL: round 2 gets at
/// least 7/8 of round 1's bytes. (Before: 0 MiB.)
#[test]
fn limit_memory_freed_small_serves_large() {
    on_pcpalloc(
        "budget_fill_shift",
        &["64"],
        &[("PCPALLOC_MEMORY_LIMIT", "64MiB")],
        QUICK,
    )
    .assert_says("budget_fill_shift ok");
}

/// Row 5: same limit, 4 threads, mixed sizes (16 B - 3 MiB), fill until
/// NULL, free all (half by the owner, half by another thread), 4 rounds:
/// each later round reaches at least 7/8 of round 0. (Before: 64-79%.) The
/// program runs three times with different sizes; every run must pass.
#[test]
fn limit_rounds_of_mixed_sizes_refill() {
    let mut failures = Vec::new();
    for run in ["0", "1", "2"] {
        let r = on_pcpalloc(
            "budget_fill_mixed",
            &["64", run],
            &[("PCPALLOC_MEMORY_LIMIT", "64MiB")],
            QUICK,
        );
        if r.timed_out || !r.out.status.success() || !r.stdout().contains("budget_fill_mixed ok") {
            failures.push(r.describe());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Row 6: same limit: 40 MiB of 1 MiB blocks freed (the zone keeps
/// them), a cached 8 MiB block, then a 60 MiB block and 1 MiB blocks until
/// NULL, every page touched: peak_mapped_bytes <= the limit and VmHWM grows
/// by at most the limit + 2 MiB. (Before: 115 MiB held.)
#[test]
fn limit_is_never_exceeded() {
    on_pcpalloc(
        "budget_peak",
        &["64"],
        &[("PCPALLOC_MEMORY_LIMIT", "64MiB")],
        QUICK,
    )
    .assert_says("budget_peak ok");
}

/// Row 7: limit 512 MiB, 4 threads replacing random blocks (8 B - 8 MiB)
/// for 6 s with 100-300 MiB live: no malloc fails while live + request <=
/// 7/8 of the limit. (Before: 1.19 M failures in 40 s.) And reclaim aims at
/// the request: almost every reclaim is over after its first stages, few
/// give back everything (when stage 2 counted what it unmapped instead of
/// what the budget got back, 8-9% went the whole way; now under 1%).
#[test]
fn limit_no_failure_while_the_request_fits() {
    let run = on_pcpalloc(
        "budget_replace",
        &["512", "6"],
        &[("PCPALLOC_MEMORY_LIMIT", "512MiB"), ("PCPALLOC_STATS", "1")],
        LONG,
    );
    run.assert_says("budget_replace ok");
    let err = run.stderr();
    let counter = |name: &str| -> u64 {
        err.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the report\n{}", run.describe()))
    };
    let (runs, full) = (counter("reclaim_runs"), counter("reclaim_full_runs"));
    assert!(
        full <= (runs / 20).max(3),
        "{full} of {runs} reclaims gave back everything\n{}",
        run.describe()
    );
}

/// Row 8: allocated_bytes and mallinfo2 (uordblks + hblkhd) drop by 20 MiB
/// right after a 20 MiB block is freed, and by 640,000 B (within 64 KiB)
/// after another thread frees 10,000 x 64 B of an idle owner. (Before:
/// still 20,975,616 after the free.)
#[test]
fn stats_follow_frees() {
    on_glibc("budget_stats", &[]).assert_says("budget_stats ok");
    on_pcpalloc("budget_stats", &[], &[], QUICK).assert_says("budget_stats ok");
}

/// Row 9: a single-threaded program frees 64 MiB (one block, or 1024 x 64
/// KiB) and sleeps without calling malloc: with PCPALLOC_DECAY_MS=100 its
/// VmRSS is back within 8 MiB of the value before the allocation within
/// 1 s. Also one 12 MiB block: a huge block small enough for the cache, in a
/// heap too small to start the background thread — the case where, before
/// the fix, no tick ever ran and the block stayed resident for good. And
/// 10 MiB of 200 KiB blocks freed through the thread's large bins, which
/// must start the tick as any free does (they did not at first: +10 MiB
/// for good).
#[test]
fn idle_single_thread_gives_memory_back() {
    let mut failures = Vec::new();
    for (mode, mib) in [
        ("block", "64"),
        ("small", "64"),
        ("block", "12"),
        ("binned", "10"),
    ] {
        let args = [mode, mib, "1000"];
        on_glibc("budget_idle_return", &args).assert_says("budget_idle_return ok");
        let r = on_pcpalloc(
            "budget_idle_return",
            &args,
            &[("PCPALLOC_DECAY_MS", "100")],
            QUICK,
        );
        if r.timed_out || !r.out.status.success() {
            failures.push(r.describe());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The large bins (freed blocks of up to 256 KiB kept for their thread)
/// under the budget: a thread that frees 48 x 96 KiB and stays alive keeps
/// some in its bins; when another thread reaches the limit, the reclaim
/// spills them too; a thread that exits gives them back, malloc_trim
/// spills every thread's, and a forked child spills those of the threads
/// that did not come along. (Without the
/// spill at the limit, "limit" fails: the idle thread's bins keep
/// their pages until a tick finds them idle.)
#[test]
fn large_bins_go_back_at_the_limit_and_at_exit() {
    for mode in ["idle", "limit", "exit", "trim", "fork"] {
        on_pcpalloc(
            "budget_bins",
            &[mode],
            &[
                ("PCPALLOC_MEMORY_LIMIT", "48MiB"),
                ("PCPALLOC_DECAY_MS", "100000"),
            ],
            QUICK,
        )
        .assert_says(&format!("budget_bins {mode} ok"));
    }
}
