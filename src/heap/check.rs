//! The slab layer's invariant checker: [`Owned::check`] for one heap's
//! owner-side state, [`check_quiescent`] for every slab of a zone and
//! every heap. The invariants are written next to what they are about
//! (`heap.rs`, `slab.rs`, `parked.rs`, `bin.rs`); these functions assert
//! them, and panic on a broken one.

use core::sync::atomic::Ordering::Relaxed;

use crate::geometry::PAGE_SIZE;
use crate::page::PageKind;
use crate::page_alloc::zone::Zone;
use crate::section::desc_of;

use super::heap::{empty_slab, Heap, Owned, HEAP_LOST, PARK_HIGH_MAX};
use super::heaps::HeapRegistry;
use crate::slab::classes::{self, NR_CLASSES, SLAB_ORDER};
use crate::slab::object::FreeObject;
use crate::slab::remote_list;
use crate::slab::slab::{self, Slab};

impl Owned<'_> {
    /// Checks the owner-side invariants (bins hold objects of live slabs of
    /// their class or larger, slabs on the right lists, the delayed and
    /// emptied stacks, parked bytes within `park_high`). Returns the
    /// objects on the bins and on the chains of remote frees waiting to go
    /// to their slabs (free objects that their slabs count as used), and
    /// the slabs on the emptied stack. Only while no other thread uses the
    /// heap.
    pub fn check(&mut self) -> Checked {
        let me = self.owner_tag();
        let mut binned = 0;
        let bins = &self.local.bins;
        for class in 0..NR_CLASSES {
            let mut p = bins.head(class);
            let mut n = 0;
            while !p.is_null() {
                n += 1;
                assert!(n <= bins.count(class), "bin longer than its count");
                // SAFETY: bin objects are free objects of live slabs.
                unsafe {
                    let s = (*desc_of(p as usize)).head.load(Relaxed).cast::<Slab>();
                    assert!(!s.is_null(), "a bin object outside any slab");
                    assert_eq!((*s).kind.load(Relaxed), PageKind::Slab as u8);
                    assert!(
                        (*s).class as usize >= class,
                        "a bin object of a smaller class"
                    );
                    assert_eq!((*s).owner.load(Relaxed), me, "a bin object of another heap");
                    assert!(
                        crate::slab::marks::object_at(s, p).is_some(),
                        "a bin object off an object start"
                    );
                    p = FreeObject::at(p).next();
                }
            }
            assert_eq!(n, bins.count(class), "bin count");
            binned += n as usize;
        }
        // SAFETY: the slabs on our lists are ours; quiescent, so the lists
        // are read without their lock (a lost heap's may be held by a
        // thread that did not survive a fork).
        unsafe {
            let lists = &*self.heap.lists.get();
            for class in 0..NR_CLASSES {
                let cur = lists.current[class];
                if cur != empty_slab() {
                    assert_eq!((*cur).owner.load(Relaxed), me);
                    assert_eq!((*cur).class as usize, class);
                    assert!(!slab::in_full(cur), "a full current slab");
                }
                lists.partial[class].check();
                let mut s = lists.partial[class].first();
                while !s.is_null() {
                    assert_eq!((*s).owner.load(Relaxed), me, "partial slab of another heap");
                    assert!(!slab::in_full(s), "a full slab on the partial list");
                    assert!(
                        slab::used(s) > 0 || remote_list::is_queued(s),
                        "an empty slab on the partial list, not queued"
                    );
                    s = (*s).next;
                }
            }
            // The stacks other threads push to: full slabs of this heap
            // that got a remote free, and slabs a remote free emptied.
            let mut s = self.heap.delayed.load(Relaxed);
            while !s.is_null() {
                assert_eq!(
                    (*s).owner.load(Relaxed),
                    me,
                    "a delayed slab of another heap"
                );
                assert!(slab::in_full(s), "a delayed slab not marked full");
                s = (*s).next;
            }
        }
        let queued = self.check_emptied();
        let mut parked = 0;
        self.heap.parked.for_each(|e| {
            // SAFETY: under the parking lock the slab is stable.
            unsafe {
                assert_eq!(slab::used(e), 0, "a parked slab with live objects");
                assert!(
                    !remote_list::is_queued(e),
                    "a parked slab on the emptied stack"
                );
                assert_eq!(
                    (*e).order as u32,
                    SLAB_ORDER,
                    "a parked slab of another order"
                );
                assert_eq!((*e).owner.load(Relaxed), me);
            }
            parked += PAGE_SIZE << SLAB_ORDER;
        });
        assert_eq!(parked, self.heap.parked.bytes(), "parked bytes miscounted");
        assert!(parked <= self.local.park_high());
        assert!(self.local.park_high() <= PARK_HIGH_MAX);
        Checked {
            free_held: binned + self.local.remote.check(),
            queued,
        }
    }

    /// Checks the emptied stack: live, QUEUED slabs of this heap, none
    /// twice (the walk is bounded by the heap's slabs). Returns how many.
    fn check_emptied(&self) -> usize {
        let me = self.owner_tag();
        let made = self.heap.slabs_created.load(Relaxed) as usize;
        let mut n = 0;
        let mut s = self.heap.emptied.load(Relaxed);
        while !s.is_null() {
            n += 1;
            assert!(n <= made, "the emptied stack runs on (a slab on it twice?)");
            // SAFETY: the stack holds QUEUED slabs, which stay live.
            unsafe {
                assert_eq!((*s).kind.load(Relaxed), PageKind::Slab as u8);
                assert_eq!(
                    (*s).owner.load(Relaxed),
                    me,
                    "an emptied slab of another heap"
                );
                assert!(
                    remote_list::is_queued(s),
                    "a slab on the emptied stack not QUEUED"
                );
                s = *remote_list::emptied_link(s);
            }
        }
        n
    }
}

/// What [`Owned::check`] counts.
#[derive(Clone, Copy, Debug)]
pub struct Checked {
    /// Free objects their slabs count as used: on the bins, and on the
    /// chains of remote frees waiting to go to their slabs.
    pub free_held: usize,
    /// Slabs on the emptied stack.
    pub queued: usize,
}

/// Checks every slab of `zone`: its descriptor fields, the equation
/// `used + on free list = carved` (`used` counting live objects, objects
/// on bins and pending remote ones), that its owner is one of `heaps`, and
/// that every heap's bins and lists hold what they should. Returns (slabs,
/// objects in use by the program).
///
/// Only meaningful while no other thread allocates or frees (tests call it
/// after joining their threads); panics on a broken invariant.
// Called by the tests, through `internals`.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn check_quiescent(heaps: &HeapRegistry, zone: &Zone) -> (usize, usize) {
    let mut known: [usize; 4096] = [0; 4096];
    let mut nheaps = 0;
    heaps.for_each(|h| {
        if nheaps < known.len() {
            known[nheaps] = h as *const Heap as usize;
            nheaps += 1;
        }
        // The large bins too (a lost heap's may have been left mid-update
        // by a thread that did not survive a fork).
        if h.state.load(Relaxed) != HEAP_LOST {
            h.block_bins.check();
        }
    });
    let (mut slabs, mut live, mut queued) = (0, 0, 0);
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
                u32::from((*s).order),
                classes::SLAB_ORDER,
                "slab of the wrong order"
            );
            assert!(
                slab::free_view(d) == s,
                "slab head off its group of {} descriptors",
                classes::SLAB_PAGES
            );
            assert_eq!(usize::from((*s).bin_offset), class << classes::BIN_SHIFT);
            let info = classes::CLASS_INFO[class];
            assert_eq!(
                ((*s).obj_inverse, (*s).obj_shift),
                (info.inverse, info.shift),
                "object check of another class"
            );
            assert_eq!(
                (*s).base_mul,
                (slab::Slab::base(s) as u16).wrapping_mul(info.inverse),
                "object check of another base or class"
            );
            crate::slab::marks::check(s);
            let reserved = crate::slab::marks::reserved(s);
            assert!(reserved <= Slab::capacity(s));
            let owner = (*s).owner.load(Relaxed) as usize;
            assert!(known[..nheaps].contains(&owner), "slab owned by no heap");
            let free_len = slab::list_len((*s).free, Slab::capacity(s));
            let tf = (*s).thread_free.load(Relaxed);
            let tf_len = slab::list_len(slab::tf_list(tf), Slab::capacity(s));
            assert_eq!(
                slab::tf_count(tf) as usize,
                tf_len,
                "remote list count differs from its length"
            );
            assert_eq!(
                (*s).used as usize + free_len,
                reserved as usize,
                "slab object accounting"
            );
            assert!((*s).used as usize >= tf_len);
            live += (*s).used as usize - tf_len;
            if tf & slab::QUEUED != 0 {
                queued += 1;
            }
            let base = Slab::base(s);
            for i in 1..(1usize << (*s).order) {
                let t = desc_of(base + i * PAGE_SIZE);
                assert_eq!((*t).kind(), PageKind::SlabTail);
                assert_eq!((*t).head.load(Relaxed), d);
                assert_eq!(slab::free_view(t), s, "a tail's free view is not its head");
                assert_eq!(
                    (*t.cast::<Slab>()).reserved,
                    0,
                    "a tail carries an object bound"
                );
            }
        }
    });
    let (mut binned, mut on_stacks) = (0, 0);
    heaps.for_each(|h| {
        // SAFETY: quiescent: no thread uses any heap while this runs.
        let c = unsafe { h.owned().check() };
        binned += c.free_held;
        on_stacks += c.queued;
    });
    assert_eq!(
        queued, on_stacks,
        "QUEUED slabs and slabs on the emptied stacks differ"
    );
    assert!(
        binned <= live,
        "more objects on bins than slabs count in use"
    );
    (slabs, live - binned)
}
