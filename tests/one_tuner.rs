//! Issue 44, "one tuner": every cache level tunes itself with the pagesets'
//! one rule (`page_alloc/pcp/tuner.rs`), so every knob reaches every level.
//! tests/c/one_tuner.c works one level at a time in a single thread — a
//! thread's block bins (32 KiB blocks), the pagesets' class lists (512
//! KiB), the parked slabs (64-byte objects) and the huge-block cache (6
//! MiB) — under LD_PRELOAD, with its own pageset (PCPALLOC_PCP=thread) and
//! no tick in the run, so its counters are the same from run to run; each
//! test reads the level's counters from the PCPALLOC_STATS report under
//! two settings of one knob (the free_high threshold, the heuristics, the
//! high fraction) and asserts they differ. (Before: the knobs
//! reached the order lists alone — and the class lists' AUTO_TUNE and
//! FREE_COUNT gates — so the bins, parked slabs and huge cache counted the
//! same under every setting.)

mod support;

use std::collections::HashMap;

use support::*;

/// Each level, and the report's counters that show its tuning.
const LEVELS: [(&str, &[&str]); 4] = [
    ("bins", &["large_bin_free_high", "large_bin_spilled_pages"]),
    ("lists", &["pcp_large_free_high", "zone_lock_acquisitions"]),
    ("park", &["slabs_created", "slabs_retired"]),
    ("huge", &["huge_cache_hits", "huge_allocs"]),
];

/// The report's counters after one_tuner ran `level` with `env` set.
fn counters(level: &str, env: &[(&str, &str)]) -> HashMap<String, u64> {
    let mut all = vec![
        ("PCPALLOC_STATS", "1"),
        ("PCPALLOC_PCP", "thread"),
        ("PCPALLOC_DECAY_MS", "60000"),
    ];
    all.extend_from_slice(env);
    let run = on_pcpalloc("one_tuner", &[level, "20"], &all, QUICK);
    run.assert_says("one_tuner ok");
    run.stderr()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The counters of `level` that show its tuning, in [`LEVELS`]' order.
fn of(level: &str, c: &HashMap<String, u64>) -> Vec<u64> {
    let names = LEVELS.iter().find(|(l, _)| *l == level).unwrap().1;
    names
        .iter()
        .map(|n| *c.get(*n).unwrap_or_else(|| panic!("no {n} in the report")))
        .collect()
}

/// A level and its counters under two settings.
type Row = (String, Vec<u64>, Vec<u64>);

/// Runs every level under `a` and `b`; returns, per level, the two sets of
/// counters, and the levels where they were the same.
fn compare(a: (&str, &str), b: (&str, &str)) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut same = Vec::new();
    for (level, names) in LEVELS {
        let ca = of(level, &counters(level, &[a]));
        let cb = of(level, &counters(level, &[b]));
        if ca == cb {
            same.push(format!(
                "{level}: {names:?} = {ca:?} under {}={} and {}={}",
                a.0, a.1, b.0, b.1
            ));
        }
        rows.push((level.to_string(), ca, cb));
    }
    (rows, same)
}

/// PCPALLOC_FREE_HIGH_THRESHOLD=batch against 5batch: a lower threshold
/// means more free_high drains at every level — the bins' and the class
/// lists' free_high counters, and what the parked slabs and the huge
/// cache give back (slabs made again, cache hits lost).
#[test]
fn free_high_threshold_reaches_every_level() {
    if !have_preload_lib() {
        return skip("no libpcpalloc.so to preload");
    }
    let t = "PCPALLOC_FREE_HIGH_THRESHOLD";
    let (rows, same) = compare((t, "batch"), (t, "5batch"));
    assert!(same.is_empty(), "the threshold did not reach: {same:#?}");
    for (level, batch, five) in &rows {
        match level.as_str() {
            "bins" | "lists" => assert!(
                batch[0] > five[0],
                "{level}: free_high {} under batch, {} under 5batch",
                batch[0],
                five[0]
            ),
            "park" => assert!(batch[0] > five[0], "{level}: slabs made {batch:?} {five:?}"),
            "huge" => assert!(batch[0] < five[0], "{level}: cache hits {batch:?} {five:?}"),
            _ => unreachable!(),
        }
    }
}

/// PCPALLOC_HEURISTICS=base against all: with every heuristic off each
/// level is a cache of fixed size without free_high — no free_high on the
/// bins and the class lists, fewer parked slabs reused, fewer huge cache
/// hits.
#[test]
fn heuristics_base_reaches_every_level() {
    if !have_preload_lib() {
        return skip("no libpcpalloc.so to preload");
    }
    let h = "PCPALLOC_HEURISTICS";
    let (rows, same) = compare((h, "base"), (h, "all"));
    assert!(
        same.is_empty(),
        "the heuristics' switch did not reach: {same:#?}"
    );
    for (level, base, all) in &rows {
        match level.as_str() {
            "bins" | "lists" => assert_eq!(base[0], 0, "{level}: free_high under base"),
            "park" => assert!(base[0] > all[0], "{level}: slabs made {base:?} {all:?}"),
            "huge" => assert!(base[0] < all[0], "{level}: cache hits {base:?} {all:?}"),
            _ => unreachable!(),
        }
    }
}

/// PCPALLOC_HIGH_FRACTION=8 against 0 (auto-tune): a manual fraction
/// fixes the pagesets' high, and so every level's — the bins and parked
/// slabs at their floor, the huge cache at its 32 MiB.
#[test]
fn high_fraction_reaches_every_level() {
    if !have_preload_lib() {
        return skip("no libpcpalloc.so to preload");
    }
    let f = "PCPALLOC_HIGH_FRACTION";
    let (rows, same) = compare((f, "8"), (f, "0"));
    assert!(
        same.is_empty(),
        "the high fraction did not reach: {same:#?}"
    );
    for (level, fixed, tuned) in &rows {
        match level.as_str() {
            "park" => assert!(
                fixed[0] > tuned[0],
                "{level}: slabs made {fixed:?} {tuned:?}"
            ),
            "huge" => assert!(
                fixed[0] < tuned[0],
                "{level}: cache hits {fixed:?} {tuned:?}"
            ),
            _ => {}
        }
    }
}
