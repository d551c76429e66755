//! Issue 45, the steal's fence: a miss on one CPU's class lists is served
//! by the blocks another CPU's lists gave up, through the depot
//! (`page_alloc/pcp/depot.rs`), not by taking that CPU's pageset lock —
//! which under rseq cost a `membarrier` held across which the victim CPU's
//! own entries found their pageset busy and went to the zone.
//!
//! tests/c/rseq_steal_band.c is the page band with its two threads pinned
//! to two CPUs (so every run has the cross-CPU traffic); the report's
//! counters say how often a miss stole, how often an entry found its
//! pageset busy, how often the zone was locked and how many fences were
//! taken. (Before, rseq-glibc, runs of 2 M operations: 170-6,000 steals —
//! each a fence — and 450-31,000 busy entries a run, zone locks 2-6 times
//! getcpu's.)

mod support;

use std::collections::HashMap;

use pcpalloc::internals::large_class_of as class_of;
use pcpalloc::internals::{PageAllocator, ZoneConfig, NO_LIMIT};
use support::*;

/// Operations a band run makes.
const OPS: u64 = 2_000_000;
/// Runs per entry (their sums are compared: a run alone can be quiet).
const RUNS: usize = 3;

/// The report's counters of one run of the pinned band with `entry`.
fn band(entry: &str) -> HashMap<String, u64> {
    let ops = OPS.to_string();
    let env = [("PCPALLOC_STATS", "1"), ("PCPALLOC_PCP_ENTRY", entry)];
    let r = on_pcpalloc("rseq_steal_band", &[&ops], &env, QUICK);
    r.assert_ok();
    r.stderr()
        .lines()
        .chain(r.stdout().lines())
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            if k == "pcp_entry" {
                return Some((format!("{k}={v}"), 1));
            }
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The sum of `name` over `runs`; a run without it fails the test.
fn sum(runs: &[HashMap<String, u64>], name: &str) -> u64 {
    runs.iter()
        .map(|r| {
            *r.get(name)
                .unwrap_or_else(|| panic!("no {name} in the report"))
        })
        .sum()
}

/// Under rseq the pinned band's misses take no other CPU's pageset (no
/// steal), its entries find their pageset busy less than once per 1000
/// operations, it locks the zone no more than 3 times as often as with
/// getcpu, and takes fewer than 0.25 fences per 1000 operations (those of
/// the drains before the zone grows, none per miss).
#[test]
fn the_band_under_rseq_takes_no_fence_per_miss_and_finds_its_pageset_free() {
    let probe = band("rseq-glibc");
    if probe.contains_key("rseq_steal_band") && !probe.contains_key("pcp_entry=rseq-glibc") {
        skip("no glibc rseq area here");
        return;
    }
    if !probe.contains_key("pcp_entry=rseq-glibc") {
        skip("fewer than two CPUs, or no rseq");
        return;
    }
    let rseq: Vec<_> = (0..RUNS).map(|_| band("rseq-glibc")).collect();
    let getcpu: Vec<_> = (0..RUNS).map(|_| band("getcpu")).collect();
    let ops = OPS * RUNS as u64;
    let steals = sum(&rseq, "pcp_large_steals");
    let busy = sum(&rseq, "pcp_lock_busy");
    let (zone_rseq, zone_getcpu) = (
        sum(&rseq, "zone_lock_acquisitions"),
        sum(&getcpu, "zone_lock_acquisitions"),
    );
    eprintln!(
        "rseq-glibc, {RUNS} runs of {OPS} operations: steals {steals}, pcp_lock_busy {busy}, \
         zone locks {zone_rseq} (getcpu {zone_getcpu})"
    );
    assert_eq!(steals, 0, "misses took other CPUs' pageset locks");
    assert!(
        busy * 1000 < ops,
        "{busy} entries found their pageset busy in {ops} operations"
    );
    assert!(
        zone_rseq <= zone_getcpu * 3,
        "zone locks: rseq {zone_rseq} against getcpu's {zone_getcpu}"
    );
    let fences = sum(&rseq, "rseq_fences");
    eprintln!(
        "rseq_fences {fences}, depot hits {}",
        sum(&rseq, "pcp_depot_hits")
    );
    assert!(fences * 4000 < ops, "{fences} fences in {ops} operations");
}

/// Two CPUs' pagesets of a page allocator of the test's own: a list past
/// three batches of one class gives a batch to the depot; the other CPU's
/// miss of the class takes it there — no zone lock, no steal — and a miss
/// the depot cannot serve asks for the class, which the first CPU's next
/// free answers.
#[test]
fn the_depot_carries_blocks_from_one_cpu_to_another() {
    let pa = Box::new(PageAllocator::new());
    let mut cfg = ZoneConfig::with_limit(NO_LIMIT);
    cfg.size = 1 << 30;
    pa.zone.configure(&cfg);
    assert!(pa.pagesets.init_cpu_sets(2, false));
    let (ps0, ps1) = (pa.pagesets.cpu_pageset(0), pa.pagesets.cpu_pageset(1));
    let (on0, on1) = (pa.through(ps0, false), pa.through(ps1, false));
    let class = class_of(10);
    let locks = || {
        pa.zone
            .lock_stats()
            .acquisitions
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // CPU 0 frees 20 blocks of 10 pages: a batch is 6, so past 18 on the
    // list it gives 6 to the depot.
    let blocks: Vec<_> = (0..20).map(|_| on0.alloc_large(class).0).collect();
    for &b in &blocks {
        assert!(!b.is_null());
        // SAFETY: an exact block of the class, ours, written.
        unsafe {
            (*b).flags = 0;
            on0.free_large(b, class);
        }
    }
    let d = pa.pagesets.depot_stats();
    assert!(
        d.put >= 6 && d.pages >= 60,
        "the depot holds a batch: {d:?}"
    );
    // CPU 1's miss takes a refill's worth there: the zone is not asked,
    // nothing is stolen, and the next requests hit CPU 1's own lists.
    let before = locks();
    let mut taken = Vec::new();
    for _ in 0..6 {
        let (p, c) = on1.alloc_large(class);
        assert!(!p.is_null());
        assert_eq!(c, class);
        taken.push(p);
    }
    assert_eq!(locks(), before, "the zone is not asked");
    let c1 = ps1.snapshot().1;
    assert_eq!((c1.large_steals, c1.large_refill_pages), (0, 0));
    let d = pa.pagesets.depot_stats();
    assert_eq!((d.hits, d.taken), (1, 6), "{d:?}");
    // A class the depot has none of: CPU 1's miss asks for it (and the
    // zone serves it); a block of it freed on CPU 0 — handed over by CPU
    // 1's thread — answers the request: it goes to the depot.
    let other = class_of(20);
    let wanted = pa.pagesets.depot_stats().wanted;
    let (b, c) = on1.alloc_large(other);
    assert!(!b.is_null());
    assert_eq!(c, other);
    assert_eq!(pa.pagesets.depot_stats().wanted, wanted + 1);
    // SAFETY: as above.
    unsafe {
        (*b).flags = 0;
        on0.free_large(b, other);
    }
    let d = pa.pagesets.depot_stats();
    assert_eq!(d.answered, 1, "CPU 0 answered CPU 1's request: {d:?}");
    for p in taken {
        // SAFETY: ours, unused.
        unsafe {
            (*p).flags = 0;
            on1.free_large(p, class);
        }
    }
    pa.drain_all();
    let walk = pa.zone.check_invariants();
    assert_eq!((walk.pcp, walk.used), (0, 0));
    assert_eq!(
        pa.pagesets.depot_stats().pages,
        0,
        "drain-all empties the depot"
    );
    // SAFETY: the test is over; nothing uses the zone any more.
    unsafe { pa.zone.destroy() };
}
