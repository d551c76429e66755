//! Small objects (≤ 8 KiB): size classes in slabs of order 0..=3 taken from
//! a page allocator as UNMOVABLE blocks, served from thread heaps.
//!
//! - `classes.rs`: the size classes and their slab orders;
//! - `slab.rs`: one slab and its descriptor (the [`Slab`] view);
//! - `heap.rs`: a thread heap over slabs ([`Heap`], and [`Owned`], its
//!   owner's handle);
//! - `object.rs`: a free object (its link and its free key);
//! - `free.rs`: the free path, with its checks;
//! - `parked.rs`: a heap's emptied slabs kept for reuse;
//! - `remote.rs`: other heaps' objects a thread freed, sent back in
//!   batches;
//! - `heaps.rs`: every heap of an allocator, and the abandoned ones.
//!
//! - `bin.rs`: a heap's list of free objects of one class, its thread
//!   cache.
//!
//! The fast paths: allocation pops the class's bin ([`Heap::alloc_fast`]:
//! no atomics, one branch); free pushes on the freeing thread's bin,
//! whichever heap owns the object's slab ([`free`]), after checking that
//! the pointer starts an object (a multiply, no division) and does not
//! carry the free key (a double free). Objects go back to their slabs in
//! batches: to the slab's own list from its owner's bins, by one CAS per
//! run onto its remote list from other threads' bins.

pub mod bin;
pub mod classes;
pub mod free;
pub mod heap;
pub mod heaps;
pub mod object;
pub mod parked;
pub mod remote;
#[allow(clippy::module_inception)]
pub mod slab;

pub use free::{
    checked_size, free, free_checked, free_keyed_or_own, free_owned, free_sized, free_slow,
    try_free_remote, Freed,
};
pub use heap::{Heap, Owned};
pub use heaps::HeapRegistry;
pub use slab::Slab;

use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::PAGE_SIZE;
use crate::page::PageKind;
use crate::page_alloc::zone::Zone;
use crate::section::desc_of;

/// Checks every slab of `zone`: its descriptor fields, the equation
/// `used + on free list = carved` (`used` counting live objects, objects
/// on bins and pending remote ones), that its owner is one of `heaps`, and
/// that every heap's bins and lists hold what they should. Returns (slabs,
/// objects in use by the program).
///
/// Only meaningful while no other thread allocates or frees (tests call it
/// after joining their threads); panics on a broken invariant.
pub fn check_quiescent(heaps: &HeapRegistry, zone: &Zone) -> (usize, usize) {
    let mut known: [usize; 4096] = [0; 4096];
    let mut nheaps = 0;
    heaps.for_each(|h| {
        if nheaps < known.len() {
            known[nheaps] = h as *const Heap as usize;
            nheaps += 1;
        }
    });
    let (mut slabs, mut live) = (0, 0);
    zone.for_each_used_block(|d| {
        // SAFETY: d heads a used block; the allocator is quiescent.
        unsafe {
            if (*d).kind() != PageKind::Slab {
                return;
            }
            let s = Slab::from_page(d);
            slabs += 1;
            assert_eq!(
                (*s).head.load(Relaxed),
                s,
                "slab head does not point to itself"
            );
            let class = (*s).class as usize;
            assert!(class < classes::NR_CLASSES);
            assert_eq!(
                (*s).order,
                classes::SLAB_ORDER[class],
                "slab of the wrong order"
            );
            assert_eq!((*s).capacity, classes::CAPACITY[class]);
            let info = classes::CLASS_INFO[class];
            assert_eq!(
                ((*s).obj_inverse, (*s).obj_shift),
                (info.inverse, info.shift),
                "object check of another class"
            );
            assert!((*s).reserved <= (*s).capacity);
            let owner = (*s).owner.load(Relaxed) as usize;
            assert!(known[..nheaps].contains(&owner), "slab owned by no heap");
            let free_len = slab::list_len((*s).free, (*s).capacity);
            let tf = (*s).thread_free.load(Relaxed) & !slab::FULL_NOTIFY;
            let tf_len = slab::list_len(tf as *mut u8, (*s).capacity);
            assert_eq!(
                (*s).used as usize + free_len,
                (*s).reserved as usize,
                "slab object accounting"
            );
            assert!((*s).used as usize >= tf_len);
            live += (*s).used as usize - tf_len;
            let base = Slab::base(s);
            for i in 1..(1usize << (*s).order) {
                let t = desc_of(base + i * PAGE_SIZE);
                assert_eq!((*t).kind(), PageKind::SlabTail);
                assert_eq!((*t).head.load(Relaxed), d);
            }
        }
    });
    let mut binned = 0;
    heaps.for_each(|h| {
        // SAFETY: quiescent: no thread uses any heap while this runs.
        binned += unsafe { h.owned().check() };
    });
    assert!(
        binned <= live,
        "more objects on bins than slabs count in use"
    );
    (slabs, live - binned)
}
