//! Zone operations never call the system malloc: a counting global
//! allocator wraps System and counts every call made by this thread while
//! the zone works.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use pcpalloc::internals::{MigrateType, PageKind, PageList};
use pcpalloc::internals::{Zone, ZoneConfig};

struct Counting;

static CALLS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if WATCHING.with(|w| w.get()) {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to System after counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note();
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn zone_operations_do_not_allocate() {
    let zone = Box::new(Zone::new());
    let mut blocks = [core::ptr::null_mut(); 256];
    WATCHING.with(|w| w.set(true));
    zone.configure(&ZoneConfig::with_limit(64 << 20));
    for (i, b) in blocks.iter_mut().enumerate() {
        let mt = MigrateType::from_index(i % 3);
        *b = zone.alloc((i % 5) as u32, mt);
        assert!(!b.is_null());
        // SAFETY: the block is ours.
        unsafe { (**b).set_kind(PageKind::Large) };
    }
    let mut list = PageList::new();
    let got = zone.rmqueue_bulk(0, 63, MigrateType::Movable, &mut list);
    assert_eq!(got, 63);
    {
        let mut g = zone.lock();
        // SAFETY: the pages came from this zone's rmqueue_bulk.
        unsafe {
            loop {
                let p = list.pop_front();
                if p.is_null() {
                    break;
                }
                g.free_one_page(p, 0);
            }
        }
    }
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: allocated above with this order.
        unsafe {
            (**b).flags = 0;
            zone.free(*b, (i % 5) as u32);
        }
    }
    zone.advance_epoch();
    zone.advance_epoch();
    let released = zone.release_idle(1, 0);
    let snap = zone.snapshot();
    let walk = zone.check_invariants();
    WATCHING.with(|w| w.set(false));
    assert_eq!(CALLS.load(Ordering::Relaxed), 0, "the zone called malloc");
    assert!(released > 0);
    assert_eq!(walk.used, 0);
    assert_eq!(snap.free, snap.managed);
    // SAFETY: nothing uses the zone any more.
    unsafe { zone.destroy() };
}
