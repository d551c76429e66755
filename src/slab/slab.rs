//! A slab: a block of order 3 (`classes::SLAB_ORDER`) cut into objects of
//! one size class, and its descriptor — the [`Slab`] view of the block's
//! head page descriptor, as the kernel overlays `struct slab` on `struct
//! page`.
//!
//! An object's slab is found from the object's address alone: section →
//! the descriptor of the first page of its aligned group of eight
//! ([`lookup`], [`free_view`]; every tail's `head` points there too).
//! Objects are handed out from three places, in this order:
//!
//! - `free`: the owner's list (no atomics; only the owning heap touches it);
//! - `thread_free`: objects freed by other threads, pushed with CAS; the
//!   owner takes the whole list with one swap when `free` runs dry (the
//!   word and its flags: `remote_list.rs`);
//! - the untouched tail (`reserved` < `capacity`), carved a page at a time
//!   so a new slab costs no more memory than it serves.
//!
//! Invariant: `used` counts objects handed out and not yet back on `free`
//! (objects on a bin, waiting on another thread's chain of remote frees,
//! or on `thread_free`, still count), so `used + len(free) = reserved`,
//! and `used == 0` means the slab holds no live object and can go back to
//! the page allocator. `used == tf_count(thread_free)` means the same once
//! the remote list is collected: every object of the slab is free
//! ([`all_free`]).
//!
//! Free-block layout: word 0 links the list; word 1 holds the process's
//! free key, so `free` recognises a block that is already free (a double
//! free) in O(1).
//!
//! `used` and `flags` are read by other threads (a remote freer's guess,
//! a collector's [`all_free`]) while the owner's free path writes them: both
//! are accessed as atomics (plain loads and stores, no read-modify-write),
//! and the owner stores `used` with release, so a reader that sees a count
//! also sees the object the owner put on `free` before it.

use core::sync::atomic::Ordering::{Relaxed, Release};
use core::sync::atomic::{AtomicPtr, AtomicU16, AtomicU8, AtomicUsize};

use crate::geometry::{PAGE_DESC_SIZE, PAGE_SIZE};
use crate::page::{Linked, Page, PageKind};
use crate::section::{self, desc_of, page_addr};

use super::classes::{self, BIN_SHIFT, CAPACITY, CLASS_INFO, CLASS_SIZE};
use super::object::FreeObject;

/// Low bit of `thread_free`: the slab is full and its owner wants to hear
/// about the next remote free.
pub(crate) const FULL_NOTIFY: usize = 1;
/// Bit 1 of `thread_free`: a remote free left every object of the slab
/// free, and the slab is on its owner heap's emptied stack (or on its way
/// there). See the module docs.
pub(crate) const QUEUED: usize = 2;
/// The flag bits of `thread_free` (objects are 16-byte aligned, so a list
/// head never has them).
pub(super) const TF_FLAGS: usize = FULL_NOTIFY | QUEUED;
/// Where `thread_free` keeps how many objects its list holds: the top 16
/// bits, above the 47 bits of a user address (a section is below 2^47, see
/// `section::is_ours`), so the owner takes list and count with one swap
/// and need not walk the list (snmalloc's counted batches, in one word).
pub(super) const TF_COUNT_SHIFT: u32 = 48;
/// The list's first object in `thread_free`.
pub(super) const TF_PTR_MASK: usize = ((1 << TF_COUNT_SHIFT) - 1) & !TF_FLAGS;

/// The first object of the remote list in `thread_free` word `tf`.
#[inline(always)]
pub fn tf_list(tf: usize) -> *mut u8 {
    (tf & TF_PTR_MASK) as *mut u8
}

/// How many objects the remote list in `thread_free` word `tf` holds.
#[inline(always)]
pub fn tf_count(tf: usize) -> u32 {
    (tf >> TF_COUNT_SHIFT) as u32
}
/// `flags`: the slab is full and on no list; a local free or a delayed-free
/// notice brings it back to the partial list.
pub(crate) const IN_FULL: u8 = 1 << 1;
/// Bytes carved from a slab's untouched tail at a time: a page, whose
/// objects' links the carving writes. A class of a few KiB thus gets one
/// or two objects a slow path while its slabs fill; carving 16 at least
/// wrote every page of a 32 KiB slab for a thread that asked for one
/// 2 KiB object — 8 pages resident where glibc touches one (a storm of
/// short threads each allocating a few objects of many classes faulted
/// in 5 MiB of slab pages a wave).
const EXTEND_BYTES: usize = PAGE_SIZE;
/// ... and at least this many objects (an object over a page).
const EXTEND_MIN_OBJECTS: usize = 1;

/// The descriptor of a slab's head page, seen as a slab. See the module
/// docs for the invariants; the owner is the thread heap in `owner`.
#[repr(C, align(64))]
pub struct Slab {
    /// `PageKind::Slab`.
    pub kind: AtomicU8,
    /// The slab's order (`classes::SLAB_ORDER`).
    pub order: u8,
    _migratetype: u8,
    /// `IN_FULL`. Accessed as an atomic ([`in_full`]): written by the
    /// owner (and by a collector holding the heap's lists, see
    /// `emptied.rs`), read by the owner's free path.
    pub flags: u8,
    /// Objects handed out and not back on `free`. Written by the owner (or
    /// a collector holding the heap's lists) with release stores, read by
    /// anyone ([`used`]).
    pub used: u16,
    /// The low 16 bits of the slab's address times `obj_inverse` (mod
    /// 2^16): the free path's object check multiplies `p as u16` by the
    /// inverse and takes this off, which is the offset `(p as u16) -
    /// base` times the inverse (slabs are at most 32 KiB) without loading
    /// the base first. Rewritten with the class.
    pub base_mul: u16,
    /// The owner heap's list links (partial or parked lists, or the
    /// delayed stack through `next`).
    pub next: *mut Slab,
    /// See `next`.
    pub prev: *mut Slab,
    /// This slab (every page of a slab points at its head).
    pub head: AtomicPtr<Slab>,
    /// The thread heap owning the slab; fixed for the slab's life.
    pub owner: AtomicPtr<u8>,
    /// The owner's free list of objects (owner-only).
    pub free: *mut u8,
    /// Objects freed by other threads, pushed with CAS: the first object,
    /// `FULL_NOTIFY` and `QUEUED` in the low bits, and in the top 16 bits
    /// how many the list holds ([`tf_list`], [`tf_count`]).
    pub thread_free: AtomicUsize,
    /// Size class index.
    pub class: u8,
    /// The class's `classes::ClassInfo` `shift` (the free path's object
    /// check, here so it needs no table).
    pub obj_shift: u8,
    /// The class's `classes::ClassInfo` `inverse`.
    pub obj_inverse: u16,
    /// Objects carved so far (the rest is untouched): the free path's
    /// object check takes only these as objects, so a free of a slot never
    /// handed out is refused. Zero in every other descriptor, tails
    /// included ([`crate::page::Page::object_bound`]) — and in a slab
    /// holding a sampled object, which keeps the count apart so that every
    /// free of it takes the slow path (`marks.rs`): the owner reads and
    /// writes it through [`marks::reserved`](super::marks::reserved).
    pub reserved: u16,
    /// The byte offset of the class's bin in a heap's bins (`class <<
    /// classes::BIN_SHIFT`): the free path reaches the bin with one load and
    /// one add. (How many objects the slab holds is the class's:
    /// [`Slab::capacity`].)
    pub bin_offset: u16,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<Slab>() == PAGE_DESC_SIZE);
    assert!(offset_of!(Slab, kind) == offset_of!(Page, kind));
    assert!(offset_of!(Slab, order) == offset_of!(Page, order));
    assert!(offset_of!(Slab, flags) == offset_of!(Page, flags));
    assert!(offset_of!(Slab, next) == offset_of!(Page, next));
    assert!(offset_of!(Slab, prev) == offset_of!(Page, prev));
    assert!(offset_of!(Slab, head) == offset_of!(Page, head));
    assert!(offset_of!(Slab, reserved) == crate::page::OBJECT_BOUND_OFFSET);
};

// SAFETY: a Slab is only reached through raw pointers whose use follows
// the ownership rules in the module docs; cross-thread fields are atomics.
unsafe impl Sync for Slab {}
// SAFETY: as above.
unsafe impl Send for Slab {}

// SAFETY: next and prev are the slab's own link fields.
unsafe impl Linked for Slab {
    #[inline(always)]
    unsafe fn links(p: *mut Slab) -> (*mut *mut Slab, *mut *mut Slab) {
        // SAFETY: p is valid (contract).
        unsafe {
            (
                core::ptr::addr_of_mut!((*p).next),
                core::ptr::addr_of_mut!((*p).prev),
            )
        }
    }
}

impl Slab {
    /// How many objects live slab `s` holds (its class's).
    ///
    /// # Safety
    /// `s` is a live slab.
    #[inline]
    pub unsafe fn capacity(s: *const Slab) -> u16 {
        // SAFETY: a live slab's class is a valid index (contract).
        CAPACITY[usize::from(unsafe { (*s).class })]
    }

    /// The slab whose head page descriptor is `p`.
    #[inline(always)]
    pub fn from_page(p: *mut Page) -> *mut Slab {
        p.cast()
    }

    /// The head page descriptor of slab `s`.
    #[inline(always)]
    pub fn page(s: *mut Slab) -> *mut Page {
        s.cast()
    }

    /// The owner of live slab `s`, read as a plain word so the compare
    /// can take it from memory (one instruction fewer on the free path).
    ///
    /// # Safety
    /// `s` is a live slab. Its `owner` is written by [`init`], before any
    /// of its objects is handed out, so that write happens-before every
    /// valid free of one; the descriptor is rewritten only once the slab
    /// holds no live object ([`fini`]), after which only an invalid free
    /// (of a pointer no longer live) could read it — as it could read the
    /// other plain fields the object check reads, with the same outcome:
    /// garbage that the checks refuse, or the slow path.
    #[inline(always)]
    pub unsafe fn fixed_owner(s: *const Slab) -> *mut u8 {
        // SAFETY: an AtomicPtr has the layout of a pointer; a valid free
        // races with no write (contract).
        unsafe { core::ptr::addr_of!((*s).owner).cast::<*mut u8>().read() }
    }

    /// The address of the slab's first object.
    #[inline(always)]
    pub fn base(s: *const Slab) -> usize {
        page_addr(s.cast())
    }
}

/// Turns the block at `head` (order `classes::SLAB_ORDER`, every slab's)
/// into an empty slab of class `class` owned by `owner`.
///
/// # Safety
/// `head` heads a block the caller owns, of order `classes::SLAB_ORDER`
/// (a buddy block of that order is aligned to its size).
pub(crate) unsafe fn init(head: *mut Page, class: usize, owner: *mut u8) -> *mut Slab {
    let s = Slab::from_page(head);
    // Every free finds its slab by masking (`lookup`): a slab off its
    // alignment would take its neighbours' frees. Checked on this cold
    // path in release builds too, reported without allocating.
    if free_view(head) != s {
        crate::alert::fatal(
            "internal error: a slab block off its alignment at",
            head.cast(),
        );
    }
    // SAFETY: the caller owns the block and all its descriptors.
    unsafe {
        (*s).order = classes::SLAB_ORDER as u8;
        set_class(s, class);
        (*s).flags = 0;
        (*s).used = 0;
        (*s).reserved = 0;
        (*s).next = core::ptr::null_mut();
        (*s).prev = core::ptr::null_mut();
        (*s).free = core::ptr::null_mut();
        (*s).thread_free.store(0, Relaxed);
        (*s).owner.store(owner, Relaxed);
        (*s).head.store(s, Relaxed);
        let base = Slab::base(s);
        for i in 1..classes::SLAB_PAGES {
            let t = desc_of(base + i * PAGE_SIZE);
            (*t).head.store(head, Relaxed);
            (*t).next = core::ptr::null_mut(); // the emptied-stack link
            (*t).clear_tail_words(); // no sampled object (`marks.rs`)
            (*t).set_kind(PageKind::SlabTail);
        }
        // Publish the kind last: a racing invalid free that sees Slab also
        // sees the fields above.
        (*s).kind.store(PageKind::Slab as u8, Release);
    }
    s
}

/// Writes the class and what the free path's object check needs of it.
///
/// # Safety
/// The caller owns the slab; its `order` is set.
unsafe fn set_class(s: *mut Slab, class: usize) {
    let info = CLASS_INFO[class];
    let base_mul = (Slab::base(s) as u16).wrapping_mul(info.inverse);
    // SAFETY: forwarded contract: the slab's descriptor is the caller's.
    unsafe {
        (*s).class = class as u8;
        (*s).base_mul = base_mul;
        (*s).obj_inverse = info.inverse;
        (*s).obj_shift = info.shift;
        (*s).bin_offset = (class << BIN_SHIFT) as u16;
    }
}

/// The slab that page descriptor `d` belongs to, if any: the first
/// descriptor of its aligned group of [`classes::SLAB_PAGES`] — its *free
/// view*, all a free reads (the object check's `base_mul`, `obj_inverse`,
/// `obj_shift`, `bin_offset` and `reserved`, the `owner` and the `class`).
/// A slab is a block of that many pages aligned to its size, so the group
/// of any of its pages starts at its head: a free needs no load of `head`
/// first, and the frees of a slab's objects share one descriptor's line
/// (per-page copies of it cost larsonN 4% and sh6bench 3%, from the
/// descriptor misses).
///
/// Any other descriptor may be seen through this view by the object
/// check alone ([`object_at`]), which fails there: the group's first
/// descriptor is then no live slab's (else the whole group would be that
/// slab's), so its `reserved` is zero ([`Page::object_bound`]).
///
/// Safe to call (it only computes an address); only the object check may
/// read through the result unless `d` is a live slab's page (its `head`
/// non-null).
#[inline(always)]
pub(crate) fn free_view(d: *mut Page) -> *mut Slab {
    (d as usize & !(classes::SLAB_PAGES * PAGE_DESC_SIZE - 1)) as *mut Slab
}

/// The slab `addr` would belong to, if `addr` lies in one of our
/// sections: the descriptor of the head page of its aligned block of
/// [`classes::SLAB_PAGES`] pages ([`section::lookup_block`]) seen as a
/// slab — the free path's only lookup. It is `addr`'s slab when `addr`
/// lies in one (a slab is such a block); otherwise it is some other
/// descriptor, which only the object check ([`object_at`]) may read: its
/// `reserved` is zero ([`Page::object_bound`]), so the check fails.
///
/// That read is unlocked. For a pointer into a page-granular block whose
/// head is not the group's first page, the descriptor read belongs to
/// another block — possibly a free one the zone-lock holder is relinking
/// or resetting at that moment. Every writer of those blocks leaves bytes
/// 56..63 (the object check's) at zero (`Page::reset` writes zeros over
/// zeros; no other view writes them), so the check reads zero whatever it
/// races with: a benign race on plain bytes, as with `Slab::fixed_owner`'s
/// read of a dead slab.
#[inline(always)]
pub(crate) fn lookup(addr: usize) -> Option<*mut Slab> {
    section::lookup_block(addr, classes::SLAB_ORDER).map(Slab::from_page)
}

/// The index of the object of slab `s` that starts at `p`, if one does
/// and it was carved (one multiply and one subtraction, no table: see
/// `classes::ClassInfo`): a slot of the untouched tail was never handed
/// out, so freeing it is refused — else the slot, pushed on a bin and
/// later carved again, would be handed out twice.
///
/// # Safety
/// `s` is a live slab and `p` lies in its pages.
#[inline(always)]
pub(crate) unsafe fn object_at(s: *const Slab, p: *const u8) -> Option<usize> {
    // SAFETY: forwarded contract; the fields were set by init together.
    unsafe {
        classes::object_index_scaled(
            (p as usize as u16)
                .wrapping_mul((*s).obj_inverse)
                .wrapping_sub((*s).base_mul),
            (*s).obj_shift,
            (*s).reserved,
        )
    }
}

/// The usable size of an object of slab `s`.
///
/// # Safety
/// `s` is a live slab.
#[inline]
pub(crate) unsafe fn object_size(s: *const Slab) -> usize {
    // SAFETY: forwarded contract; a live slab's class is a class index
    // (set by `set_class`), so the table read is in range.
    unsafe {
        let class = (*s).class as usize;
        debug_assert!(class < CLASS_SIZE.len());
        *CLASS_SIZE.get_unchecked(class) as usize
    }
}

/// Sets up an empty slab again for another `class`: its
/// objects are forgotten and carved anew from the untouched tail.
///
/// # Safety
/// `s` is a slab owned by the calling heap, with no live object, no
/// pending remote free, and on no list.
pub(crate) unsafe fn reinit(s: *mut Slab, class: usize) {
    // SAFETY: the caller owns the slab; nobody else may touch its objects.
    unsafe {
        debug_assert_eq!(used(s), 0);
        debug_assert_eq!(u32::from((*s).order), classes::SLAB_ORDER);
        debug_assert_eq!((*s).thread_free.load(Relaxed), 0);
        set_class(s, class);
        (*s).reserved = 0;
        (*s).free = core::ptr::null_mut();
    }
}

/// Undoes [`init`] before the block goes back to the page allocator; the
/// head keeps only its order. Returns the head page descriptor.
///
/// # Safety
/// `s` is a slab with no live objects, owned by the caller.
pub(crate) unsafe fn fini(s: *mut Slab) -> *mut Page {
    let head = Slab::page(s);
    // SAFETY: the caller owns the slab and its descriptors.
    unsafe {
        let order = u32::from((*s).order);
        let base = Slab::base(s);
        for i in 1..(1usize << order) {
            let t = desc_of(base + i * PAGE_SIZE);
            (*t).head.store(core::ptr::null_mut(), Relaxed);
            (*t).next = core::ptr::null_mut();
            (*t).set_kind(PageKind::None);
        }
        (*head).reset();
        (*head).order = order as u8; // the memory was written: not clean
    }
    head
}

/// Takes every object off the slab's own list, for a bin: returns the
/// first and how many (in O(1): the invariant gives the count); the slab
/// counts them as in use. `reserved` is the slab's objects carved (kept
/// apart while it holds a sampled object: `marks::reserved`).
///
/// # Safety
/// `s` is owned by the calling heap.
#[inline]
pub(crate) unsafe fn take_all(s: *mut Slab, reserved: u16) -> (*mut u8, u32) {
    // SAFETY: owner-only fields; the objects on `free` become the caller's.
    unsafe {
        let head = core::mem::replace(&mut (*s).free, core::ptr::null_mut());
        // Invariant: used + len(free) = reserved.
        let n = reserved - used(s);
        set_used(s, reserved);
        (head, u32::from(n))
    }
}

/// The owner takes back object `p` from a bin onto the slab's own list.
/// Returns true if the slab needs the heap's attention: every object of
/// it is free now (`used` down to the remote list's count: none live, on
/// a bin or on a chain), or it is full and waits for the first remote free
/// (FULL_NOTIFY: it must come back to the partial list; a full slab whose
/// notice a remote free took comes back through the delayed stack).
///
/// `thread_free` is read first and `used` stored last (with release): once
/// a collector sees the new count, this free is done with the slab. (A
/// remote push landing in between is missed here and, having read `used`
/// before, there too: the sweep of `emptied.rs` finds such a slab.)
///
/// # Safety
/// The calling heap owns `s`; `p` is an object of `s` that the slab counts
/// as in use and nobody uses (it carries the free key already).
#[inline]
pub(crate) unsafe fn give_back(s: *mut Slab, p: *mut u8) -> bool {
    // SAFETY: owner-only fields (`free`); p is ours to relink (contract);
    // `used` through its atomic view.
    unsafe {
        let tf = (*s).thread_free.load(Relaxed);
        FreeObject::at(p).set_next((*s).free);
        (*s).free = p;
        let n = used(s).wrapping_sub(1); // `used` ≥ 1 here
        set_used(s, n);
        // The count compared as 16 bits, as `used` is kept.
        tf & FULL_NOTIFY != 0 || tf_count(tf) as u16 == n
    }
}

/// `used` of slab `s` (see the struct), as any thread may read it.
///
/// # Safety
/// `s` is a slab descriptor (live, or one whose block the caller knows
/// stays a descriptor).
#[inline(always)]
pub(crate) unsafe fn used(s: *const Slab) -> u16 {
    // SAFETY: an aligned u16 inside the descriptor, only ever accessed
    // atomically while other threads may.
    unsafe { AtomicU16::from_ptr(core::ptr::addr_of!((*s).used).cast_mut()).load(Relaxed) }
}

/// Stores `used` of slab `s`, with release (see the module docs).
///
/// # Safety
/// The caller owns `s` (or holds its heap's lists, see `emptied.rs`).
#[inline(always)]
pub(crate) unsafe fn set_used(s: *mut Slab, n: u16) {
    // SAFETY: as in `used`.
    unsafe { AtomicU16::from_ptr(core::ptr::addr_of_mut!((*s).used)).store(n, Release) }
}

/// Whether slab `s` is marked IN_FULL.
///
/// # Safety
/// As [`used`].
#[inline(always)]
pub(crate) unsafe fn in_full(s: *const Slab) -> bool {
    // SAFETY: an aligned byte of the descriptor, accessed atomically.
    unsafe {
        AtomicU8::from_ptr(core::ptr::addr_of!((*s).flags).cast_mut()).load(Relaxed) & IN_FULL != 0
    }
}

/// Sets or clears IN_FULL on slab `s`.
///
/// # Safety
/// As [`set_used`].
#[inline(always)]
pub(crate) unsafe fn set_in_full(s: *mut Slab, full: bool) {
    // SAFETY: as in `in_full`; only the owner (or a holder of the heap's
    // lists) writes the flags, so load and store lose nothing.
    unsafe {
        let f = AtomicU8::from_ptr(core::ptr::addr_of_mut!((*s).flags));
        let v = f.load(Relaxed);
        f.store(if full { v | IN_FULL } else { v & !IN_FULL }, Relaxed);
    }
}

/// Carves up to a page of objects from the untouched tail onto `free`,
/// past the `reserved` carved so far (`marks::reserved`). Returns the
/// objects carved now in all, for the caller to record
/// (`marks::set_reserved`); None if the slab has no untouched objects
/// left.
///
/// # Safety
/// `s` is a slab owned by the calling heap.
pub(crate) unsafe fn extend(s: *mut Slab, reserved: u16) -> Option<u16> {
    // SAFETY: the owner has exclusive use of free/reserved and of the
    // never-handed-out objects it writes.
    unsafe {
        let size = object_size(s);
        let cap = Slab::capacity(s) as usize;
        let first = reserved as usize;
        if first >= cap {
            return None;
        }
        let n = (EXTEND_BYTES / size)
            .max(EXTEND_MIN_OBJECTS)
            .min(cap - first);
        let base = Slab::base(s) + first * size;
        // Link the new objects in address order, ending in the old list.
        // They get no free key: only a block that was handed out and freed
        // carries one (freeing a block carved but never handed out is not
        // detected; one not carved yet fails the object check).
        let mut next = (*s).free;
        for i in (0..n).rev() {
            let obj = FreeObject::at((base + i * size) as *mut u8);
            obj.set_next(next);
            next = obj.addr();
        }
        (*s).free = next;
        if crate::sys::valgrind::memcheck() {
            // Free objects are not the program's: memcheck neither lets it
            // touch them nor counts their links as pointers to the blocks
            // handed out after them (a leak would look reachable).
            crate::sys::valgrind::make_mem_noaccess(base as *const u8, n * size);
        }
        Some((first + n) as u16)
    }
}

/// Length of a free list, bounded by `cap` (panics past it: a cycle).
///
/// # Safety
/// `p` is a list of free objects of a live slab of `cap` objects.
pub(crate) unsafe fn list_len(mut p: *mut u8, cap: u16) -> usize {
    let mut n = 0;
    while !p.is_null() {
        n += 1;
        assert!(n <= cap as usize, "free list longer than the slab (cycle?)");
        // SAFETY: the list links free objects of a live slab (caller).
        p = unsafe { FreeObject::at(p).next() };
    }
    n
}
