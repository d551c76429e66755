//! Issue 19, transparent huge pages: `PCPALLOC_THP` decides whether the
//! heap's pageblocks are huge pages, and `huge_page_bytes` reports them in
//! agreement with the kernel's own count (smaps_rollup's AnonHugePages).
//! Skipped where the kernel has no THP or has it switched off.

mod support;

use support::*;

/// The figures tests/c/thp_policy.c prints, in KiB.
struct Figures {
    heap: u64,
    rollup: u64,
    stat: u64,
}

/// Runs C program `name` under pcpalloc, checks it ends with "NAME ok",
/// and returns the `FIELD value` figures it printed for `fields`, in order.
fn figures<const N: usize>(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
    fields: [&str; N],
) -> [u64; N] {
    let run = on_pcpalloc(name, args, env, LONG);
    run.assert_says(&format!("{name} ok"));
    let out = run.stdout();
    fields.map(|f| {
        out.lines()
            .find_map(|l| l.strip_prefix(f)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {f} in\n{}", run.describe()))
    })
}

fn thp_policy(policy: &str, mib: u64, wait: &str) -> Figures {
    let [heap, rollup, stat] = figures(
        "thp_policy",
        &[&mib.to_string(), wait],
        &[("PCPALLOC_THP", policy)],
        ["heap_kib", "rollup_kib", "stat_kib"],
    );
    Figures { heap, rollup, stat }
}

/// `never`: no huge page in the heap, even where the system would give
/// some (`enabled` = always): the report says 0 and so does the kernel.
#[test]
fn never_keeps_the_heap_in_small_pages() {
    if !thp_available() {
        return;
    }
    let f = thp_policy("never", 96, "0");
    assert_eq!(f.stat, 0, "huge_page_bytes under never");
    assert!(
        f.rollup <= 4096,
        "{} KiB in huge pages under never",
        f.rollup
    );
}

/// `always`: the heap's pageblocks are huge pages from the first touch,
/// and the report's count is the kernel's (our mappings are the process's
/// only huge pages, up to the odd pageblock of a libc mapping).
#[test]
fn always_backs_the_heap_with_huge_pages_and_counts_them() {
    if !thp_available() {
        return;
    }
    let f = thp_policy("always", 96, "0");
    assert!(
        f.stat * 10 >= f.heap * 8,
        "only {} of {} KiB in huge pages under always",
        f.stat,
        f.heap
    );
    assert!(
        f.stat <= f.rollup,
        "huge_page_bytes {} KiB > AnonHugePages {} KiB",
        f.stat,
        f.rollup
    );
    assert!(
        f.rollup - f.stat <= 4096,
        "AnonHugePages {} KiB, huge_page_bytes {} KiB: the report misses some",
        f.rollup,
        f.stat
    );
}

/// `dense` (the default): a small heap stays in 4 KiB pages, as glibc's
/// (a small program's RSS does not double); a heap past 64 MiB gets huge
/// pages, and the tick collapses the pageblocks faulted in before, so
/// nearly all of it ends up huge. Only the background thread's ticks
/// collapse (the program only sleeps while it waits), so the large heap
/// asks for the thread (`PCPALLOC_BACKGROUND=1`).
#[test]
fn dense_gives_huge_pages_to_large_heaps_only() {
    if !thp_available() {
        return;
    }
    let small = thp_policy("dense", 16, "0");
    assert_eq!(small.stat, 0, "a 16 MiB heap has huge pages under dense");
    let [heap, rollup, stat] = figures(
        "thp_policy",
        &["192", "8"],
        &[("PCPALLOC_THP", "dense"), ("PCPALLOC_BACKGROUND", "1")],
        ["heap_kib", "rollup_kib", "stat_kib"],
    );
    let large = Figures { heap, rollup, stat };
    assert!(
        large.stat * 100 >= large.heap * 85,
        "only {} of {} KiB in huge pages under dense after the tick's collapses",
        large.stat,
        large.heap
    );
}

/// `dense` gives huge pages to small objects' pageblocks only: 192 MiB of
/// 256 KiB blocks, every page written, stay in 4 KiB pages (a buffer
/// touched at its ends faults in 4 KiB, not 2 MiB: blocks of 16 KiB-4 MiB
/// ran 3.4x slower with huge pageblocks), where `always` makes most of them
/// huge.
#[test]
fn dense_keeps_page_granular_blocks_in_small_pages() {
    if !thp_available() {
        return;
    }
    let blocks = |policy: &str| {
        let [heap, stat] = figures(
            "thp_blocks",
            &["192"],
            &[("PCPALLOC_THP", policy)],
            ["heap_kib", "stat_kib"],
        );
        (heap, stat)
    };
    let (heap, dense) = blocks("dense");
    assert!(
        dense * 10 <= heap,
        "{dense} of {heap} KiB of page-granular blocks in huge pages under dense"
    );
    let (heap, always) = blocks("always");
    assert!(
        always * 2 >= heap,
        "only {always} of {heap} KiB in huge pages under always"
    );
}

/// `dense` gives huge pages to long-lived small objects only: rounds of
/// 256-byte objects that all die young, the last one 144 MiB, stay in 4
/// KiB pages (their class is found short-lived and takes reclaimable
/// pageblocks: memory churned through would pay a 2 MiB fault per fresh
/// pageblock, sh6bench 1.2-1.4x its time), where grouping by mobility alone
/// makes them huge once the heap passes 64 MiB.
#[test]
fn dense_keeps_churned_small_objects_in_small_pages() {
    if !thp_available() {
        return;
    }
    let churn = |grouping: &str| {
        let [heap, stat] = figures(
            "thp_churn",
            &["144"],
            &[("PCPALLOC_THP", "dense"), ("PCPALLOC_GROUPING", grouping)],
            ["heap_kib", "stat_kib"],
        );
        (heap, stat)
    };
    let (heap, by_lifetime) = churn("lifetime");
    assert!(
        by_lifetime * 10 <= heap,
        "{by_lifetime} of {heap} KiB of churned objects in huge pages, grouped by lifetime"
    );
    let (heap, by_mobility) = churn("mobility");
    assert!(
        by_mobility * 4 >= heap,
        "only {by_mobility} of {heap} KiB in huge pages grouped by mobility alone"
    );
}

/// A bad value gets one line on stderr and the default.
#[test]
fn a_bad_policy_falls_back_to_the_default() {
    let run = on_pcpalloc(
        "thp_policy",
        &["8", "0"],
        &[("PCPALLOC_THP", "sometimes")],
        QUICK,
    );
    run.assert_says("thp_policy ok");
    assert!(run.stderr().contains("PCPALLOC_THP"), "{}", run.describe());
}
