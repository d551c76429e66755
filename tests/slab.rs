//! The small-object layer's parked slabs, driven through the malloc API on
//! one thread with no maintenance tick but the ones the test runs: the
//! exact `park_high` after a scripted sequence (it grows by what was given
//! back for lack of room and decays by 1/8 a tick), reuse of a parked
//! slab by another size class of the same slab order, and the tick taking
//! parked slabs back from a heap whose thread does nothing.
//!
//! This binary's global allocator is the system's, so the test thread's
//! heap sees only the calls made here. One test only: it reads counters of
//! a heap that another test's thread could adopt.

use pcpalloc::config::PAGE_SIZE;
use pcpalloc::malloc as m;
use pcpalloc::slab::classes::{class_of, CAPACITY, SLAB_ORDER};
use pcpalloc::slab::heap::{Heap, PARK_HIGH_MIN};
use std::sync::atomic::Ordering::Relaxed;

/// Allocates `slabs` slabs' worth of objects of `size` (every slab filled
/// exactly) and returns them.
fn fill(size: usize, slabs: usize) -> Vec<*mut u8> {
    let n = slabs * usize::from(CAPACITY[class_of(size)]);
    (0..n)
        .map(|i| {
            let p = m::malloc(size);
            assert!(!p.is_null());
            // SAFETY: p is a live block of at least `size` ≥ 8 bytes.
            unsafe { p.cast::<usize>().write(i) };
            p
        })
        .collect()
}

fn free_all(v: Vec<*mut u8>) {
    for (i, p) in v.into_iter().enumerate() {
        // SAFETY: p came from fill() and is freed once.
        unsafe {
            assert_eq!(p.cast::<usize>().read(), i, "object overwritten");
            m::free(p);
        }
    }
}

/// (park_high, park_missed, parked bytes, slabs created) of this thread.
fn heap_state(h: *mut Heap) -> (usize, usize, usize, u64) {
    // SAFETY: h is this thread's heap; only this thread writes it.
    unsafe {
        (
            (*h).park_high,
            (*h).park_missed,
            (*h).parked.bytes(),
            (*h).slabs_created.load(Relaxed),
        )
    }
}

#[test]
fn park_high_tunes_itself_and_parked_slabs_serve_any_class_of_their_order() {
    // Initialise, then keep the background thread and inline ticks away.
    // SAFETY: a live block freed once.
    unsafe { m::free(m::malloc(1)) };
    let s = &pcpalloc::tunables::SETTINGS;
    s.background.store(false, Relaxed);
    s.decay_ms.store(u32::MAX, Relaxed);
    assert!(!pcpalloc::maint::background_running());

    let (a, b) = (64, 128);
    assert_eq!(SLAB_ORDER[class_of(a)], 0);
    assert_eq!(SLAB_ORDER[class_of(b)], 0);
    let slab = PAGE_SIZE;
    let fits = PARK_HIGH_MIN / slab; // slabs parked before the first miss
    let n = fits + 36;

    let h = pcpalloc::slab::current_heap().expect("this thread has a heap");
    let (high0, missed0, parked0, created0) = heap_state(h);
    assert_eq!((high0, missed0, parked0), (PARK_HIGH_MIN, 0, 0));

    // n slabs of class a, all freed: the last stays current, `fits` are
    // parked, the rest go back and are remembered as missed.
    free_all(fill(a, n));
    let (high, missed, parked, created) = heap_state(h);
    assert_eq!(created - created0, n as u64);
    assert_eq!(high, PARK_HIGH_MIN);
    assert_eq!(parked, fits * slab);
    assert_eq!(missed, (n - 1 - fits) * slab);

    // n slabs of class b: the parked ones are set up again for b, and each
    // new slab grows park_high by one slab while misses are owed.
    let v = fill(b, n);
    let (high, missed, parked, created2) = heap_state(h);
    assert_eq!(parked, 0, "every parked slab was reused");
    assert_eq!(created2 - created, (n - fits) as u64);
    assert_eq!(missed, 0);
    assert_eq!(high, PARK_HIGH_MIN + (n - 1 - fits) * slab);
    free_all(v);

    // Now all n - 1 emptied slabs fit, and class a takes them back without
    // asking the page allocator.
    let (high, _, parked, created3) = heap_state(h);
    assert_eq!(parked, (n - 1) * slab);
    assert_eq!(parked, high);
    let v = fill(a, n);
    assert_eq!(heap_state(h).3, created3, "no new slab");
    free_all(v);
    let (slabs, live) = pcpalloc::check_invariants_quiescent();
    assert!(slabs >= n && live == 0, "{slabs} slabs, {live} live");

    // A tick takes the parked slabs back at once, without waiting for the
    // owner (an idle thread must not keep them) ...
    assert!(heap_state(h).2 > 0);
    pcpalloc::maint::tick();
    assert_eq!(heap_state(h).2, 0, "the tick took the parked slabs back");
    // ... and the owner's next slow path sees the tick: park_high decays.
    free_all(fill(b, 2)); // past the current slab: the slow path runs
    let (high2, missed, parked, _) = heap_state(h);
    assert_eq!(high2, high - high / 8);
    assert_eq!(missed, 0);
    assert!(parked <= slab);
    pcpalloc::check_invariants_quiescent();
}
