//! Issue 46, the heap profile's cost (`PCPALLOC_PROFILE`): what sampling
//! adds to a program of small objects, in counters that do not depend on
//! the machine's speed (tests/c/prof_cost.c).

mod support;

use support::*;

/// A counter of the exit report on `stderr` (`name value` lines).
fn counter(stderr: &str, name: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the report:\n{stderr}"))
}

/// A sampled small object is served as a one-page block, which its free
/// puts in the thread's large bins: the block must come from those bins
/// too. Taken from the pages each time (before), every sample's block
/// filled the bins at its free and spilled a page back to the pages —
/// 1,050 instructions a sample on larson_server, where the sample itself
/// (its stack, its record) is about 900. Now the bins serve them and
/// spill next to nothing. (glibc: no profile.)
#[test]
fn sampled_small_blocks_cycle_through_the_large_bins() {
    let dir = tempdir("profile-cost");
    let file = dir.join("cost.%p.pb");
    let r = on_pcpalloc(
        "prof_cost",
        &[],
        &[
            ("PCPALLOC_PROFILE", "64K"),
            ("PCPALLOC_PROFILE_FILE", file.to_str().unwrap()),
            ("PCPALLOC_STATS", "1"),
        ],
        QUICK,
    );
    r.assert_says("prof_cost ok");
    let err = r.stderr();
    let (samples, spilled) = (
        profile_samples(&err),
        counter(&err, "large_bin_spilled_pages"),
    );
    // 2 M allocations of 520 B on average, one sample per 64 KiB; the
    // bins spill a little as they decay (a tenth of the samples now, all
    // of them before).
    assert!(samples > 5_000, "{samples} samples\n{err}");
    assert!(
        spilled * 4 < samples,
        "{spilled} pages spilled from the large bins for {samples} samples"
    );
}

/// While sampling, a free's push gives no pop credit, and a bin out of
/// credit goes to the slow path for more: a program that frees one block
/// and allocates one in turn keeps one object on its bin, so every
/// allocation took the slow path for the credit of that one object —
/// 1.58 M slow paths for 2 M allocations before (counted with a probe on
/// the base library, which has no counter), the loop 12% slower than
/// off. Now a bin that low is refilled on top of what it holds, and its
/// credit lasts a refill's worth of allocations: 31 k slow paths, the
/// loop 3% slower than off. (glibc: no profile.)
#[test]
fn a_bin_that_holds_one_object_is_not_visited_at_each_allocation() {
    let dir = tempdir("profile-turns");
    let file = dir.join("turns.%p.pb");
    let r = on_pcpalloc(
        "prof_turns",
        &[],
        &[
            ("PCPALLOC_PROFILE", "1"),
            ("PCPALLOC_PROFILE_FILE", file.to_str().unwrap()),
            ("PCPALLOC_STATS", "1"),
        ],
        QUICK,
    );
    r.assert_says("prof_turns ok");
    let err = r.stderr();
    let slow = counter(&err, "profile_slow_paths");
    // 2 M allocations of 64 B; a bin's refill is a page of them (64).
    assert!(
        slow < 2_000_000 / 20,
        "{slow} slow paths for 2 M allocations\n{err}"
    );
}
