//! What the give-back without a thread of ours costs the zone (issue 42,
//! the thread storm): a zone given blocks handed out whole and written in
//! part, as a storm's threads write theirs, then brought down to a keep
//! (`Zone::release_down_to`, the give-back at a free or a thread's exit).

use pcpalloc::internals::{page_addr, page_flags, MigrateType, Page, PageKind, Zone, ZoneConfig};
use pcpalloc::internals::{NO_LIMIT, PAGE_SIZE};

mod support;
use support::zone::TestZone;

/// A zone of its own, without a limit.
fn test_zone() -> TestZone {
    TestZone::with_config(&ZoneConfig::with_limit(NO_LIMIT))
}

/// Takes `2 n` blocks of `order` side by side, writes the first
/// `written[i % len]` pages of the i-th of every other one (none: never
/// written) and frees those, as a program's free does (not clean): the
/// others stay in use, so the freed blocks do not merge. Returns the pages
/// written and the blocks in use, for [`free_all`].
fn churn(z: &Zone, order: u32, n: usize, written: &[usize]) -> (usize, Vec<*mut Page>) {
    let blocks: Vec<*mut Page> = (0..2 * n)
        .map(|_| {
            let p = z.alloc(order, MigrateType::Movable);
            assert!(!p.is_null());
            // SAFETY: the block is ours now.
            unsafe { (*p).set_kind(PageKind::Large) };
            p
        })
        .collect();
    let mut pages = 0;
    for (i, &p) in blocks.iter().step_by(2).enumerate() {
        let w = written[i % written.len()];
        // SAFETY: the block is ours, 2^order pages long.
        unsafe { std::ptr::write_bytes(page_addr(p) as *mut u8, 0x5a, w * PAGE_SIZE) };
        pages += w;
        // SAFETY: ours, no longer used; written, so not clean.
        unsafe {
            (*p).flags &= !page_flags::CLEAN;
            z.free(p, order);
        }
    }
    (pages, blocks.into_iter().skip(1).step_by(2).collect())
}

/// Frees the blocks `churn` left in use.
fn free_all(z: &Zone, order: u32, blocks: Vec<*mut Page>) {
    for p in blocks {
        // SAFETY: ours, unused.
        unsafe { z.free(p, order) };
    }
}

/// Free pages still charged.
fn charged_free(z: &Zone) -> usize {
    let s = z.snapshot();
    s.charged - (s.managed - s.free - s.isolated)
}

/// A block that was handed out whole and never written has nothing
/// resident: the give-back finds it so (mincore) and leaves it clean —
/// behind the resident blocks on its list, where no later give-back walks
/// past it again under the zone lock — without counting a release of
/// memory. Before, it stayed on the lists as written, uncharged but not
/// clean, and every give-back of a storm walked past it (951,000 such
/// walks in 5,000 threads).
#[test]
fn a_block_never_written_is_left_clean_by_the_give_back() {
    let z = test_zone();
    // Order 4 (64 KiB) blocks: every other one written in its first page.
    let (written, live) = churn(&z, 4, 64, &[1, 0]);
    assert_eq!(written, 32);
    let before = z.snapshot();
    let resident = z.release_down_to(0, 0);
    let after = z.snapshot();
    z.check_invariants();
    assert_eq!(resident, 32 * PAGE_SIZE, "the written pages go back");
    assert_eq!(
        after.counters.release_events - before.counters.release_events,
        32,
        "a release counted for each written block, none for the others"
    );
    assert_eq!(charged_free(&z), 0, "no free page is left charged");
    assert_eq!(
        after.clean_free, after.free,
        "every free page is clean, the never-written blocks' too (before: {} of {} clean)",
        before.clean_free, before.free
    );
    free_all(&z, 4, live);
    z.check_invariants();
}

/// What the give-back finds resident, asked for blocks close together in
/// one mincore call (`sys::measure_grouped`), is each block's own: blocks
/// a block apart, written in their first 1, 2, 3 or 4 pages, give back
/// exactly those pages; with a keep, what stays charged is at most the
/// keep (and not far under it), and what went back was written.
#[test]
fn blocks_side_by_side_give_back_their_own_written_pages() {
    let z = test_zone();
    let (written, live) = churn(&z, 3, 200, &[1, 2, 3, 4, 0]);
    assert_eq!(written, 400);
    let resident = z.release_down_to(0, 0);
    z.check_invariants();
    assert_eq!(resident, written * PAGE_SIZE);
    assert_eq!(charged_free(&z), 0);
    free_all(&z, 3, live);

    // Again, keeping 100 pages.
    let (written, live) = churn(&z, 3, 200, &[1, 2, 3, 4, 0]);
    let resident = z.release_down_to(100, 0) / PAGE_SIZE;
    z.check_invariants();
    let charged = charged_free(&z);
    assert!(
        (50..=100).contains(&charged),
        "{charged} free pages charged, keep 100"
    );
    assert!(resident <= written && resident + charged >= written);
    free_all(&z, 3, live);
}
