//! Scripted sequences on one pageset in front of a fixed test zone, with
//! the exact values the seed 000 formulas give.

use pcpalloc::internals::large_class_of as class_of;
use pcpalloc::internals::page_addr;
use pcpalloc::internals::Pageset;
use pcpalloc::internals::PAGE_SIZE;
use pcpalloc::internals::PCPF_FREE_HIGH_BATCH;
use pcpalloc::internals::{Grow, Zone, ZoneConfig};
use pcpalloc::internals::{Heuristics, Knobs};
use pcpalloc::internals::{MigrateType, Page, PageKind};

mod support;
use support::zone::TestZone;

impl TestZone {
    fn new(limit: usize) -> TestZone {
        TestZone::with_config(&ZoneConfig::with_limit(limit))
    }
}

const K: Knobs = Knobs::DEFAULT;

/// Writes a byte in each of the `pages` pages of the block at `p`, so
/// they are resident.
///
/// # Safety
/// The block is the caller's, of at least `pages` pages.
unsafe fn write_pages(p: *mut Page, pages: usize) {
    let a = page_addr(p) as *mut u8;
    for i in 0..pages {
        // SAFETY: inside the caller's block (contract).
        unsafe { a.add(i * PAGE_SIZE).write_volatile(1) };
    }
}

fn alloc(ps: &Pageset, z: &Zone, order: u32) -> *mut Page {
    let p = ps.alloc(z, order, MigrateType::Movable, &K, false);
    assert!(!p.is_null());
    // SAFETY: ours now.
    unsafe { (*p).set_kind(PageKind::Large) };
    p
}

fn free(ps: &Pageset, z: &Zone, p: *mut Page, order: u32) {
    // SAFETY: allocated from this zone with this order; the memory is dirty.
    unsafe {
        (*p).flags = 0;
        ps.free(z, p, order, &K, false);
    }
}

#[test]
fn consecutive_order0_refills_double_to_the_cap() {
    let z = TestZone::new(1 << 30); // batch 63
    let ps = Pageset::new();
    assert_eq!(z.pcp_params().batch, 63);
    let mut refills = Vec::new();
    let mut pages = Vec::new();
    for _ in 0..6000 {
        let before = ps.snapshot().1;
        pages.push(alloc(&ps, &z, 0));
        let after = ps.snapshot().1;
        if after.refills > before.refills {
            refills.push(after.alloc_zone - before.alloc_zone);
        }
    }
    assert_eq!(refills[..7], [63, 126, 252, 504, 1008, 2016, 2016]);
    let (s, c) = ps.snapshot();
    assert_eq!(s.alloc_factor, 5);
    assert_eq!(c.pgalloc, 6000);
    assert_eq!(c.alloc_zone as usize, 6000 + s.count as usize);
    for p in pages {
        free(&ps, &z, p, 0);
    }
    ps.drain(&z);
    z.check_invariants();
}

#[test]
fn second_consecutive_high_order_free_drains() {
    let z = TestZone::new(1 << 30);
    let ps = Pageset::new();
    ps.set_free_high_batch(true);
    let a = alloc(&ps, &z, 1);
    let b = alloc(&ps, &z, 1);
    let burst: Vec<_> = (0..300).map(|_| alloc(&ps, &z, 0)).collect();
    for p in burst {
        free(&ps, &z, p, 0);
    }
    let (s, c0) = ps.snapshot();
    assert!(s.flags & PCPF_FREE_HIGH_BATCH != 0);
    assert_eq!(s.free_count, 300, "300 consecutive order-0 frees");
    assert_eq!(c0.free_high, 0);
    free(&ps, &z, a, 1);
    let (_, c1) = ps.snapshot();
    assert_eq!(
        c1.free_high, 0,
        "one order-1 free after a burst must not drain"
    );
    free(&ps, &z, b, 1);
    let (s2, c2) = ps.snapshot();
    assert_eq!(
        c2.free_high, 1,
        "the second consecutive order-1 free drains"
    );
    assert!(c2.free_zone > c1.free_zone);
    // free_high keeps a batch in the pageset when the cache slice allows.
    assert!(s2.count >= 0);
    ps.drain(&z);
    z.check_invariants();
}

#[test]
fn idle_pageset_decays_to_high_min_then_expires() {
    let z = TestZone::new(1 << 30);
    let ps = Pageset::new();
    // Grow high with a burst, then give everything back.
    let pages: Vec<_> = (0..3000).map(|_| alloc(&ps, &z, 0)).collect();
    for p in pages {
        free(&ps, &z, p, 0);
    }
    let params = z.pcp_params();
    let (s, _) = ps.snapshot();
    assert!(s.high > params.high_min as i32);
    // Predict the ticks: high loses an eighth (but stays above
    // count - batch<<5) until it reaches high_min.
    let (mut high, mut count) = (s.high, s.count);
    let mut predicted = 0;
    while high > params.high_min as i32 {
        high = (count - (63 << 5))
            .max(high - (high >> 3))
            .max(params.high_min as i32);
        count = count.min(high);
        predicted += 1;
    }
    let mut ticks = 0;
    while ps.snapshot().0.high > params.high_min as i32 {
        ps.tick(&z, &K);
        ticks += 1;
        assert!(ticks <= 100);
    }
    assert_eq!(ticks, predicted);
    // Idle for PCP_EXPIRE_TICKS more: everything goes back to the zone.
    for _ in 0..3 {
        ps.tick(&z, &K);
    }
    assert_eq!(ps.snapshot().0.count, 0);
    let walk = z.check_invariants();
    assert_eq!(walk.pcp, 0);
    assert_eq!(walk.used, 0);
}

#[test]
fn idle_pages_go_back_to_the_os() {
    let z = TestZone::new(1 << 30);
    let ps = Pageset::new();
    let pages: Vec<_> = (0..2048).map(|_| alloc(&ps, &z, 0)).collect();
    for &p in &pages {
        // SAFETY: touch every page so it is resident.
        unsafe { (page_addr(p) as *mut u8).write_bytes(1, PAGE_SIZE) };
    }
    for p in pages {
        free(&ps, &z, p, 0);
    }
    assert!(ps.snapshot().0.count > 0, "the pageset caches pages");
    let mut released = 0;
    for _ in 0..6 {
        ps.tick(&z, &K);
        z.advance_epoch();
        released += z.release_idle(1, 0);
    }
    assert_eq!(ps.snapshot().0.count, 0);
    assert!(released >= 2048 * PAGE_SIZE, "released {released}");
    assert_eq!(z.snapshot().counters.released_bytes as usize, released);
    let snap = z.snapshot();
    assert_eq!(
        snap.clean_free, snap.free,
        "all free memory is non-resident"
    );
}

#[test]
fn below_high_stops_growth_and_clears_itself() {
    // 64 MiB limit: batch 3, high watermark 384 pages when full.
    let z = TestZone::new(64 << 20);
    let ps = Pageset::new();
    let p = z.pcp_params();
    assert_eq!(p.batch, 3);
    // Take almost all memory straight from the zone.
    let mut big = Vec::new();
    loop {
        let b = z.alloc(6, MigrateType::Movable);
        if b.is_null() {
            break;
        }
        // SAFETY: ours.
        unsafe { (*b).set_kind(PageKind::Large) };
        big.push(b);
    }
    // Give back a little so the pageset can refill from below the mark.
    for b in big.drain(..2) {
        // SAFETY: ours, order 6.
        unsafe { z.free(b, 6) };
    }
    assert!(z.available_pages() < z.snapshot().wmark[2]);
    let first = alloc(&ps, &z, 0);
    assert!(z.below_high(), "BELOW_HIGH detected on the allocation path");
    let high_after_first = ps.snapshot().0.high;
    // Empty the list and refill again: high must not grow.
    let mut small = vec![first];
    while ps.snapshot().0.count > 0 {
        small.push(alloc(&ps, &z, 0));
    }
    small.push(alloc(&ps, &z, 0));
    assert_eq!(
        ps.snapshot().0.high,
        high_after_first,
        "no growth below the high watermark"
    );
    // Memory comes back: free the big blocks, then pageset frees drain and
    // clear the flag.
    for b in big.drain(..) {
        // SAFETY: ours, order 6.
        unsafe { z.free(b, 6) };
    }
    for p in small {
        free(&ps, &z, p, 0);
    }
    assert!(z.below_high(), "only a draining free clears the flag");
    let more: Vec<_> = (0..2 * z.pcp_params().high_min as usize)
        .map(|_| alloc(&ps, &z, 0))
        .collect();
    for q in more {
        free(&ps, &z, q, 0);
    }
    ps.drain(&z);
    let c = z.snapshot().counters;
    assert_eq!(c.below_high_set, 1);
    assert_eq!(c.below_high_clear, 1);
    assert!(!z.below_high());
    z.check_invariants();
}

#[test]
fn cross_thread_frees_and_exiting_threads_leave_nothing_behind() {
    use std::sync::mpsc;
    // Large enough that nothing fails even with every pageset at high_max
    // (there is no drain-all fallback at this level).
    let z = TestZone::new(1 << 30);
    let sets: Vec<Pageset> = (0..4).map(|_| Pageset::new()).collect();
    let z_ref: &Zone = &z;
    let sets_ref = &sets;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, u32)>();
        let consumer = s.spawn(move || {
            let mut n = 0;
            for (addr, order) in rx {
                let ps = &sets_ref[pcpalloc::internals::current_cpu() % 4];
                let d = pcpalloc::internals::desc_of(addr);
                // SAFETY: the producer handed this block over.
                unsafe {
                    (*d).flags = 0;
                    ps.free(z_ref, d, order, &K, false);
                }
                n += 1;
            }
            n
        });
        let producers: Vec<_> = (0..6)
            .map(|t| {
                let tx = tx.clone();
                s.spawn(move || {
                    let ps = &sets_ref[t % 4];
                    let mut kept = Vec::new();
                    for i in 0..4000 {
                        let order = (i % 4) as u32;
                        let p = ps.alloc(z_ref, order, MigrateType::Movable, &K, false);
                        assert!(!p.is_null());
                        // SAFETY: ours.
                        unsafe { (*p).set_kind(PageKind::Large) };
                        if i % 3 == 0 {
                            kept.push((p, order));
                        } else {
                            tx.send((page_addr(p), order)).unwrap();
                        }
                    }
                    // This thread frees what it kept and exits with pages
                    // still cached in its pageset.
                    for (p, order) in kept {
                        // SAFETY: ours.
                        unsafe {
                            (*p).flags = 0;
                            ps.free(z_ref, p, order, &K, false);
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        for p in producers {
            p.join().unwrap();
        }
        assert!(consumer.join().unwrap() > 0);
    });
    let cached: i32 = sets.iter().map(|ps| ps.snapshot().0.count).sum();
    assert!(cached > 0, "pagesets hold pages after the threads exit");
    let walk = z.check_invariants();
    assert_eq!(walk.pcp as i32, cached);
    for ps in &sets {
        ps.check();
        ps.drain(&z);
    }
    let walk = z.check_invariants();
    assert_eq!(walk.pcp, 0);
    assert_eq!(walk.used, 0);
    let snap = z.snapshot();
    assert_eq!(snap.free, snap.managed);
}

#[test]
fn ablation_base_drains_on_every_high_order_burst() {
    // v6.6 behaviour: without patch 1 a lone order-1 free after order-0
    // frees drains the whole pageset.
    let z = TestZone::new(1 << 30);
    let ps = Pageset::new();
    let base = Knobs {
        heuristics: Heuristics::BASE,
        ..Knobs::DEFAULT
    };
    let a = ps.alloc(&z, 1, MigrateType::Movable, &base, false);
    let pages: Vec<_> = (0..200)
        .map(|_| ps.alloc(&z, 0, MigrateType::Movable, &base, false))
        .collect();
    for p in pages {
        // SAFETY: ours.
        unsafe { ps.free(&z, p, 0, &base, false) };
    }
    // SAFETY: ours.
    unsafe { ps.free(&z, a, 1, &base, false) };
    let (s, c) = ps.snapshot();
    assert_eq!(c.free_high, 1);
    assert_eq!(s.count, 0, "v6.6 free_high drains everything");
    z.check_invariants();
}

/// The large lists of one pageset through a scripted sequence: a block
/// freed waits on its class's list and serves the next request of the
/// class; frees past `high` give the coldest blocks back and are
/// remembered, so the next miss grows `high` by what it takes; a tick
/// decays `high` by an eighth and gives the excess back; an idle pageset
/// gives everything back.
#[test]
fn large_lists_tune_high_like_a_pageset() {
    let z = TestZone::new(1 << 30);
    let ps = Pageset::new();
    let class = class_of(64); // 64 pages, 256 KiB
    let take = |ps: &Pageset| {
        let (p, c) = ps.alloc_large(&z, class, || K, false);
        assert!(!p.is_null());
        assert_eq!(c, class);
        p
    };
    let give = |ps: &Pageset, p: *mut Page| {
        // SAFETY: an exact block of the class, ours; written (dirty) —
        // every page: a block's resident pages are what the lists count.
        unsafe {
            write_pages(p, 64);
            (*p).flags = 0;
            ps.free_large(&z, &[p], class, || K, false);
        }
    };
    let state = |ps: &Pageset| {
        let (_, c) = ps.snapshot();
        (c.large_count as usize, c.large_high as usize)
    };
    // A pageset's refill never grows the zone (the page allocator's slow
    // path does, after draining the pagesets): give it memory first.
    let first = z.alloc_exact(64, 0, MigrateType::Movable, Grow::Yes);
    assert!(!first.is_null());
    // SAFETY: the block just taken, unused.
    unsafe { z.free_exact(first, 64) };
    // A first block comes from the zone; freed, it waits on its list.
    let a = take(&ps);
    give(&ps, a);
    let (count, high) = state(&ps);
    assert_eq!(count, 64);
    let high_min = high;
    assert!(high_min >= 512, "high starts at high_min ({high_min})");
    assert_eq!(take(&ps), a, "the freed block serves its class again");
    give(&ps, a);
    // Hold more than high, then free it all: past high the coldest go
    // back down to high - high/8.
    let n = high_min / 64 + 4;
    let blocks: Vec<_> = (0..n).map(|_| take(&ps)).collect();
    for &p in &blocks {
        give(&ps, p);
    }
    let (count, high) = state(&ps);
    assert_eq!(high, high_min, "frees alone never grow high");
    assert!(count <= high, "{count} pages held over high {high}");
    let (_, c) = ps.snapshot();
    let given_back = c.large_drained_pages as usize;
    assert!(given_back >= 4 * 64, "the excess went back: {given_back}");
    // Misses after those give-backs grow high by what each takes.
    let held: Vec<_> = (0..n).map(|_| take(&ps)).collect();
    let (_, grown) = state(&ps);
    assert!(
        grown > high,
        "misses after give-backs grow high ({high} -> {grown})"
    );
    assert_eq!((grown - high) % 64, 0, "high grows by whole blocks");
    for &p in &held {
        give(&ps, p);
    }
    // A tick decays high by an eighth (not below high_min) and gives the
    // excess back.
    let (_, before) = state(&ps);
    ps.tick(&z, &K);
    let (count, after) = state(&ps);
    assert_eq!(after, (before - before / 8).max(high_min));
    assert!(count <= after);
    // Idle for PCP_EXPIRE_TICKS: everything goes back; the zone agrees.
    for _ in 0..4 {
        ps.tick(&z, &K);
    }
    assert_eq!(state(&ps).0, 0);
    let walk = z.check_invariants();
    assert_eq!((walk.pcp, walk.used), (0, 0));
}

/// Frees through the page allocator check the dirty limit once their
/// pages reach the zone. 24 written 4 MiB blocks, freed one by one
/// straight to the zone at ratio 100%, two ticks after each (the use
/// falls slowly: its peak is its use of the tick before): the 13th free
/// leaves 13 resident free blocks for 11 in use, so 4 go back (to 7/8 of
/// the limit); the 14th leaves 10 for 10, under it. Then large blocks of
/// the 4 MiB class, freed to the pageset's large lists, reach the zone
/// past the lists' high and are checked too.
#[test]
fn frees_that_reach_the_zone_keep_it_under_the_dirty_limit() {
    use pcpalloc::internals::{PageAllocator, MAX_ORDER_PAGES, MAX_PAGE_ORDER, NO_LIMIT};
    let pa = Box::new(PageAllocator::new());
    let mut cfg = ZoneConfig::with_limit(NO_LIMIT);
    cfg.size = 1 << 30;
    cfg.dirty_ratio = 100;
    pa.zone.configure(&cfg);
    assert!(pa.pagesets.init_cpu_sets(1, false));
    let pages = pa.through(std::ptr::null(), false);
    let z = &pa.zone;
    let blocks: Vec<*mut Page> = (0..24)
        .map(|_| {
            let p = pages.alloc(MAX_PAGE_ORDER, MigrateType::Movable);
            assert!(!p.is_null());
            p
        })
        .collect();
    for (i, &p) in blocks[..14].iter().enumerate() {
        // SAFETY: ours, written, unused now.
        unsafe {
            (*p).flags = 0;
            pages.free(p, MAX_PAGE_ORDER);
        }
        z.advance_epoch();
        z.advance_epoch();
        let c = z.snapshot().counters;
        let expect = if i < 12 { (0, 0) } else { (1, 16 << 20) };
        assert_eq!(
            (c.balance_dirty, c.balance_dirty_bytes),
            expect,
            "after free {}",
            i + 1
        );
    }
    assert_eq!(z.dirty_free_pages(), 10 * MAX_ORDER_PAGES);

    let class = class_of(MAX_ORDER_PAGES);
    let large: Vec<*mut Page> = (0..40)
        .map(|_| {
            let (p, c) = pages.alloc_large(class);
            assert!(!p.is_null());
            assert_eq!(c, class);
            p
        })
        .collect();
    let before = z.snapshot().counters.balance_dirty;
    for &p in &large {
        // SAFETY: an exact block of the class, ours, written — every page:
        // a block's resident pages are what the large lists count.
        unsafe {
            write_pages(p, MAX_ORDER_PAGES);
            (*p).flags = 0;
            pages.free_large(p, class);
        }
        z.advance_epoch();
        z.advance_epoch();
    }
    assert!(z.snapshot().counters.balance_dirty > before);
    for &p in &blocks[14..] {
        // SAFETY: ours, unused.
        unsafe { pages.free(p, MAX_PAGE_ORDER) };
    }
    pa.drain_all();
    z.check_invariants();
    // SAFETY: the test is over; nothing uses the zone any more.
    unsafe { z.destroy() };
}

/// Review: the dirty limit's release, run from many threads' frees at
/// once (one at a time through `busy`, the others skipping) while a tick
/// releases idle memory too, keeps the zone whole: nothing isolated at the
/// end, the charged bitmap and counts agreeing (`check_invariants`).
#[test]
fn concurrent_frees_and_ticks_keep_the_dirty_limit_accounting_whole() {
    use pcpalloc::internals::{PageAllocator, MAX_PAGE_ORDER, NO_LIMIT};
    use std::sync::atomic::{AtomicBool, Ordering};
    let pa: &'static PageAllocator = Box::leak(Box::new(PageAllocator::new()));
    let mut cfg = ZoneConfig::with_limit(NO_LIMIT);
    cfg.size = 1 << 30;
    cfg.dirty_ratio = 5;
    pa.zone.configure(&cfg);
    assert!(pa.pagesets.init_cpu_sets(2, false));
    static STOP: AtomicBool = AtomicBool::new(false);
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                let pages = pa.through(std::ptr::null(), false);
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                let mut live: Vec<(usize, u32)> = Vec::new();
                let mut ops = 0u64;
                while !STOP.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if live.len() < 96 && !x.is_multiple_of(3) {
                        let order = if x.is_multiple_of(5) {
                            MAX_PAGE_ORDER - (x as u32 >> 8) % 2
                        } else {
                            (x as u32 >> 8) % 4
                        };
                        let p = pages.alloc(order, MigrateType::Movable);
                        if !p.is_null() {
                            live.push((p as usize, order));
                        }
                    } else if !live.is_empty() {
                        let (p, order) = live.swap_remove((x >> 16) as usize % live.len());
                        // SAFETY: ours, written, unused now.
                        unsafe {
                            (*(p as *mut Page)).flags = 0;
                            pages.free(p as *mut Page, order);
                        }
                    }
                    ops += 1;
                }
                for (p, order) in live {
                    // SAFETY: as above.
                    unsafe { pages.free(p as *mut Page, order) };
                }
                ops
            })
        })
        .collect();
    let ticker = std::thread::spawn(move || {
        let mut n = 0;
        while !STOP.load(Ordering::Relaxed) {
            pa.zone.advance_epoch();
            pa.zone.release_idle(0, 256);
            n += 1;
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        n
    });
    std::thread::sleep(std::time::Duration::from_millis(800));
    STOP.store(true, Ordering::Relaxed);
    let ops: u64 = workers.into_iter().map(|h| h.join().unwrap()).sum();
    let ticks = ticker.join().unwrap();
    pa.drain_all();
    let walk = pa.zone.check_invariants();
    let c = pa.zone.snapshot().counters;
    eprintln!(
        "{ops} ops, {ticks} ticks, balance_dirty {} ({} MiB)",
        c.balance_dirty,
        c.balance_dirty_bytes >> 20
    );
    assert_eq!((walk.isolated, walk.pcp, walk.used), (0, 0, 0));
    assert!(c.balance_dirty > 0);
}

/// A page allocator of 1 GiB without a limit and with two CPU pagesets.
fn two_cpu_allocator() -> Box<pcpalloc::internals::PageAllocator> {
    use pcpalloc::internals::{PageAllocator, NO_LIMIT};
    let pa = Box::new(PageAllocator::new());
    let mut cfg = ZoneConfig::with_limit(NO_LIMIT);
    cfg.size = 1 << 30;
    pa.zone.configure(&cfg);
    assert!(pa.pagesets.init_cpu_sets(2, false));
    pa
}

/// Drains every pageset of `pa`, checks that nothing is left cached or in
/// use, and unmaps the zone.
fn drain_and_destroy(pa: Box<pcpalloc::internals::PageAllocator>) {
    pa.drain_all();
    let walk = pa.zone.check_invariants();
    assert_eq!((walk.pcp, walk.used), (0, 0));
    // SAFETY: the test is over; nothing uses the zone any more.
    unsafe { pa.zone.destroy() };
}

/// A miss on one CPU's large lists takes a block of the class from
/// another CPU's lists before it refills from the zone: the block a thread
/// on CPU 0 freed serves a request on CPU 1 as it is. The steal is counted
/// on the thief, neither list's tuning sees it, and the zone is not asked.
/// A block of a class more than two classes larger is not taken.
#[test]
fn a_large_miss_takes_another_cpus_block_before_the_zone() {
    let pa = two_cpu_allocator();
    let (ps0, ps1) = (pa.pagesets.cpu_pageset(0), pa.pagesets.cpu_pageset(1));
    let (on0, on1) = (pa.through(ps0, false), pa.through(ps1, false));
    let class = class_of(10);
    let (a, c) = on0.alloc_large(class);
    assert!(!a.is_null());
    assert_eq!(c, class);
    // SAFETY: an exact block of the class, ours, written.
    unsafe {
        (*a).flags = 0;
        on0.free_large(a, class);
    }
    let refills = |ps: &Pageset| ps.snapshot().1.large_refill_pages;
    let (before0, before1) = (refills(ps0), refills(ps1));
    let locks = pa
        .zone
        .lock_stats()
        .acquisitions
        .load(std::sync::atomic::Ordering::Relaxed);
    let (b, c) = on1.alloc_large(class);
    assert_eq!((b, c), (a, class), "CPU 1 takes CPU 0's block");
    assert_eq!(
        pa.zone
            .lock_stats()
            .acquisitions
            .load(std::sync::atomic::Ordering::Relaxed),
        locks,
        "the zone is not asked"
    );
    assert_eq!((refills(ps0), refills(ps1)), (before0, before1));
    let (c0, c1) = (ps0.snapshot().1, ps1.snapshot().1);
    assert_eq!((c0.large_steals, c1.large_steals), (0, 1));
    assert_eq!((c0.large_count, c1.large_count), (0, 0));
    // A block three classes up stays where it is: CPU 1 refills.
    let (big, _) = on0.alloc_large(class + 3);
    // SAFETY: as above.
    unsafe {
        (*big).flags = 0;
        on0.free_large(big, class + 3);
        (*b).flags = 0;
    }
    let (d, _) = on1.alloc_large(class);
    assert_ne!(d, big);
    assert_eq!(ps1.snapshot().1.large_steals, 1);
    assert!(refills(ps1) > before1, "CPU 1 refilled from the zone");
    // SAFETY: ours, unused.
    unsafe {
        on1.free_large(b, class);
        (*d).flags = 0;
        on1.free_large(d, class);
    }
    drain_and_destroy(pa);
}

/// A steal brings the rest of a refill's batch with the block it takes,
/// cached on the thief in the same lock hold, and leaves the victim at
/// least half of its list.
#[test]
fn a_large_steal_brings_a_batch_and_leaves_the_victim_half() {
    let pa = two_cpu_allocator();
    let (ps0, ps1) = (pa.pagesets.cpu_pageset(0), pa.pagesets.cpu_pageset(1));
    let (on0, on1) = (pa.through(ps0, false), pa.through(ps1, false));
    let class = class_of(10);
    // CPU 0 frees eight blocks of 10 pages (a consumer's CPU); its lists
    // also cache what its refills took beyond each request.
    let blocks: Vec<_> = (0..8).map(|_| on0.alloc_large(class).0).collect();
    for &b in &blocks {
        assert!(!b.is_null());
        // SAFETY: an exact block of the class, ours, written.
        unsafe {
            (*b).flags = 0;
            on0.free_large(b, class);
        }
    }
    let held = ps0.snapshot().1.large_count;
    assert!(
        held >= 130,
        "{held} pages: 13 blocks, room for a batch that leaves half"
    );
    let locks = || {
        pa.zone
            .lock_stats()
            .acquisitions
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = locks();
    // CPU 1's miss (a producer's CPU) takes CPU 0's coldest block and
    // the rest of a batch's worth (63 pages: 6 blocks of 10, as a refill
    // from the zone takes), cached on CPU 1 in the same lock hold.
    let (first, c) = on1.alloc_large(class);
    assert!(!first.is_null());
    assert_eq!(c, class);
    assert_eq!(locks(), before, "the zone is not asked");
    let (c0, c1) = (ps0.snapshot().1, ps1.snapshot().1);
    assert_eq!((c0.large_count, c1.large_count), (held - 60, 50));
    assert_eq!((c0.large_steals, c1.large_steals), (0, 1));
    // The next five requests on CPU 1 are its own hits: no steal, no zone.
    let mut taken = vec![first];
    for _ in 0..5 {
        let (p, c) = on1.alloc_large(class);
        assert!(!p.is_null());
        assert_eq!(c, class);
        taken.push(p);
    }
    assert_eq!(locks(), before);
    assert_eq!(ps1.snapshot().1.large_steals, 1);
    assert_eq!(ps1.snapshot().1.large_count, 0);
    // A steal leaves the victim at least half its list: with 3 blocks on
    // CPU 0's list, CPU 1's next miss takes 1 and one more.
    while ps0.snapshot().1.large_count > 30 {
        let (p, _) = on0.alloc_large(class);
        taken.push(p);
    }
    let (p, _) = on1.alloc_large(class);
    taken.push(p);
    assert_eq!(
        (ps0.snapshot().1.large_count, ps1.snapshot().1.large_count),
        (10, 10)
    );
    assert_eq!(locks(), before);
    let mut uniq = taken.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), taken.len(), "distinct blocks");
    for p in taken {
        // SAFETY: ours, unused.
        unsafe {
            (*p).flags = 0;
            on1.free_large(p, class);
        }
    }
    drain_and_destroy(pa);
}
