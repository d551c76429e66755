//! Small objects (≤ 8 KiB): size classes in slabs of order 0..=3 taken from
//! the pagesets as UNMOVABLE blocks, served from thread-local heaps.
//!
//! The fast paths are here: allocation pops the current slab's free list
//! (no atomics, one branch), a local free pushes onto it, a free from
//! another thread pushes onto the slab's `thread_free` with one CAS. Both
//! free paths check that the pointer starts an object (a multiply, no
//! division) and look at the block's free key to catch double frees.

pub mod classes;
pub mod heap;
pub mod parked;
#[allow(clippy::module_inception)]
pub mod slab;
pub mod tls;

use core::sync::atomic::Ordering::Relaxed;

use crate::page::{flags, Page};
use crate::report;
use crate::section::{offset_in_block, page_addr};
use crate::state;

use classes::{class_of, CLASS_SIZE};
use heap::Heap;

/// Allocates `size` ≤ SMALL_MAX bytes. Null when out of memory.
#[inline(always)]
pub fn alloc(size: usize) -> *mut u8 {
    alloc_class(class_of(size))
}

/// Allocates one object of `class`. Null when out of memory.
#[inline(always)]
pub fn alloc_class(class: usize) -> *mut u8 {
    let h = tls::heap();
    // SAFETY: h is this thread's heap (or the static empty heap, whose bins
    // all point at the empty slab); class < NR_CLASSES by construction.
    unsafe {
        let slab = *(*h).current.get_unchecked(class);
        if !(*slab).free.is_null() {
            return heap::pop(slab);
        }
        heap::alloc_slow(h, class)
    }
}

/// The usable size of an object of slab `slab`.
///
/// # Safety
/// `slab` is a live slab's head descriptor.
#[inline]
pub unsafe fn usable_size(slab: *const Page) -> usize {
    // SAFETY: forwarded contract.
    CLASS_SIZE[unsafe { (*slab).class } as usize] as usize
}

/// Frees object `p` of slab `slab`.
///
/// # Safety
/// `slab` is the `head` of the descriptor of `p`'s page (non-null), and the
/// caller is freeing `p` (it may be invalid: that is checked and reported).
#[inline(always)]
pub unsafe fn free(p: *mut u8, slab: *mut Page) {
    // SAFETY: slab is a live slab head (its page descriptor said so); the
    // object check below proves p starts an object of it before we write.
    unsafe {
        let obj = p as *mut usize;
        let key = state::free_key();
        let h = tls::heap();
        if slab::object_index(slab, offset_in_block(p as usize, slab)).is_some()
            && obj.add(1).read() != key
            && (*slab).owner.load(Relaxed) == h.cast()
        {
            push_local(h, slab, p, key);
            return;
        }
        free_other(p, slab, h);
    }
}

/// The owner frees `p`: push it on the slab's own list.
///
/// # Safety
/// `h` owns `slab`, and `p` is a live object of it.
#[inline(always)]
unsafe fn push_local(h: *mut Heap, slab: *mut Page, p: *mut u8, key: usize) {
    // SAFETY: owner-only fields; p is ours to relink (contract).
    unsafe {
        let obj = p as *mut usize;
        obj.write((*slab).free as usize);
        obj.add(1).write(key);
        (*slab).free = p;
        (*slab).aux -= 1;
        if (*slab).aux == 0 || (*slab).flags & flags::IN_FULL != 0 {
            heap::free_local_slow(h, slab);
        }
    }
}

/// Every free of a small object but the plain local one: invalid pointers,
/// suspected double frees, and frees from threads that do not own the slab.
#[inline(never)]
unsafe fn free_other(p: *mut u8, slab: *mut Page, h: *mut Heap) {
    // SAFETY: as in `free`; the checks are repeated here in full.
    unsafe {
        if slab::object_index(slab, p as usize - page_addr(slab)).is_none() {
            report::fatal("free(): invalid pointer (not the start of a block)", p);
        }
        let obj = p as *mut usize;
        let key = state::free_key();
        let mine = (*slab).owner.load(Relaxed) == h.cast();
        if obj.add(1).read() == key {
            free_suspect(p, slab, mine);
        }
        if mine {
            push_local(h, slab, p, key);
        } else if slab::push_remote(slab, p, key) {
            heap::notify_owner(slab);
        }
    }
}

/// The block carries the free key: it is free already, unless its owner's
/// lists say otherwise (the key can only be there by coincidence if the
/// program wrote it). Aborts on a double free.
#[cold]
#[inline(never)]
unsafe fn free_suspect(p: *mut u8, s: *mut Page, mine: bool) {
    if !mine {
        // Another thread's lists cannot be walked safely; the key is 64
        // random bits, so a live block holds it only if the program copied
        // it out of a freed block.
        report::fatal("free(): double free detected", p);
    }
    // SAFETY: we own s, so its free list is ours; its remote list only
    // grows at the head (we are the only one who takes from it), so walking
    // from a snapshot is safe.
    unsafe {
        if slab::on_free_list(s, p) {
            report::fatal("free(): double free detected", p);
        }
        let mut q = ((*s).thread_free.load(core::sync::atomic::Ordering::Acquire)
            & !slab::FULL_NOTIFY) as *mut u8;
        let mut steps = 0;
        while !q.is_null() && steps <= (*s).capacity {
            if q == p {
                report::fatal("free(): double free detected", p);
            }
            q = (q as *mut usize).read() as *mut u8;
            steps += 1;
        }
    }
}

/// The calling thread's heap (for stats and trim), if it has one.
pub fn current_heap() -> Option<*mut Heap> {
    let h = tls::heap();
    (!core::ptr::eq(h, core::ptr::addr_of!(heap::EMPTY_HEAP))).then_some(h)
}

/// Checks every slab in the allocator: its descriptor fields, the equation
/// `live + pending remote (aux) + on free list = carved (reserved)`, that
/// its owner is a real heap, and that every heap's lists hold only its own
/// slabs in the right state. Returns (slabs, objects in use).
///
/// Only meaningful while no other thread allocates or frees (tests call it
/// after joining their threads); panics on a broken invariant.
pub fn check_quiescent() -> (usize, usize) {
    let mut heaps: [usize; 4096] = [0; 4096];
    let mut nheaps = 0;
    heap::for_each(|h| {
        if nheaps < heaps.len() {
            heaps[nheaps] = h as usize;
            nheaps += 1;
        }
    });
    let (mut slabs, mut live) = (0, 0);
    state::ZONE.for_each_used_block(|d| {
        // SAFETY: d heads a used block; the allocator is quiescent.
        unsafe {
            if (*d).kind() != crate::page::PageKind::Slab {
                return;
            }
            slabs += 1;
            assert_eq!(
                (*d).head.load(Relaxed),
                d,
                "slab head does not point to itself"
            );
            let class = (*d).class as usize;
            assert!(class < classes::NR_CLASSES);
            assert_eq!(
                (*d).order,
                classes::SLAB_ORDER[class],
                "slab of the wrong order"
            );
            assert_eq!((*d).capacity, classes::CAPACITY[class]);
            let info = classes::CLASS_INFO[class];
            assert_eq!(
                ((*d).obj_inverse, (*d).obj_shift),
                (info.inverse, info.shift),
                "object check of another class"
            );
            assert!((*d).reserved <= (*d).capacity);
            let owner = (*d).owner.load(Relaxed) as usize;
            assert!(heaps[..nheaps].contains(&owner), "slab owned by no heap");
            let free_len = list_len((*d).free, (*d).capacity);
            let tf = (*d).thread_free.load(Relaxed) & !slab::FULL_NOTIFY;
            let tf_len = list_len(tf as *mut u8, (*d).capacity);
            assert_eq!(
                (*d).aux as usize + free_len,
                (*d).reserved as usize,
                "slab object accounting"
            );
            assert!((*d).aux as usize >= tf_len);
            live += (*d).aux as usize - tf_len;
            let base = page_addr(d);
            for i in 1..(1usize << (*d).order) {
                let t = crate::section::desc_of(base + i * crate::config::PAGE_SIZE);
                assert_eq!((*t).kind(), crate::page::PageKind::SlabTail);
                assert_eq!((*t).head.load(Relaxed), d);
            }
        }
    });
    for &h in &heaps[..nheaps] {
        let h = h as *mut Heap;
        // SAFETY: heaps live forever; quiescent.
        unsafe {
            for class in 0..classes::NR_CLASSES {
                let cur = (*h).current[class];
                if !core::ptr::eq(cur, core::ptr::addr_of!(heap::EMPTY_SLAB)) {
                    assert_eq!((*cur).owner.load(Relaxed), h.cast());
                    assert_eq!((*cur).class as usize, class);
                }
                (*h).partial[class].check();
                let mut s = (*h).partial[class].first();
                while !s.is_null() {
                    assert_eq!(
                        (*s).owner.load(Relaxed),
                        h.cast(),
                        "partial slab of another heap"
                    );
                    assert!((*s).flags & flags::IN_FULL == 0);
                    assert!((*s).aux > 0, "an empty slab on the partial list");
                    s = (*s).next;
                }
            }
            let mut parked = 0;
            (*h).parked.for_each(|e, order| {
                assert_eq!((*e).aux, 0, "a parked slab with live objects");
                assert_eq!((*e).order as usize, order, "parked on the wrong list");
                assert_eq!((*e).owner.load(Relaxed), h.cast());
                parked += crate::config::PAGE_SIZE << order;
            });
            assert_eq!(parked, (*h).parked.bytes(), "parked bytes miscounted");
            assert!(parked <= (*h).park_high);
            assert!((*h).park_high <= heap::PARK_HIGH_MAX);
        }
    }
    (slabs, live)
}

/// Length of an object free list, bounded by `cap` (panics past it).
unsafe fn list_len(mut p: *mut u8, cap: u16) -> usize {
    let mut n = 0;
    while !p.is_null() {
        n += 1;
        assert!(n <= cap as usize, "free list longer than the slab (cycle?)");
        // SAFETY: the list links free objects of a live slab (caller).
        p = unsafe { (p as *mut usize).read() } as *mut u8;
    }
    n
}
