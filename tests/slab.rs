//! The small-object layer over a test zone: heaps are values handed a page
//! allocator of their own, so each test sees exactly the slabs it makes —
//! no background tick, no other test's threads.
//!
//! - `park_high` after a scripted sequence (it grows by what was given back
//!   for lack of room and decays by 1/8 a tick), reuse of a parked slab by
//!   another class of the same slab order, the tick taking parked slabs
//!   back from a heap whose thread does nothing;
//! - remote frees, including the delayed notice for a full slab;
//! - everything going back on `collect`;
//! - exact-size large blocks cached on their class's pageset list;
//! - grouping by lifetime: objects that live on do not pin the pageblocks
//!   of a class that churns.

mod heap_env;

use heap_env::Env;
use pcpalloc::internals::large;
use pcpalloc::internals::{
    class_of, desc_of, free_owned, Heap, Pages, ZoneConfig, CAPACITY, PAGE_SIZE, PARK_HIGH_MIN,
    REMOTE_BATCH, REMOTE_SLOTS, SLAB_ORDER,
};
use std::sync::atomic::Ordering::Relaxed;

const KEY: usize = 0x5eed_1234_abcd_0001;

/// Allocates `slabs` slabs' worth of objects of `size` (every slab filled
/// exactly) through `h`, numbering them.
fn fill(env: &Env, h: &Heap, size: usize, slabs: usize) -> Vec<*mut u8> {
    let class = class_of(size);
    let n = slabs * usize::from(CAPACITY[class]);
    // SAFETY: this thread drives h.
    let mut o = unsafe { h.owned() };
    (0..n)
        .map(|i| {
            let p = o.alloc(class, &env.pages());
            assert!(!p.is_null());
            // SAFETY: p is a live block of at least `size` ≥ 8 bytes.
            unsafe { p.cast::<usize>().write(i) };
            p
        })
        .collect()
}

/// Frees `v` (from `fill`) through `h`, checking every object first.
fn free_all(env: &Env, h: &Heap, v: Vec<*mut u8>) {
    // SAFETY: this thread drives h; each p is live and freed once.
    unsafe {
        let mut o = h.owned();
        for (i, p) in v.into_iter().enumerate() {
            assert_eq!(p.cast::<usize>().read(), i, "object overwritten");
            free_owned(&mut o, p, KEY, &env.pages());
        }
    }
}

/// Gives every object on `h`'s bins back to its slab.
fn flush(env: &Env, h: &Heap) {
    // SAFETY: this thread drives h.
    let mut o = unsafe { h.owned() };
    o.flush_bins(&env.pages());
    o.flush_remote();
}

/// (park_high, park_missed, parked bytes, slabs created).
fn park_state(h: &Heap) -> (usize, usize, usize, u64) {
    // SAFETY: this thread drives h.
    let mut o = unsafe { h.owned() };
    let l = o.local();
    (
        l.park_high(),
        l.park_missed(),
        h.parked.bytes(),
        h.slabs_created.load(Relaxed),
    )
}

#[test]
fn park_high_tunes_itself_and_parked_slabs_serve_any_class() {
    let env = Env::new(256 << 20);
    let h = env.heap();
    let (a, b) = (128, 256);
    let slab = PAGE_SIZE << SLAB_ORDER;
    let fits = PARK_HIGH_MIN / slab; // slabs parked before the first miss
    let n = fits + 36;
    assert_eq!(park_state(h), (PARK_HIGH_MIN, 0, 0, 0));

    // n slabs of class a, all freed (and the bins flushed back to the
    // slabs): the last stays current, `fits` are parked, the rest go back
    // and are remembered as missed.
    free_all(&env, h, fill(&env, h, a, n));
    flush(&env, h);
    let (high, missed, parked, created) = park_state(h);
    assert_eq!(created, n as u64);
    assert_eq!(high, PARK_HIGH_MIN);
    assert_eq!(parked, fits * slab);
    assert_eq!(missed, (n - 1 - fits) * slab);

    // n slabs of class b: the parked ones are set up again for b, and each
    // new slab grows park_high by one slab while misses are owed.
    let v = fill(&env, h, b, n);
    let (high, missed, parked, created2) = park_state(h);
    assert_eq!(parked, 0, "every parked slab was reused");
    assert_eq!(created2 - created, (n - fits) as u64);
    assert_eq!(missed, 0);
    assert_eq!(high, PARK_HIGH_MIN + (n - 1 - fits) * slab);
    free_all(&env, h, v);
    flush(&env, h);

    // Now all n - 1 emptied slabs fit, and class a takes them back without
    // asking the page allocator.
    let (high, _, parked, created3) = park_state(h);
    assert_eq!(parked, (n - 1) * slab);
    assert_eq!(parked, high);
    let v = fill(&env, h, a, n);
    assert_eq!(park_state(h).3, created3, "no new slab");
    free_all(&env, h, v);
    let (slabs, live) = env.check();
    assert!(slabs >= n && live == 0, "{slabs} slabs, {live} live");

    // A tick takes the parked slabs back at once, without waiting for the
    // owner (an idle thread must not keep them) ...
    assert!(park_state(h).2 > 0);
    env.tick();
    assert_eq!(park_state(h).2, 0, "the tick took the parked slabs back");
    // ... and the owner's next slow path (its bin is empty) sees the
    // tick: park_high decays.
    flush(&env, h);
    free_all(&env, h, fill(&env, h, b, 2));
    let (high2, missed, parked, _) = park_state(h);
    assert_eq!(high2, high - high / 8);
    assert_eq!(missed, 0);
    assert!(parked <= slab);
    env.check();
}

#[test]
fn remote_frees_reach_the_owner_even_from_full_slabs() {
    let env = Env::new(64 << 20);
    let (owner, other) = (env.heap(), env.heap());
    let size = 256;
    let class = class_of(size);
    let cap = usize::from(CAPACITY[class]);
    // Three full slabs and one more object: the first three are full and
    // off every list, their owner waiting to hear of a remote free.
    let mut v = fill(&env, owner, size, 3);
    // SAFETY: this thread drives `owner`.
    let extra = unsafe { owner.owned() }.alloc(class, &env.pages());
    assert!(!extra.is_null());
    assert_eq!(env.check().1, 3 * cap + 1);

    // The other heap frees every object of the first three slabs into its
    // bin, which gives them back to their slabs' remote lists when it is
    // full and when flushed; each slab's first remote run posts the slab on
    // the owner's delayed stack.
    for p in v.drain(..) {
        // SAFETY: `other` is driven by this thread; p is live, freed once.
        unsafe { free_owned(&mut other.owned(), p, KEY, &env.pages()) };
    }
    flush(&env, other);
    assert!(!owner.delayed.load(Relaxed).is_null(), "no delayed notice");
    assert_eq!(owner.remote_collected.load(Relaxed), 0);
    let (_, live) = env.check();
    assert_eq!(live, 1, "remote frees not accounted");

    // The owner's next slow path collects them and reuses the objects.
    let again = fill(&env, owner, size, 3);
    assert_eq!(owner.remote_collected.load(Relaxed) as usize, 3 * cap);
    assert!(owner.delayed.load(Relaxed).is_null());
    assert_eq!(
        owner.slabs_created.load(Relaxed),
        4,
        "remote-freed slabs reused"
    );
    free_all(&env, owner, again);
    // SAFETY: this thread drives `owner`; extra is live.
    unsafe { free_owned(&mut owner.owned(), extra, KEY, &env.pages()) };
    assert_eq!(env.check().1, 0);
}

/// How many freed objects a bin keeps before the owner's frees go
/// straight back to their slabs: 64 KiB of a class (BIN_BYTES), but no
/// more than two slabs' worth and 1024 objects (BIN_MAX). Slabs are 32
/// KiB, so up to 64 B BIN_MAX is the bound: 1024 objects (16 KiB of 16 B,
/// 64 KiB of 64 B, where BIN_BYTES and two slabs are too); above, BIN_BYTES
/// and two slabs are: 512 objects of 128 B.
#[test]
fn a_bin_keeps_64_kib_two_slabs_or_1024_objects_whichever_is_least() {
    let env = Env::new(64 << 20);
    let h = env.heap();
    for (size, kept) in [(16, 1024), (64, 1024), (128, 512)] {
        let class = class_of(size);
        let v = fill(&env, h, size, 3);
        let n = v.len();
        free_all(&env, h, v);
        // SAFETY: this thread drives h.
        let mut o = unsafe { h.owned() };
        assert_eq!(o.local().bins.count(class), kept, "{size} B: {n} freed");
    }
    flush(&env, h);
    assert_eq!(env.check().1, 0);
}

#[test]
fn a_thread_gives_other_heaps_objects_back_to_their_slabs() {
    let env = Env::new(64 << 20);
    let (owner, other) = (env.heap(), env.heap());
    let size = 48;
    let class = class_of(size);
    let n = 40;
    let v: Vec<*mut u8> = fill(&env, owner, size, 1).into_iter().take(n).collect();
    // SAFETY: `other` is driven by this thread; each p is live, freed once;
    // the slab is read while no other thread runs.
    unsafe {
        let mut o = other.owned();
        for &p in &v {
            free_owned(&mut o, p, KEY, &env.pages());
        }
        // Nothing goes on the freeing heap's bin (it would be reused next
        // to the owner's live objects): the objects go back to their
        // slab's remote list in batches of REMOTE_BATCH, one CAS each; the
        // rest wait on the freeing heap's chain (counted live by the slab)
        // until it flushes. The owner takes them back on its next refill.
        assert_eq!(o.local().bins.count(class), 0);
        let s = (*pcpalloc::internals::desc_of(v[0] as usize))
            .head
            .load(Relaxed)
            .cast::<pcpalloc::internals::Slab>();
        // The list's length, which the count that came with it must match.
        let on_remote_list = |s: *mut pcpalloc::internals::Slab| {
            let tf = (*s).thread_free.load(Relaxed);
            let mut q = pcpalloc::internals::tf_list(tf) as *const usize;
            let mut k = 0;
            while !q.is_null() {
                k += 1;
                q = q.read() as *const usize;
            }
            assert_eq!(pcpalloc::internals::tf_count(tf) as usize, k);
            k
        };
        let batch = REMOTE_BATCH as usize;
        assert_eq!(on_remote_list(s), n / batch * batch);
        let _ = o;
        // The objects waiting on the chain are free: the slab counts them
        // as used, the check takes them off (as it does the bins').
        let cap = usize::from(CAPACITY[class]);
        assert_eq!(env.check().1, cap - n, "waiting on the chain");
        other.owned().flush_remote();
        assert_eq!(on_remote_list(s), n);
    }
    // Only the objects of the first fill that were never freed are live.
    let cap = usize::from(CAPACITY[class]);
    assert_eq!(env.check().1, cap - n);
    let again = fill(&env, owner, size, 1);
    assert_eq!(owner.remote_collected.load(Relaxed) as usize, n);
    free_all(&env, owner, again);
}

/// A freeing heap keeps a chain per slab in REMOTE_SLOTS slots, picked by
/// the slab's address: frees of objects of that many neighbouring slabs,
/// taken in turn, all wait on their chains (none reaches its slab before
/// the flush), and the flush sends each slab its objects in one run. Fails
/// if the slots collide (every slab in one slot: each free then sends the
/// chain of the slab before it, one object per CAS).
#[test]
fn remote_frees_of_neighbouring_slabs_wait_in_a_chain_each() {
    let env = Env::new(64 << 20);
    let (owner, other) = (env.heap(), env.heap());
    let size = 128;
    let cap = usize::from(CAPACITY[class_of(size)]);
    let slabs = REMOTE_SLOTS;
    let v = fill(&env, owner, size, slabs);
    let slab_of = |p: *mut u8| {
        // SAFETY: p is a live object of a slab of ours.
        unsafe { (*desc_of(p as usize)).head.load(Relaxed) }.cast::<pcpalloc::internals::Slab>()
    };
    // SAFETY: the slabs are read while no other thread runs.
    let remote_count = |s: *mut pcpalloc::internals::Slab| unsafe {
        pcpalloc::internals::tf_count((*s).thread_free.load(Relaxed)) as usize
    };
    let heads: Vec<_> = (0..slabs).map(|i| slab_of(v[i * cap])).collect();
    let mut sorted = heads.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), slabs, "one fill per slab");
    // Neighbouring slabs: the fill took consecutive 32 KiB blocks.
    let span = sorted[slabs - 1] as usize - sorted[0] as usize;
    assert_eq!(span, (slabs - 1) * (64 << SLAB_ORDER), "slabs not adjacent");
    let per_slab = 3;
    // SAFETY: `other` is driven by this thread; each object is live and
    // freed once.
    unsafe {
        let mut o = other.owned();
        for k in 0..per_slab {
            for i in 0..slabs {
                free_owned(&mut o, v[i * cap + k], KEY, &env.pages());
            }
        }
        for &s in &heads {
            assert_eq!(remote_count(s), 0, "a chain went to its slab early");
        }
        o.flush_remote();
        for &s in &heads {
            assert_eq!(remote_count(s), per_slab);
        }
    }
    // SAFETY: this thread drives `owner`; the rest are live, freed once.
    unsafe {
        let mut o = owner.owned();
        for i in 0..slabs {
            for &p in &v[i * cap + per_slab..(i + 1) * cap] {
                free_owned(&mut o, p, KEY, &env.pages());
            }
        }
    }
    assert_eq!(env.check().1, 0);
}

/// The remote list carries its count in `thread_free`, so the owner takes
/// it without walking it; when the slab's own list is not empty the
/// owner splices the remote list in front of it, and the accounting must
/// still hold (fails if the count is dropped, doubled, or the splice loses
/// the own list).
#[test]
fn remote_frees_counted_in_one_word_join_the_slabs_own_list() {
    let env = Env::new(64 << 20);
    let (owner, other) = (env.heap(), env.heap());
    let size = 48;
    let cap = usize::from(CAPACITY[class_of(size)]);
    let v = fill(&env, owner, size, 1);
    let (own, remote) = (10, 2 * REMOTE_BATCH as usize + 3);
    // SAFETY: each thread heap is driven by this thread; every p is live
    // and freed once; the slab is read while no other thread runs.
    unsafe {
        let s = (*desc_of(v[0] as usize))
            .head
            .load(Relaxed)
            .cast::<pcpalloc::internals::Slab>();
        let mut o = owner.owned();
        for &p in &v[..own] {
            free_owned(&mut o, p, KEY, &env.pages());
        }
        o.flush_bins(&env.pages()); // onto the slab's own list
        assert!(!(*s).free.is_null());
        let mut t = other.owned();
        for &p in &v[own..own + remote] {
            free_owned(&mut t, p, KEY, &env.pages());
        }
        t.flush_remote();
        let tf = (*s).thread_free.load(Relaxed);
        assert_eq!(pcpalloc::internals::tf_count(tf) as usize, remote);
        assert_eq!(env.check().1, cap - own - remote);
        o.collect(&env.pages());
        assert_eq!((*s).thread_free.load(Relaxed), 0);
        assert_eq!(owner.remote_collected.load(Relaxed) as usize, remote);
        assert_eq!(usize::from((*s).used), cap - own - remote);
    }
    assert_eq!(env.check().1, cap - own - remote);
    // Every object freed comes back, none twice.
    let again = fill(&env, owner, size, 1);
    let mut all: Vec<usize> = again.iter().map(|&p| p as usize).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), cap);
    free_all(&env, owner, again);
    let rest: Vec<*mut u8> = v[own + remote..].to_vec();
    // SAFETY: this thread drives owner; the rest of v is live.
    unsafe {
        let mut o = owner.owned();
        for p in rest {
            free_owned(&mut o, p, KEY, &env.pages());
        }
    }
    assert_eq!(env.check().1, 0);
}

/// Remote frees in batches (flushed at odd points) race the owner's own
/// frees, refills, full-marking, bin flushes and collects; afterwards
/// every remote list's count agrees with its length (`check_quiescent`),
/// nothing is live, and a collect gives every slab back (fails if a push
/// and a swap can leave the count and the list apart).
#[test]
fn remote_frees_racing_the_owner_keep_count_and_list_together() {
    #[derive(Clone, Copy)]
    struct P(usize);
    let env = Env::new(256 << 20);
    let owner = env.heap();
    let freers: Vec<&Heap> = (0..3).map(|_| env.heap()).collect();
    let class = class_of(48);
    let cap = usize::from(CAPACITY[class]);
    std::thread::scope(|sc| {
        let mut txs = Vec::new();
        for (i, &fh) in freers.iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::channel::<Vec<P>>();
            txs.push(tx);
            let env = &env;
            sc.spawn(move || {
                // SAFETY: this thread alone drives `fh`.
                let mut o = unsafe { fh.owned() };
                for v in rx {
                    for (k, p) in v.into_iter().enumerate() {
                        // SAFETY: each object was handed over once, live.
                        unsafe { free_owned(&mut o, p.0 as *mut u8, KEY, &env.pages()) };
                        if (k + i) % 7 == 0 {
                            o.flush_remote();
                        }
                    }
                    o.flush_remote();
                }
            });
        }
        // SAFETY: this thread alone drives `owner`.
        let mut o = unsafe { owner.owned() };
        let mut kept: Vec<*mut u8> = Vec::new();
        for round in 0..2000 {
            let v: Vec<*mut u8> = (0..cap + round % 50)
                .map(|_| {
                    let p = o.alloc(class, &env.pages());
                    assert!(!p.is_null());
                    p
                })
                .collect();
            let mut batch = [Vec::new(), Vec::new(), Vec::new()];
            for (k, &p) in v.iter().enumerate() {
                match k % 5 {
                    // SAFETY: p is live and freed once.
                    0 => unsafe { free_owned(&mut o, p, KEY, &env.pages()) },
                    1 if round % 3 == 0 => kept.push(p),
                    _ => batch[k % 3].push(P(p as usize)),
                }
            }
            for (t, b) in txs.iter().zip(batch) {
                t.send(b).unwrap();
            }
            if round % 64 == 0 {
                o.flush_bins(&env.pages());
            }
            if round % 97 == 0 {
                o.collect(&env.pages());
            }
            if kept.len() > 5000 || round == 1999 {
                for p in kept.drain(..) {
                    // SAFETY: p is live and freed once.
                    unsafe { free_owned(&mut o, p, KEY, &env.pages()) };
                }
            }
        }
    });
    assert_eq!(env.check().1, 0);
    // SAFETY: the freeing threads are gone; this thread drives `owner`.
    unsafe { owner.owned() }.collect(&env.pages());
    assert_eq!(env.check(), (0, 0), "slabs left after collect");
}

#[test]
fn collect_gives_every_page_back() {
    let env = Env::new(64 << 20);
    let h = env.heap();
    let mut all = Vec::new();
    for size in [16, 100, 700, 3000, 8192] {
        all.push(fill(&env, h, size, 3));
    }
    assert!(env.pa.zone.check_invariants().used > 0);
    for v in all {
        free_all(&env, h, v);
    }
    // SAFETY: this thread drives h.
    unsafe { h.owned() }.collect(&env.pages());
    env.pa.drain_all();
    let walk = env.pa.zone.check_invariants();
    assert_eq!(walk.used, 0, "pages still used after collect");
    assert_eq!(walk.pcp, 0);
    assert_eq!(env.check(), (0, 0));
    assert_eq!(h.slabs_created.load(Relaxed), h.slabs_retired.load(Relaxed));
}

#[test]
fn large_blocks_are_exact_and_come_back_from_their_class_list() {
    let env = Env::new(64 << 20);
    let pages = env.pages();
    let ps = env.pa.pagesets.cpu_pageset(0);
    // 33 KiB holds 9 pages' class: 10 pages, not 16.
    assert_eq!(large::pages_for(33 << 10, PAGE_SIZE), 10);
    let a = large::alloc(&pages, 33 << 10, PAGE_SIZE, false);
    assert!(!a.is_null());
    // SAFETY: a heads a live large block.
    let usable = unsafe { large::usable_size(desc_of(a as usize).cast()) };
    assert_eq!(usable, 10 * PAGE_SIZE);
    let (_, before) = ps.snapshot();
    // SAFETY: a is a live large block of env's.
    unsafe { large::free(&pages, desc_of(a as usize).cast()) };
    let (_, c) = ps.snapshot();
    assert_eq!(
        c.large_count,
        before.large_count + 10,
        "the block waits on its class list"
    );
    let walk = env.pa.zone.check_invariants();
    assert_eq!(walk.pcp, ps.check(), "the walk sees it as cached");
    // The next request of the class takes it back, from the list.
    let b = large::alloc(&pages, 37 << 10, PAGE_SIZE, false);
    assert_eq!(b, a, "the freed block serves its class again");
    let (_, c2) = ps.snapshot();
    assert_eq!(c2.large_hits, c.large_hits + 1);
    // An aligned block is exact too: 20 KiB at 64 KiB holds 5 pages.
    let al = large::alloc(&pages, 20 << 10, 64 << 10, false);
    assert_eq!(al as usize % (64 << 10), 0);
    // SAFETY: live large blocks of env's.
    unsafe {
        assert_eq!(
            large::usable_size(desc_of(al as usize).cast()),
            5 * PAGE_SIZE
        );
        large::free(&pages, desc_of(al as usize).cast());
        large::free(&pages, desc_of(b as usize).cast());
    }
    env.pa.drain_all();
    let walk = env.pa.zone.check_invariants();
    assert_eq!((walk.used, walk.pcp), (0, 0), "everything back in the zone");
}

/// Rounds of a phase that builds 4 MiB times the round's number of
/// temporary 256 B objects, keeping
/// one 128 B object for every 16 temporaries, then frees the temporaries.
/// Returns how many pageblocks hold a kept object, and how many of the
/// zone's pageblocks are whole and free once the empty slabs went back.
fn temporaries_and_keepers(group_by_lifetime: bool) -> (usize, usize) {
    let env = Env::with_config(&ZoneConfig {
        group_by_lifetime,
        ..ZoneConfig::with_limit(512 << 20)
    });
    let h = env.heap();
    let (temp, keep) = (class_of(256), class_of(128));
    let mut kept = Vec::new();
    for round in 0..6 {
        let mut temps = Vec::new();
        {
            // SAFETY: this thread drives h.
            let mut o = unsafe { h.owned() };
            for i in 0..((round + 1) << 22) / 256 {
                temps.push(o.alloc(temp, &env.pages()));
                if i % 16 == 0 {
                    kept.push(o.alloc(keep, &env.pages()));
                }
            }
        }
        assert!(temps.iter().chain(&kept).all(|p| !p.is_null()));
        // SAFETY: this thread drives h; each temporary is live and freed
        // once.
        unsafe {
            let mut o = h.owned();
            for p in temps {
                free_owned(&mut o, p, KEY, &env.pages());
            }
        }
        flush(&env, h);
    }
    // SAFETY: this thread drives h.
    unsafe { h.owned() }.collect(&env.pages());
    env.pa.drain_all();
    let pinned: std::collections::HashSet<usize> = kept.iter().map(|&p| p as usize >> 21).collect();
    let snap = env.pa.zone.snapshot();
    let whole: usize = (9..snap.nr_free.len())
        .map(|o| snap.nr_free[o] << (o - 9))
        .sum();
    let (_, live) = env.check();
    assert_eq!(live, kept.len());
    // SAFETY: as above; each kept object is live and freed once.
    unsafe {
        let mut o = h.owned();
        for p in kept {
            free_owned(&mut o, p, KEY, &env.pages());
        }
    }
    (pinned.len(), whole)
}

#[test]
fn grouping_by_lifetime_keeps_long_lived_objects_out_of_churned_pageblocks() {
    // Rounds of 4, 8, ... 24 MiB of temporaries, 84 MiB in all, and 2.6
    // MiB of kept objects among them (128 B, in 32 KiB slabs as every
    // class). Measured: mobility only 13 pinned, 1 whole; by lifetime 7
    // pinned, 7 whole. (With one-page slabs for both classes it was 14 and
    // 2 against 3 and 15: a kept slab now holds 256 objects, a quarter of
    // its pageblock's pages at most, so between rounds its pageblock is
    // mostly free and the temporaries' fallback claims it, as the kernel's
    // stealing does past half a pageblock; the kept class then steals
    // from theirs.)
    let (pinned_mixed, whole_mixed) = temporaries_and_keepers(false);
    let (pinned, whole) = temporaries_and_keepers(true);
    eprintln!(
        "mobility only: {pinned_mixed} pageblocks pinned, {whole_mixed} whole free; \
         by lifetime: {pinned} pinned, {whole} whole free"
    );
    // Without grouping the kept objects follow the temporaries into every
    // pageblock they reach. With it the first round mixes them (the class
    // has no history yet) and stealing moves a few pageblocks between the
    // two types; the temporaries of later rounds take pageblocks that
    // empty whole.
    assert!(
        pinned + 5 <= pinned_mixed,
        "{pinned} pageblocks hold a kept object against {pinned_mixed}"
    );
    assert!(
        whole >= whole_mixed + 5,
        "{whole} whole free pageblocks against {whole_mixed}"
    );
}

/// A heap's large bins through a scripted sequence, with the values the
/// pageset formulas give: a freed block waits in its class's bin and
/// serves the next request of the class (last in, first out); a full bin
/// spills its colder half, a free past `high` spills from the largest
/// class, both remembered, so the next miss grows `high` by the class's
/// pages; the owner's first use in a new tick decays `high` by an eighth;
/// a thread that only frees spills down to `high_min` (free_high); bins
/// left alone for a whole tick are spilled by the tick; and a binned block
/// reads as freed (`Cached`), so a second free is caught.
#[test]
fn large_bins_tune_high_like_a_pageset() {
    use pcpalloc::internals::{
        large_class_of, large_class_pages, PageKind, BINS_HIGH_MIN, BIN_CLASSES, BIN_SLOTS,
    };
    let env = Env::new(256 << 20);
    let pages = env.pages();
    let h = env.heap();
    let bins = &h.block_bins;
    let epoch = || env.pa.zone.epoch();
    let alloc = |npages: usize| {
        let p = large::alloc(&pages, npages * PAGE_SIZE, PAGE_SIZE, false);
        assert!(!p.is_null());
        p
    };
    // The owner's side, as the runtime's paths use it.
    let put = |p: *mut u8| {
        let b = desc_of(p as usize).cast::<pcpalloc::internals::LargeBlock>();
        // SAFETY: a live block of env's, of a binned class, freed by this
        // thread, which owns h.
        unsafe {
            let class = usize::from((*b).order) - 1;
            bins.put(b, class, epoch(), || pages);
        }
    };
    let take = |npages: usize| {
        let class = large_class_of(npages);
        // SAFETY: this thread owns h.
        let (head, _) = unsafe { bins.take(class, epoch(), || pages) };
        if head.is_null() {
            None
        } else {
            // SAFETY: taken out of the bins: ours.
            Some(pcpalloc::internals::page_addr(head))
        }
    };
    let kind = |p: *mut u8| {
        // SAFETY: descriptors of env's zone are readable.
        unsafe { (*desc_of(p as usize)).kind() }
    };
    assert_eq!(large_class_pages(BIN_CLASSES - 1), 64, "bins reach 256 KiB");
    assert_eq!(bins.state(), (0, BINS_HIGH_MIN));

    // Eight 16 KiB blocks fill their bin; the last in is the first out.
    let blocks: Vec<_> = (0..BIN_SLOTS).map(|_| alloc(4)).collect();
    for &p in &blocks {
        put(p);
        assert_eq!(kind(p), PageKind::Cached, "a binned block reads as freed");
    }
    assert_eq!(bins.state(), (8 * 4, BINS_HIGH_MIN));
    assert_eq!(take(4), Some(blocks[7] as usize));
    put(blocks[7]);
    // A ninth block: the bin spills its colder half (4 blocks, 16 pages)
    // to the pageset first.
    let ninth = alloc(4);
    put(ninth);
    assert_eq!(bins.state(), (5 * 4, BINS_HIGH_MIN));
    assert_eq!(bins.c.spilled_pages.load(Relaxed), 16);
    assert_eq!(
        kind(blocks[0]),
        PageKind::PcpLarge,
        "spilled to the pageset"
    );
    assert_eq!(kind(blocks[4]), PageKind::Cached);
    // The spill was for lack of room: the next miss grows high by the
    // missing class's pages (16), once.
    assert_eq!(take(16), None);
    assert_eq!(bins.state(), (20, BINS_HIGH_MIN + 16));
    assert_eq!(take(16), None);
    assert_eq!(bins.state(), (20, BINS_HIGH_MIN + 16), "missed is used up");
    // One hit (blocks[7]) and two misses so far; the report's requests
    // are their sum.
    assert_eq!(
        (bins.c.hits.load(Relaxed), bins.c.misses.load(Relaxed)),
        (1, 2)
    );

    // Past high (80 pages): three 64 KiB blocks fit (20 + 48 = 68), the
    // fourth spills one block of the largest class first.
    let big: Vec<_> = (0..4).map(|_| alloc(16)).collect();
    for &p in &big {
        put(p);
    }
    assert_eq!(bins.state(), (68, 80));
    assert_eq!(
        kind(big[0]),
        PageKind::PcpLarge,
        "the coldest of the largest class"
    );
    assert_eq!(bins.c.spilled_pages.load(Relaxed), 16 + 16);

    // A tick: the owner's first use decays high by an eighth (80 → 70)
    // towards BINS_HIGH_MIN; 68 pages fit under it, nothing spills.
    env.tick();
    assert!(take(4).is_some());
    assert_eq!(bins.state(), (64, 70));

    // A thread that only frees: once free_count (pages freed since the
    // last allocation, halved by each) reaches twice high, the bins spill
    // down to a quarter of BINS_HIGH_MIN and high is cut by 64 pages (not
    // under BINS_HIGH_MIN). Here free_count is 35 (70 halved by the
    // allocation above); each 4-page free adds 4, so the 27th reaches
    // 2 × 70 = 140. Until then the 4-page bin fills and spills its colder
    // half every fourth free.
    let mut first = None;
    for i in 0..40 {
        put(alloc(4));
        if first.is_none() && bins.c.free_high.load(Relaxed) == 1 {
            first = Some((i, bins.state()));
        }
    }
    // 16 pages kept, then the block freed: 20; high cut to 6, raised to
    // BINS_HIGH_MIN.
    assert_eq!(first, Some((26, (20, BINS_HIGH_MIN))));
    assert_eq!(bins.c.free_high.load(Relaxed), 1, "free_count starts over");

    // Left alone for a whole tick, the bins go back to the pageset whole
    // (the tick after the one in which they were last used).
    env.tick();
    assert_ne!(bins.state().0, 0, "used during the last tick: kept");
    env.tick();
    assert_eq!(bins.state().0, 0, "idle for a whole tick: spilled");

    // A request takes a block up to two classes larger: 12 pages from a
    // 16-page block (classes 12, 14, 16), not 10 pages.
    let sixteen = alloc(16);
    put(sixteen);
    assert_eq!(take(10), None);
    assert_eq!(take(12), Some(sixteen as usize));
    bins.check();
    env.check();
}

/// A live large block of `npages` pages from `pages`, as its descriptor.
fn large_block(pages: &Pages<'_>, npages: usize) -> *mut pcpalloc::internals::LargeBlock {
    let p = large::alloc(pages, npages * PAGE_SIZE, PAGE_SIZE, false);
    assert!(!p.is_null());
    desc_of(p as usize).cast()
}

/// The large bins' fast paths (malloc's and free's first try) do only a
/// plain hit and a put that fits, and leave everything else — a miss, a
/// full bin, a put past `high`, the first use in a new tick — to the
/// whole path, untouched: the bins read the same after a refusal.
#[test]
fn large_bins_fast_paths_leave_the_rest_to_the_whole_path() {
    use pcpalloc::internals::{large_class_of, BINS_HIGH_MIN, BIN_SLOTS};
    // The runtime's init registers membarrier, which the biased owner
    // side (the fast paths' only way in) needs.
    assert!(pcpalloc::internals::ensure_init());
    let env = Env::new(256 << 20);
    let pages = env.pages();
    let h = env.heap();
    let bins = &h.block_bins;
    let epoch = || env.pa.zone.epoch();
    let alloc = |npages: usize| large_block(&pages, npages);
    let class = large_class_of(4);
    // SAFETY: this thread owns h; the blocks are env's, live until put.
    unsafe {
        // A miss: nothing done, not even counted; the whole path counts
        // it (and notes the tick of the owner's use: the bins' first).
        assert!(bins.take_hit(class, epoch()).0.is_null());
        assert_eq!(bins.c.misses.load(Relaxed), 0);
        assert!(bins.take(class, epoch(), || pages).0.is_null());
        assert_eq!(bins.c.misses.load(Relaxed), 1);
        // Eight fit; the ninth would need a spill: refused.
        let blocks: Vec<_> = (0..=BIN_SLOTS).map(|_| alloc(4)).collect();
        for &b in &blocks[..BIN_SLOTS] {
            assert!(bins.put_fits(b, class, epoch()));
        }
        assert!(!bins.put_fits(blocks[BIN_SLOTS], class, epoch()));
        assert_eq!(bins.state(), (BIN_SLOTS * 4, BINS_HIGH_MIN));
        assert_eq!(
            bins.c.free.load(Relaxed),
            BIN_SLOTS as u64,
            "refusals count nothing"
        );
        // A hit, last in first out.
        let (p, c) = bins.take_hit(class, epoch());
        assert_eq!((p, c), (blocks[BIN_SLOTS - 1].cast(), class));
        assert_eq!(bins.c.hits.load(Relaxed), 1);
        // Past high (64 pages): 28 + 40 pages would not fit.
        assert!(!bins.put_fits(alloc(40), large_class_of(40), epoch()));
        assert_eq!(bins.state(), (28, BINS_HIGH_MIN));
        // A new tick: both refuse, so the whole path decays high first.
        env.tick();
        assert!(bins.take_hit(class, epoch()).0.is_null());
        assert!(!bins.put_fits(blocks[BIN_SLOTS], class, epoch()));
        assert_eq!(bins.state(), (28, BINS_HIGH_MIN));
        let (q, _) = bins.take(class, epoch(), || pages);
        assert_eq!(q, blocks[BIN_SLOTS - 2].cast());
        // Back in the tick of the last use: the fast paths work again.
        assert!(bins.put_fits(blocks[BIN_SLOTS], class, epoch()));
    }
    bins.check();
}

/// A thread that only frees: the whole path spills a full bin's colder
/// half at each ninth free and counts the pages freed since the last
/// allocation; when the next free would bring that count to twice `high`,
/// the fast path refuses even though the block fits, so the whole path's
/// free_high spill runs.
#[test]
fn large_bins_put_fits_leaves_free_high_to_the_whole_path() {
    use pcpalloc::internals::{large_class_of, BINS_HIGH_MIN};
    assert!(pcpalloc::internals::ensure_init());
    let env = Env::new(256 << 20);
    let pages = env.pages();
    let h = env.heap();
    let bins = &h.block_bins;
    let epoch = || env.pa.zone.epoch();
    let class = large_class_of(4);
    let blocks: Vec<_> = (0..32).map(|_| large_block(&pages, 4)).collect();
    // SAFETY: this thread owns h; each block is env's, live until put.
    unsafe {
        assert!(bins.take(class, epoch(), || pages).0.is_null());
        for &b in &blocks[..31] {
            bins.put(b, class, epoch(), || pages);
        }
        // 31 frees of 4 pages: 124 counted; 7 blocks (28 pages) binned.
        assert_eq!(bins.state(), (28, BINS_HIGH_MIN));
        assert_eq!(bins.c.free_high.load(Relaxed), 0);
        assert!(
            !bins.put_fits(blocks[31], class, epoch()),
            "124 + 4 reaches 2 x 64"
        );
        assert_eq!(bins.state(), (28, BINS_HIGH_MIN));
        bins.put(blocks[31], class, epoch(), || pages);
        assert_eq!(bins.c.free_high.load(Relaxed), 1);
    }
    bins.check();
}

/// A deterministic generator (xorshift64) from `seed`.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// A size in `lo..hi` bytes, log-uniform, from the random word `r`.
fn log_uniform(r: u64, lo: usize, hi: usize) -> usize {
    let u = (r >> 11) as f64 / (1u64 << 53) as f64;
    ((lo as f64).ln() + u * (hi as f64 / lo as f64).ln()).exp() as usize
}

/// Large blocks of 1 MiB and up are taken as reclaimable, smaller ones as
/// movable, so the two sizes fill different pageblocks and a 4 MiB
/// block finds a whole free MAX_ORDER block rather than one a 40 KiB
/// block split. Deterministic: 64 live blocks of log-uniform size in
/// 16 KiB – 4 MiB, 50,000 random replacements, on a zone of its own. At
/// the end, MAX_ORDER blocks holding both a small and a big live block:
/// 3 by size (where one type stole the other's pageblock), 9 when all
/// blocks are of one type; and the zone grew to 156 MiB, not 176.
#[test]
fn big_and_small_large_blocks_keep_to_their_own_pageblocks() {
    use std::collections::HashMap;
    let env = Env::new(4 << 30);
    let pages = env.pages();
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let size = |r: u64| log_uniform(r, 16 << 10, 4 << 20);
    let mut live: Vec<(*mut u8, usize)> = (0..64)
        .map(|_| {
            let n = size(next());
            (large::alloc(&pages, n, PAGE_SIZE, false), n)
        })
        .collect();
    let mut peak = 0;
    for _ in 0..50_000 {
        let k = (next() % 64) as usize;
        // SAFETY: a live block of env's, freed once.
        unsafe { large::free(&pages, desc_of(live[k].0 as usize).cast()) };
        let n = size(next());
        live[k] = (large::alloc(&pages, n, PAGE_SIZE, false), n);
        assert!(!live[k].0.is_null());
        peak = peak.max(env.pa.zone.managed_pages());
    }
    // Which MAX_ORDER blocks (4 MiB) hold small and big live blocks.
    let mut holds: HashMap<usize, (bool, bool)> = HashMap::new();
    for &(p, n) in &live {
        let big = n >= 1 << 20;
        for b in [p as usize >> 22, (p as usize + n - 1) >> 22] {
            let e = holds.entry(b).or_default();
            e.0 |= !big;
            e.1 |= big;
        }
    }
    let mixed = holds.values().filter(|&&(s, b)| s && b).count();
    let mib = (peak * PAGE_SIZE) >> 20;
    eprintln!("{mixed} MAX_ORDER blocks hold both sizes; the zone grew to {mib} MiB");
    assert!(
        mixed <= 5,
        "{mixed} MAX_ORDER blocks hold both sizes (9 by type alone)"
    );
    assert!(mib <= 166, "the zone grew to {mib} MiB");
    for (p, _) in live {
        // SAFETY: as above.
        unsafe { large::free(&pages, desc_of(p as usize).cast()) };
    }
    env.check();
}

/// A large block the zone's free lists cannot fit drains every pageset's
/// large lists back to the zone before the zone grows (the kernel's
/// drain_all_pages when a high-order request fails): the cached blocks
/// merge with the free fragments around them. Deterministic: 128 live
/// blocks of log-uniform size in 8 – 256 KiB (the first band of the
/// page-granular benchmark), 50,000 random replacements, through one
/// pageset. The zone grows to 20 MiB, where it grew to 24 MiB when a
/// pageset's refill could grow it; and a run of free blocks is taken by
/// best fit, so 5 requests fit nowhere, 11 when the first run found was
/// taken.
#[test]
fn a_block_that_fits_nowhere_drains_the_pagesets_before_the_zone_grows() {
    let env = Env::new(4 << 30);
    let pages = env.pages();
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let size = |r: u64| log_uniform(r, 8 << 10, 256 << 10);
    let mut live: Vec<*mut u8> = (0..128)
        .map(|_| large::alloc(&pages, size(next()), PAGE_SIZE, false))
        .collect();
    let mut peak = 0;
    for _ in 0..50_000 {
        let k = (next() % 128) as usize;
        // SAFETY: a live block of env's, freed once.
        unsafe { large::free(&pages, desc_of(live[k] as usize).cast()) };
        live[k] = large::alloc(&pages, size(next()), PAGE_SIZE, false);
        assert!(!live[k].is_null());
        peak = peak.max(env.pa.zone.managed_pages());
    }
    let c = env.pa.zone.snapshot().counters;
    let mib = (peak * PAGE_SIZE) >> 20;
    eprintln!(
        "the zone grew to {mib} MiB; {} drains before growing",
        c.drain_before_grow
    );
    assert!(mib <= 22, "the zone grew to {mib} MiB");
    assert!(c.drain_before_grow > 0, "no drain before growing");
    assert!(
        c.drain_before_grow <= 7,
        "{} requests fit nowhere (11 by first fit)",
        c.drain_before_grow
    );
    for p in live {
        // SAFETY: as above.
        unsafe { large::free(&pages, desc_of(p as usize).cast()) };
    }
    env.check();
}

/// Objects that cycle through a bin are objects used again, for the
/// lifetime signal as much as those taken again from a slab's lists: 1000
/// temporaries of 16 B a round live and die on the bin (it holds 1024),
/// never reaching their slab, while 256 objects a round are kept, so the
/// class keeps making slabs. The refill of an empty bin counts what was
/// pushed on it since its last refill (`Bins::take_pushes`): 64 rounds
/// churn 31 slabs' worth against 8 slabs' worth kept, and every slab after
/// the first judgement is taken as short-lived (Reclaimable). Counting
/// only what came back through a slab's own lists, the class stayed
/// long-lived (0 short-lived slabs), so sh6bench's tiny classes took huge
/// pages under `dense` once bins grew to 1024 objects.
#[test]
fn objects_that_cycle_through_a_bin_count_as_used_again() {
    let env = Env::with_config(&ZoneConfig {
        group_by_lifetime: true,
        ..ZoneConfig::with_limit(64 << 20)
    });
    let h = env.heap();
    let class = class_of(16);
    let mut kept = Vec::new();
    for _ in 0..64 {
        // SAFETY: this thread drives h; each temporary is live and freed
        // once.
        unsafe {
            let mut o = h.owned();
            let temps: Vec<*mut u8> = (0..1000).map(|_| o.alloc(class, &env.pages())).collect();
            kept.extend((0..256).map(|_| o.alloc(class, &env.pages())));
            assert!(temps.iter().chain(&kept).all(|p| !p.is_null()));
            for p in temps {
                free_owned(&mut o, p, KEY, &env.pages());
            }
            assert!(o.local().bins.count(class) >= 1000);
        }
    }
    let made = h.slabs_created.load(Relaxed);
    let short = h.slabs_short_lived.load(Relaxed);
    eprintln!("{made} slabs made, {short} short-lived");
    assert_eq!((made, short), (9, 5));
    // SAFETY: this thread drives h; each kept object is live, freed once.
    unsafe {
        let mut o = h.owned();
        for p in kept {
            free_owned(&mut o, p, KEY, &env.pages());
        }
    }
    flush(&env, h);
    assert_eq!(env.check().1, 0);
}
