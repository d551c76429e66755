//! The buddy zone against a simple model: random allocation/free sequences
//! of mixed orders and migratetypes, the memory limit, fragmentation
//! under seed 004's stealing rules, and the dirty limit.

use std::collections::BTreeMap;

use pcpalloc::internals::{desc_of, page_addr, page_flags};
use pcpalloc::internals::{Grow, StealRules, Zone, ZoneConfig, NO_LIMIT};

mod support;
use pcpalloc::internals::{MigrateType, Page, PageKind};
use pcpalloc::internals::{MAX_ORDER_PAGES, MAX_PAGE_ORDER, PAGEBLOCK_ORDER, PAGE_SIZE};
use proptest::prelude::*;
use support::zone::TestZone;

impl TestZone {
    fn new(limit: usize, steal: StealRules) -> TestZone {
        let mut cfg = ZoneConfig::with_limit(limit);
        cfg.steal = steal;
        TestZone::with_config(&cfg)
    }
}

/// An allocation as the runtime makes it: if the zone says no, the free
/// memory it holds goes back to the OS (and out of the budget) and the
/// request is retried once.
fn alloc(z: &Zone, order: u32, mt: MigrateType) -> Option<*mut Page> {
    let mut p = z.alloc(order, mt);
    if p.is_null() && z.release_idle(0, 0) > 0 {
        p = z.alloc(order, mt);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the block is ours now.
    unsafe { (*p).set_kind(PageKind::Large) };
    Some(p)
}

fn free(z: &Zone, p: *mut Page, order: u32) {
    // SAFETY: p was allocated from z with this order and is unused.
    unsafe {
        (*p).flags = 0;
        z.free(p, order);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u32, u8),
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u32..=3, 0u8..3).prop_map(|(o, m)| Op::Alloc(o, m)),
        1 => (4u32..=MAX_PAGE_ORDER, 0u8..3).prop_map(|(o, m)| Op::Alloc(o, m)),
        5 => any::<usize>().prop_map(Op::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn buddy_matches_model(ops in prop::collection::vec(op(), 1..300)) {
        let z = TestZone::new(32 << 20, StealRules::SEED_004);
        // Model: live blocks by address -> (order, byte pattern).
        let mut live: BTreeMap<usize, (u32, *mut Page)> = BTreeMap::new();
        let mut used_pages = 0usize;
        for op in ops {
            match op {
                Op::Alloc(order, m) => {
                    let mt = MigrateType::from_index(m as usize);
                    if let Some(p) = alloc(&z, order, mt) {
                        let a = page_addr(p);
                        let len = PAGE_SIZE << order;
                        prop_assert_eq!(a % len, 0, "block not aligned to its size");
                        // No overlap with any live block.
                        if let Some((&b, &(bo, _))) = live.range(..a + len).next_back() {
                            prop_assert!(b + (PAGE_SIZE << bo) <= a, "blocks overlap");
                        }
                        // SAFETY: the block is ours; write its first and last byte.
                        unsafe {
                            (a as *mut u8).write(0xAB);
                            ((a + len - 1) as *mut u8).write(0xCD);
                        }
                        live.insert(a, (order, p));
                        used_pages += 1 << order;
                    }
                }
                Op::Free(i) => {
                    if live.is_empty() { continue; }
                    let key = *live.keys().nth(i % live.len()).unwrap();
                    let (order, p) = live.remove(&key).unwrap();
                    // SAFETY: still ours: the pattern must be intact.
                    unsafe {
                        prop_assert_eq!((key as *const u8).read(), 0xAB);
                        prop_assert_eq!(((key + (PAGE_SIZE << order) - 1) as *const u8).read(), 0xCD);
                    }
                    free(&z, p, order);
                    used_pages -= 1 << order;
                }
            }
            let walk = z.check_invariants();
            let snap = z.snapshot();
            prop_assert_eq!(walk.used, used_pages);
            prop_assert_eq!(snap.free, snap.managed - used_pages);
        }
        for (_, (order, p)) in std::mem::take(&mut live) {
            free(&z, p, order);
        }
        z.check_invariants();
        let snap = z.snapshot();
        prop_assert_eq!(snap.free, snap.managed);
        prop_assert_eq!(snap.nr_free[MAX_PAGE_ORDER as usize] * MAX_ORDER_PAGES, snap.managed,
            "not everything merged back into order-10 blocks");
    }
}

#[test]
fn memory_limit_fails_cleanly_and_recovers() {
    let z = TestZone::new(8 << 20, StealRules::SEED_004);
    let mut blocks = Vec::new();
    while let Some(p) = alloc(&z, 0, MigrateType::Movable) {
        blocks.push(p);
        assert!(blocks.len() <= 2048, "allocated past the limit");
    }
    let snap = z.snapshot();
    let descriptors = snap.managed / MAX_ORDER_PAGES * (MAX_ORDER_PAGES * 64);
    assert_eq!(
        blocks.len() * PAGE_SIZE + descriptors,
        8 << 20,
        "the whole 8 MiB should be usable, less the page descriptors"
    );
    assert_eq!(snap.budget_used, 8 << 20);
    assert_eq!(snap.charged, blocks.len());
    assert!(snap.counters.alloc_fail >= 1);
    assert!(alloc(&z, 3, MigrateType::Movable).is_none());
    // Freeing makes allocation work again.
    let p = blocks.pop().unwrap();
    free(&z, p, 0);
    let q = alloc(&z, 0, MigrateType::Unmovable).expect("allocation after a free");
    blocks.push(q);
    for p in blocks.drain(..) {
        free(&z, p, 0);
    }
    z.check_invariants();
    let snap = z.snapshot();
    assert_eq!(snap.free, snap.managed);
    assert_eq!(
        snap.nr_free[MAX_PAGE_ORDER as usize],
        snap.managed / MAX_ORDER_PAGES,
        "nothing leaked: only whole 4 MiB blocks"
    );
    // Given back to the OS, free memory costs the budget only its
    // descriptors; taken offline, nothing at all.
    z.release_idle(0, 0);
    assert_eq!(z.snapshot().budget_used, descriptors);
    z.shrink(pcpalloc::internals::Shrink::All, usize::MAX);
    let snap = z.snapshot();
    assert_eq!((snap.budget_used, snap.managed, snap.charged), (0, 0, 0));
    z.check_invariants();
}

/// A tiny deterministic generator (xorshift64*), so the fragmentation test
/// replays the same sequence under both rule sets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct HighAllocResult {
    pageblocks: usize,
    success: usize,
    fallbacks: u64,
    fragmenting_unmovable: u64,
    unmovable_in_movable: u64,
    claims: u64,
}

/// stress-highalloc in miniature (mmtests, as seed 004 ran it): fill the
/// zone with a 9:1 mix of MOVABLE and UNMOVABLE small allocations, churn
/// it (free a third of the movable pages, refill), free every MOVABLE
/// allocation, then ask for pageblock-order blocks until none is left.
fn stress_highalloc(steal: StealRules) -> HighAllocResult {
    const LIMIT: usize = 128 << 20;
    let z = TestZone::new(LIMIT, steal);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut movable: Vec<(*mut Page, u32)> = Vec::new();
    let mut unmovable: Vec<(*mut Page, u32)> = Vec::new();
    let fill = |rng: &mut Rng, movable: &mut Vec<_>, unmovable: &mut Vec<_>| loop {
        let order = if rng.below(8) == 0 {
            rng.below(4) as u32
        } else {
            0
        };
        let mt = if rng.below(10) == 0 {
            MigrateType::Unmovable
        } else {
            MigrateType::Movable
        };
        match alloc(&z, order, mt) {
            Some(p) if mt == MigrateType::Movable => movable.push((p, order)),
            Some(p) => unmovable.push((p, order)),
            None => break,
        }
    };
    fill(&mut rng, &mut movable, &mut unmovable);
    for _ in 0..8 {
        for _ in 0..movable.len() / 3 {
            let i = rng.below(movable.len());
            let (p, o) = movable.swap_remove(i);
            free(&z, p, o);
        }
        // Some unmovable objects die too, as slabs empty.
        for _ in 0..unmovable.len() / 10 {
            let i = rng.below(unmovable.len());
            let (p, o) = unmovable.swap_remove(i);
            free(&z, p, o);
        }
        fill(&mut rng, &mut movable, &mut unmovable);
    }
    for (p, o) in movable.drain(..) {
        free(&z, p, o);
    }
    z.check_invariants();
    let pageblocks = z.snapshot().managed / 512;
    let mut success = 0;
    let mut got = Vec::new();
    while let Some(p) = alloc(&z, 9, MigrateType::Movable) {
        success += 1;
        got.push(p);
    }
    let c = z.snapshot().counters;
    for p in got {
        free(&z, p, 9);
    }
    for (p, o) in unmovable.drain(..) {
        free(&z, p, o);
    }
    z.check_invariants();
    HighAllocResult {
        pageblocks,
        success,
        fallbacks: c.extfrag_fallback,
        fragmenting_unmovable: c.extfrag_fragmenting[MigrateType::Unmovable as usize],
        unmovable_in_movable: c.extfrag_in_movable[MigrateType::Unmovable as usize],
        claims: c.pageblock_claims,
    }
}

#[test]
fn seed_004_stealing_keeps_unmovable_out_of_movable_pageblocks() {
    let seed = stress_highalloc(StealRules::SEED_004);
    let base = stress_highalloc(StealRules::BASELINE);
    println!("stress-highalloc (128 MiB zone)   baseline  seed-004");
    println!(
        "  pageblocks                      {:>8}  {:>8}",
        base.pageblocks, seed.pageblocks
    );
    println!(
        "  order-9 successes               {:>8}  {:>8}",
        base.success, seed.success
    );
    println!(
        "  extfrag fallbacks               {:>8}  {:>8}",
        base.fallbacks, seed.fallbacks
    );
    println!(
        "  fragmenting for unmovable       {:>8}  {:>8}",
        base.fragmenting_unmovable, seed.fragmenting_unmovable
    );
    println!(
        "  unmovable placed with movable   {:>8}  {:>8}",
        base.unmovable_in_movable, seed.unmovable_in_movable
    );
    println!(
        "  pageblock claims                {:>8}  {:>8}",
        base.claims, seed.claims
    );
    assert!(
        seed.unmovable_in_movable < base.unmovable_in_movable,
        "seed-004 rules should place fewer unmovable fallbacks in movable pageblocks"
    );
    assert!(seed.fragmenting_unmovable < base.fragmenting_unmovable);
}

/// The pages of a 4 MiB block.
const BLOCK: usize = MAX_ORDER_PAGES;

/// A zone with the dirty limit at `ratio` percent, and `n` written blocks
/// of `order` handed out.
fn zone_with_blocks(ratio: usize, order: u32, n: usize) -> (TestZone, Vec<*mut Page>) {
    let mut cfg = ZoneConfig::with_limit(NO_LIMIT);
    cfg.size = 1 << 30;
    cfg.dirty_ratio = ratio;
    let z = TestZone::with_config(&cfg);
    let blocks = (0..n)
        .map(|_| alloc(&z, order, MigrateType::Movable).expect("a block"))
        .collect();
    (z, blocks)
}

/// Whether the free block at `addr` was given back to the OS.
fn is_clean(addr: usize) -> bool {
    // SAFETY: the head descriptor of a free block of a live zone.
    unsafe { (*desc_of(addr)).flags & page_flags::CLEAN != 0 }
}

/// The dirty limit, scripted: with 24 written 4 MiB blocks in use and the
/// ratio at 100%, freeing 8 leaves 8 resident free blocks for 16 in use —
/// under the limit, nothing goes back; two ticks later (the use of 24 at
/// its peak forgotten), freeing 6 more leaves 14 for 10 — over it, so
/// whole free blocks go back, coldest first, until at most 7/8 of the
/// limit (8960 pages) stay resident: 6 blocks, the first six freed. At
/// ratio 0 nothing goes back.
#[test]
fn dirty_limit_gives_whole_pageblocks_back_past_the_ratio() {
    let (z, mut blocks) = zone_with_blocks(100, MAX_PAGE_ORDER, 24);
    let clean_before = z.snapshot().clean_free;
    let first_freed: Vec<usize> = blocks[..6].iter().map(|&p| page_addr(p)).collect();
    let then_freed: Vec<usize> = blocks[6..14].iter().map(|&p| page_addr(p)).collect();
    for p in blocks.drain(..8) {
        free(&z, p, MAX_PAGE_ORDER);
    }
    assert_eq!(z.dirty_free_pages(), 8 * BLOCK);
    assert_eq!(z.dirty_limit(), 16 * BLOCK, "100% of the 16 blocks in use");
    assert_eq!(z.balance_dirty(), 0, "under the limit");
    z.advance_epoch();
    assert_eq!(
        z.dirty_limit(),
        16 * BLOCK,
        "still: 8 short of the peak of 24, and 8 MiB"
    );
    z.advance_epoch();
    for p in blocks.drain(..6) {
        free(&z, p, MAX_PAGE_ORDER);
    }
    assert_eq!(z.dirty_limit(), 10 * BLOCK);
    assert_eq!(z.balance_dirty(), 6 * BLOCK * PAGE_SIZE);
    let snap = z.snapshot();
    assert_eq!(snap.counters.balance_dirty, 1);
    assert_eq!(
        snap.counters.balance_dirty_bytes,
        (6 * BLOCK * PAGE_SIZE) as u64
    );
    assert_eq!(snap.counters.released_bytes, (6 * BLOCK * PAGE_SIZE) as u64);
    assert_eq!(z.dirty_free_pages(), 8 * BLOCK);
    assert_eq!(snap.charged, 18 * BLOCK, "10 in use and 8 resident free");
    assert_eq!(snap.clean_free, clean_before + 6 * BLOCK);
    for &a in &first_freed {
        assert!(is_clean(a), "block {a:#x}, among the coldest, went back");
    }
    for &a in &then_freed {
        assert!(!is_clean(a), "block {a:#x}, freed later, stays resident");
    }
    z.check_invariants();
    for p in blocks {
        free(&z, p, MAX_PAGE_ORDER);
    }

    // Off: the same frees keep everything resident.
    let (z, mut blocks) = zone_with_blocks(0, MAX_PAGE_ORDER, 24);
    for p in blocks.drain(..14) {
        free(&z, p, MAX_PAGE_ORDER);
    }
    assert_eq!(z.dirty_limit(), usize::MAX);
    assert_eq!(z.balance_dirty(), 0);
    assert_eq!(z.dirty_free_pages(), 14 * BLOCK);
    assert_eq!(z.snapshot().counters.balance_dirty, 0);
    for p in blocks {
        free(&z, p, MAX_PAGE_ORDER);
    }
}

/// Past the limit in pieces smaller than a pageblock, nothing can go back
/// at once: the zone tries once, then not again until another pageblock's
/// worth of free memory is resident, or the next tick.
#[test]
fn dirty_limit_unmet_by_small_blocks_waits_for_a_pageblock_more() {
    const QUARTER: u32 = PAGEBLOCK_ORDER - 2;
    let q = 1usize << QUARTER;
    let (z, blocks) = zone_with_blocks(100, QUARTER, 128);
    // The quarters of each pageblock whose four quarters are all ours.
    let mut by_pageblock: BTreeMap<usize, Vec<*mut Page>> = BTreeMap::new();
    for &p in &blocks {
        by_pageblock.entry(page_addr(p) >> 21).or_default().push(p);
    }
    let mut kept: Vec<*mut Page> = Vec::new();
    let mut whole: Vec<Vec<*mut Page>> = Vec::new();
    for (_, mut v) in by_pageblock {
        if v.len() == 4 {
            v.sort_by_key(|&p| page_addr(p));
            whole.push(v);
        } else {
            kept.extend(v);
        }
    }
    assert!(whole.len() >= 24, "{} whole pageblocks", whole.len());
    // Three quarters of each freed, the first kept: no pageblock is free
    // whole, so there is nothing to give back at once.
    for v in &whole {
        for &p in &v[1..] {
            free(&z, p, QUARTER);
        }
    }
    let dirty = z.dirty_free_pages();
    assert_eq!(dirty, whole.len() * 3 * q);
    // Two ticks: the use at its peak, all 128 handed out, is forgotten.
    z.advance_epoch();
    z.advance_epoch();
    assert!(dirty > z.dirty_limit());
    assert_eq!(z.balance_dirty(), 0);
    assert_eq!(z.snapshot().counters.balance_dirty, 1, "one try");
    assert_eq!(z.balance_dirty(), 0);
    assert_eq!(z.snapshot().counters.balance_dirty, 1, "no second try");
    // Two pageblocks free whole: less than a pageblock's worth more, so
    // still no try.
    free(&z, whole[0][0], QUARTER);
    free(&z, whole[1][0], QUARTER);
    assert_eq!(z.balance_dirty(), 0);
    assert_eq!(z.snapshot().counters.balance_dirty, 1);
    // Two more: a pageblock's worth more than at the try; the four whole
    // free pageblocks go back.
    free(&z, whole[2][0], QUARTER);
    free(&z, whole[3][0], QUARTER);
    assert_eq!(z.dirty_free_pages(), dirty + 4 * q);
    assert_eq!(z.balance_dirty(), 4 * 4 * q * PAGE_SIZE);
    let c = z.snapshot().counters;
    assert_eq!(
        (c.balance_dirty, c.balance_dirty_bytes),
        (2, (16 * q * PAGE_SIZE) as u64)
    );
    // Still over, in small pieces only: no try until the tick.
    assert_eq!(z.balance_dirty(), 0);
    assert_eq!(z.snapshot().counters.balance_dirty, 2);
    z.advance_epoch();
    assert_eq!(z.balance_dirty(), 0);
    assert_eq!(
        z.snapshot().counters.balance_dirty,
        3,
        "the tick allows one more try"
    );
    z.check_invariants();
    for v in &whole[4..] {
        free(&z, v[0], QUARTER);
    }
    for p in kept {
        free(&z, p, QUARTER);
    }
}

/// Review: a release for the dirty limit stops once `want` bytes of
/// *blocks* were madvised, but a free 4 MiB block that merged a released
/// (clean) half with a written one has only half its pages resident, so
/// the release leaves the zone over its limit while 16 wholly resident free
/// 4 MiB blocks are still there — and then `retry_at` takes that for
/// "the rest is in pieces" and suppresses further tries until the tick.
#[test]
fn dirty_limit_is_met_when_resident_whole_pageblocks_remain() {
    const HALF: u32 = MAX_PAGE_ORDER - 1;
    // 16 blocks stay in use, 16 are freed written.
    let (z, mut blocks) = zone_with_blocks(100, MAX_PAGE_ORDER, 32);
    let written = blocks.split_off(16);
    // 8 free 4 MiB blocks with one half released, one half written.
    let mut halves = Vec::new();
    while halves.len() < 8 {
        let a = alloc(&z, HALF, MigrateType::Movable).expect("a half");
        let b = alloc(&z, HALF, MigrateType::Movable).expect("a half");
        assert_eq!(page_addr(a) ^ page_addr(b), PAGE_SIZE << HALF, "buddies");
        halves.push((a, b));
    }
    for &(a, _) in &halves {
        free(&z, a, HALF);
    }
    assert!(z.release_idle(0, 0) > 0);
    for &(_, b) in &halves {
        free(&z, b, HALF);
    }
    for p in written {
        free(&z, p, MAX_PAGE_ORDER);
    }
    let dirty = z.dirty_free_pages();
    assert_eq!(dirty, 16 * BLOCK + 8 * BLOCK / 2);
    // Two ticks: the use at its peak is forgotten.
    z.advance_epoch();
    z.advance_epoch();
    assert_eq!(z.dirty_limit(), 16 * BLOCK);
    let released = z.balance_dirty();
    let after = z.dirty_free_pages();
    eprintln!(
        "dirty {dirty} -> {after} pages, limit {}, released {} MiB (counted), {} MiB resident given back",
        z.dirty_limit(),
        released >> 20,
        ((dirty - after) * PAGE_SIZE) >> 20
    );
    // The next free's check: nothing, though 16 resident free 4 MiB
    // blocks would meet the limit (retry_at waits for the tick).
    let again = z.balance_dirty();
    assert!(
        after <= z.dirty_limit(),
        "still over the limit ({after} > {}) with whole resident free pageblocks left; \
         the next check released {again} bytes",
        z.dirty_limit()
    );
    blocks.clear();
}

/// A zone of one 4 MiB block (what its budget holds), all of it handed
/// out as blocks of `order` but what the zone keeps; returns the zone and
/// the blocks by address.
fn one_block_handed_out(order: u32) -> (TestZone, Vec<*mut Page>) {
    let z = TestZone::with_config(&ZoneConfig::with_limit(MAX_ORDER_PAGES * PAGE_SIZE));
    let mut all = Vec::new();
    while let Some(p) = alloc(&z, order, MigrateType::Movable) {
        all.push(p);
    }
    all.sort_by_key(|&p| page_addr(p));
    (z, all)
}

/// From order 4 up a request takes the lowest-addressed of the first 16
/// blocks on its list that are as resident as the first, not the first
/// (LIFO: the last freed). Scripted on a zone of one 4 MiB block, all of
/// it handed out as order-4 blocks (but what the zone keeps): 21 of them, their buddies held so
/// nothing merges, are freed in rising address order, the lowest unwritten
/// (clean: it goes to the tail). The list then reads a20 … a1, a0 (clean),
/// and the requests take a5, a4, a3, a2, a1 — each the lowest of the 16 at
/// the front — then a6 … a20, whose front ends at the clean block, and the
/// clean one last. Order 3 stays LIFO.
#[test]
fn high_orders_take_the_lowest_address_at_the_front() {
    const ORDER: u32 = 4;
    let (z, all) = one_block_handed_out(ORDER);
    assert!(all.len() >= 48, "{} blocks", all.len());
    let held = |a: usize| all.iter().any(|&p| page_addr(p) == a);
    // The lower halves of 21 pairs, the upper halves held, and the pair
    // beside held too: a free neighbour would put the freed block at the
    // tail (buddy_merge_likely).
    let step = PAGE_SIZE << ORDER;
    let freed: Vec<*mut Page> = all
        .iter()
        .copied()
        .filter(|&p| {
            let a = page_addr(p);
            let beside = (a & !(2 * step - 1)) ^ (2 * step);
            a & step == 0 && held(a ^ step) && held(beside) && held(beside + step)
        })
        .take(21)
        .collect();
    assert_eq!(freed.len(), 21);
    let a: Vec<usize> = freed.iter().map(|&p| page_addr(p)).collect();
    // SAFETY: freed[0] is ours and unused; never written, it goes back clean.
    unsafe {
        let p0 = freed[0];
        (*p0).flags = page_flags::CLEAN;
        z.free(p0, ORDER);
    }
    for &p in &freed[1..] {
        free(&z, p, ORDER);
    }
    assert_eq!(z.snapshot().nr_free[ORDER as usize], 21, "nothing merged");
    let mut expect: Vec<usize> = (1..=5).rev().collect();
    expect.extend(6..=20);
    expect.push(0);
    for (i, &want) in expect.iter().enumerate() {
        let p = alloc(&z, ORDER, MigrateType::Movable).expect("a block");
        let got = a.iter().position(|&x| x == page_addr(p));
        assert_eq!(
            got,
            Some(want),
            "request {i} took block {got:?}, not a{want}"
        );
    }
    z.check_invariants();

    // Order 3: the last freed comes first.
    for &p in &freed[..4] {
        // SAFETY: taken back above, unused; split into two order-3 halves.
        unsafe {
            (*p).flags = 0;
            z.free(p, ORDER);
        }
    }
    let halves: Vec<*mut Page> = (0..8)
        .map(|_| alloc(&z, 3, MigrateType::Movable).expect("a block"))
        .collect();
    let lone: Vec<*mut Page> = halves.iter().copied().step_by(2).collect();
    for &p in &lone {
        free(&z, p, 3);
    }
    let p = alloc(&z, 3, MigrateType::Movable).expect("a block");
    assert_eq!(page_addr(p), page_addr(lone[3]), "order 3 is LIFO");
}

/// A block above 256 KiB sought as a run of adjacent free blocks takes the
/// lowest-addressed run the scan finds, not the first. Scripted: in a
/// 2 MiB stretch of order-6 blocks (256 KiB) b0 … b7, all handed out,
/// b1, b2, b5 and b6 are freed in that order (their buddies held, so none
/// merges): two runs of 512 KiB, b1–b2 and b5–b6, the second at the front
/// of the list. A 288 KiB request (72 pages) is carved from b1.
#[test]
fn a_large_run_is_the_lowest_addressed_found() {
    const ORDER: u32 = 6;
    let (z, all) = one_block_handed_out(ORDER);
    let step = PAGE_SIZE << ORDER;
    let held = |a: usize| all.iter().any(|&p| page_addr(p) == a);
    let base = all
        .iter()
        .map(|&p| page_addr(p))
        .find(|&a| a % (8 * step) == 0 && (0..8).all(|i| held(a + i * step)))
        .expect("eight blocks in a row");
    for i in [1, 2, 5, 6] {
        let p = desc_of(base + i * step);
        free(&z, p, ORDER);
    }
    let p = z.alloc_exact(72, 0, MigrateType::Movable, Grow::No);
    assert!(!p.is_null());
    assert_eq!(
        (page_addr(p) - base) / step,
        1,
        "carved from b{}, not b1",
        (page_addr(p) - base) / step
    );
    // SAFETY: the 72 pages are ours, unused, their descriptors None.
    unsafe { z.free_exact(p, 72) };
    z.check_invariants();
}

/// Review (2026-12-02): the run search above 256 KiB preferred the lowest
/// address over residency, so under a memory limit it took a clean run,
/// whose charge failed, and the request failed though a resident run of
/// the same size was free. Eight order-7 blocks in a row: b1–b3 freed
/// clean (never written, so uncharged), b5–b7 freed written; room left in
/// the budget for 100 pages. A 300-page request takes the resident run.
#[test]
fn a_large_run_prefers_resident_memory() {
    let mut cfg = ZoneConfig::with_limit(64 << 20);
    cfg.dirty_ratio = 0;
    let z = TestZone::with_config(&cfg);
    let mt = MigrateType::Movable;
    let b: Vec<*mut Page> = (0..8).map(|_| z.alloc(7, mt)).collect();
    let step = PAGE_SIZE << 7;
    for (i, &p) in b.iter().enumerate() {
        assert_eq!(page_addr(p), page_addr(b[0]) + i * step, "b{i} in a row");
    }
    for (i, &p) in b.iter().enumerate().filter(|&(i, _)| i != 0 && i != 4) {
        // SAFETY: ours, unused; the first three never written.
        unsafe {
            (*p).flags = if i < 4 { page_flags::CLEAN } else { 0 };
            z.free(p, 7);
        }
    }
    let room = z.budget.limit() - z.budget.used();
    z.budget
        .charge(room - 100 * PAGE_SIZE)
        .expect("room")
        .keep();
    let p = z.alloc_exact(300, 0, mt, Grow::No);
    assert!(
        !p.is_null(),
        "a resident run of 384 pages is free, yet the request failed"
    );
    assert!(page_addr(p) >= page_addr(b[5]), "took the clean run");
}
