//! Thread heaps: per size class a bin of free objects (the thread cache,
//! `bin.rs`), the current slab bins are refilled from and a list of
//! partial slabs; plus the delayed-free stack (see `slab.rs`), the parked
//! empty slabs.
//!
//! A heap is a value over a page allocator it is handed ([`Pages`]) on
//! every call that may need pages; it names no global. The runtime gives
//! every thread one on its first allocation ([`super::heaps`] keeps them
//! all); tests and the replay make their own.
//!
//! Allocation pops the class's bin; an empty bin is refilled with up to
//! its limit of objects from the current slab (its own list, then its
//! remote list, then its untouched tail). Free pushes on the bin; a full
//! bin first gives its older half back to the slabs (`flush`). Slab
//! states, for one heap and class:
//!
//! ```text
//!   new ──► current ──(exhausted)──► full (IN_FULL, on no list)
//!             ▲  ▲                      │ objects given back / delayed notice
//!             │  └──────── partial ◄────┘
//!             └─ (current exhausted, take next partial)
//!   partial or full ──(no live object)──► parked, or back to the pages
//! ```
//!
//!
//! Emptied slabs are parked (`parked.rs`: per order) rather than sent
//! straight back: a class that shrinks and grows again — a loop allocating
//! and freeing a few thousand objects — would otherwise pay a round trip
//! through the pageset per slab (and, when a burst of slab frees trips
//! free_high, through the zone lock). Any class of the same slab order can
//! take a parked slab. How much is parked is tuned the way a pageset's
//! `high` is: `park_high` starts at PARK_HIGH_MIN; each slab given back for
//! lack of room is remembered, and each new slab the heap then has to ask
//! for grows `park_high` by its size, up to what was given back (the refill
//! half), to PARK_HIGH_MAX at most and not while the zone is below its high
//! watermark; it decays by 1/8 a tick. The tick takes parked slabs back
//! from every heap, so an idle thread does not keep them; the owner gives
//! back what is left when it sees the tick on its slow path.
//!
//! Ownership: the owner-only state ([`Local`]) is reached through an
//! [`Owned`] handle, which only the owning thread (or whoever holds the
//! heap off the abandoned list) makes; other threads touch only the
//! atomics (the delayed stack, the counters) and the parked lists (under
//! their lock).
//!
//! Invariants: a slab of this heap that is not current and not IN_FULL is
//! on `partial[class]` and has a free object, or parked and has none;
//! `used` counts the slab's live objects plus those waiting on
//! `thread_free`; the parked slabs add up to at most `park_high` ≤
//! PARK_HIGH_MAX.

use core::cell::UnsafeCell;
use core::ptr::{self, addr_of};
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering::*};

use crate::geometry::PAGE_SIZE;
use crate::page::{MigrateType, PageKind, PageList};
use crate::page_alloc::pcp::Pageset;
use crate::page_alloc::Pages;
use crate::section::desc_of;
use crate::sync::bump;
use crate::trace::Buffer;

use super::bin::{Bin, BIN_LIMIT};
use super::classes::{CLASS_SIZE, NR_CLASSES, SLAB_ORDER};
use super::object::FreeObject;
use super::parked::Parked;
use super::remote::RemoteBatch;
use super::slab::{self, Slab, IN_FULL};

/// Bytes of empty slabs a heap may always keep parked (`park_high`'s
/// floor).
pub const PARK_HIGH_MIN: usize = 256 << 10;
/// The most `park_high` grows to.
pub const PARK_HIGH_MAX: usize = 4 << 20;

/// Heap state: the static empty heap.
pub const HEAP_EMPTY: u8 = 0;
/// Heap state: owned by a live thread.
pub const HEAP_ACTIVE: u8 = 1;
/// Heap state: its thread exited; waiting to be adopted.
pub const HEAP_ABANDONED: u8 = 2;
/// Heap state: owned by a thread that did not survive fork; never reused.
pub const HEAP_LOST: u8 = 3;

/// The owner-only part of a heap.
#[repr(C)]
pub struct Local {
    /// Free objects per class. Hot: first, at offset 0 of the heap.
    pub bins: [Bin; NR_CLASSES],
    /// The slab of each class bins are refilled from (the empty slab when
    /// none).
    pub current: [*mut Slab; NR_CLASSES],
    /// Partial slabs per class, excluding the current one.
    partial: [PageList<Slab>; NR_CLASSES],
    /// How many bytes of empty slabs may be parked: auto-tuned like a
    /// pageset's `high` (see `park_or_retire`).
    pub park_high: usize,
    /// Bytes of slabs given back this tick because `park_high` was
    /// reached, and not yet made room for.
    pub park_missed: usize,
    /// The zone epoch (ticks run) this heap last acted on.
    epoch_seen: u32,
    /// The thread's pageset in thread mode, else null (this CPU's).
    pub pageset: *mut Pageset,
    /// The runtime's reclaim epoch this heap last collected for (see
    /// `runtime/reclaim.rs`).
    pub reclaim_seen: u32,
    /// Other heaps' objects this thread freed, waiting to go back to their
    /// slabs in batches (`remote.rs`).
    remote: RemoteBatch,
}

/// A thread heap. See the module docs.
#[repr(C, align(64))]
pub struct Heap {
    /// Owner-only state; first, so the fast path reads `current` at a fixed
    /// offset from the heap pointer.
    local: UnsafeCell<Local>,
    /// Slabs that had a remote free while full (stack through `next`).
    pub delayed: AtomicPtr<Slab>,
    /// Emptied slabs kept for reuse (see `parked.rs`).
    pub parked: Parked,
    /// HEAP_* state.
    pub state: AtomicU8,
    /// Next heap on the list of all heaps (see `heaps.rs`).
    pub(super) next_all: AtomicPtr<Heap>,
    /// Next heap on the abandoned list (guarded by its lock).
    pub(super) next_abandoned: UnsafeCell<*mut Heap>,
    /// Slabs this heap created.
    pub slabs_created: AtomicU64,
    /// Slabs this heap gave back to the page allocator.
    pub slabs_retired: AtomicU64,
    /// Objects freed by other threads and collected here.
    pub remote_collected: AtomicU64,
    /// Bytes of objects taken off this heap's slabs (onto its bins), and
    /// put back on them. Written by the owner alone (load and store, no
    /// read-modify-write), so each only grows; see [`Heap::usage`].
    small_taken: AtomicU64,
    small_returned: AtomicU64,
    /// Bytes of other heaps' small objects this heap's thread freed (onto
    /// their slabs' remote lists). Written by the owner alone — except on
    /// the empty heap, shared by every thread without a heap, where it is
    /// added to atomically.
    small_remote_freed: AtomicU64,
    /// Bytes of large blocks this heap's thread allocated, and freed.
    large_allocated: AtomicU64,
    large_freed: AtomicU64,
    /// The trace buffer of the heap's thread, while tracing (null
    /// otherwise; made on the first event and kept with the heap).
    pub trace: AtomicPtr<Buffer>,
}

/// What a heap's counters say about bytes in use (see [`Heap::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapUsage {
    /// Bytes of small objects taken off slabs minus those put back.
    pub small_out: i64,
    /// Bytes of small objects waiting on bins (out of their slabs, but
    /// free).
    pub binned: u64,
    /// Bytes of large blocks allocated minus freed through this heap (a
    /// block freed by another thread counts there).
    pub large_out: i64,
    /// Bytes of other heaps' small objects this heap's thread freed.
    pub remote_freed: i64,
}

// SAFETY: a heap's owner-only state is reached only through `Owned`, which
// only its owner makes; other threads touch atomics and locked lists.
unsafe impl Sync for Heap {}
// SAFETY: as above.
unsafe impl Send for Heap {}

/// The slab every empty bin points at: its free list is empty, so the fast
/// path falls through to the slow path. Never written.
static EMPTY_SLAB: Slab = unsafe_empty_slab();

const fn unsafe_empty_slab() -> Slab {
    // SAFETY: an all-zero Slab is valid (null pointers, zero counts).
    unsafe { core::mem::zeroed() }
}

/// The heap of a thread that has not allocated yet: its bins are empty and
/// hold nothing (limit 0), so its first allocation and every free take the
/// slow path. Never written.
pub static EMPTY_HEAP: Heap = Heap::with_limits([0; NR_CLASSES]);

#[inline(always)]
fn empty_slab() -> *mut Slab {
    addr_of!(EMPTY_SLAB) as *mut Slab
}

impl Heap {
    /// A heap with no slabs.
    pub const fn new() -> Heap {
        Heap::with_limits(BIN_LIMIT)
    }

    const fn with_limits(limits: [u32; NR_CLASSES]) -> Heap {
        let mut bins = [const { Bin::new(0) }; NR_CLASSES];
        let mut c = 0;
        while c < NR_CLASSES {
            bins[c] = Bin::new(limits[c]);
            c += 1;
        }
        Heap {
            local: UnsafeCell::new(Local {
                bins,
                current: [addr_of!(EMPTY_SLAB) as *mut Slab; NR_CLASSES],
                partial: [const { PageList::new() }; NR_CLASSES],
                park_high: PARK_HIGH_MIN,
                park_missed: 0,
                epoch_seen: 0,
                pageset: ptr::null_mut(),
                reclaim_seen: 0,
                remote: RemoteBatch::new(),
            }),
            delayed: AtomicPtr::new(ptr::null_mut()),
            parked: Parked::new(),
            state: AtomicU8::new(HEAP_EMPTY),
            next_all: AtomicPtr::new(ptr::null_mut()),
            next_abandoned: UnsafeCell::new(ptr::null_mut()),
            slabs_created: AtomicU64::new(0),
            slabs_retired: AtomicU64::new(0),
            remote_collected: AtomicU64::new(0),
            small_taken: AtomicU64::new(0),
            small_returned: AtomicU64::new(0),
            small_remote_freed: AtomicU64::new(0),
            large_allocated: AtomicU64::new(0),
            large_freed: AtomicU64::new(0),
            trace: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Counts `bytes` of small objects put back on this heap's slabs.
    /// Owner only.
    #[inline]
    pub fn note_small_returned(&self, bytes: usize) {
        bump(&self.small_returned, bytes as u64);
    }

    /// Counts a large block of `bytes` allocated by this heap's thread.
    /// Owner only.
    #[inline]
    pub fn note_large_allocated(&self, bytes: usize) {
        bump(&self.large_allocated, bytes as u64);
    }

    /// Counts a large block of `bytes` freed by this heap's thread. Owner
    /// only.
    #[inline]
    pub fn note_large_freed(&self, bytes: usize) {
        bump(&self.large_freed, bytes as u64);
    }

    /// This heap's share of the bytes in use, from any thread. Summed over
    /// every heap, `small_out - binned` is the bytes of live small objects
    /// and `large_out` the bytes of live large blocks (each term may be
    /// negative for one heap: an object can be freed by another heap than
    /// the one that handed it out). Racy but never torn: each counter is
    /// read once.
    pub fn usage(&self) -> HeapUsage {
        let local = self.local.get();
        let mut binned = 0u64;
        for (c, &size) in CLASS_SIZE.iter().enumerate() {
            // SAFETY: the heap lives forever; only the bins' atomic counts
            // are read (`Bin::count_of`).
            let n = unsafe { Bin::count_of(addr_of!((*local).bins[c])) };
            binned += u64::from(n) * u64::from(size);
        }
        let d = |a: &AtomicU64, b: &AtomicU64| a.load(Relaxed).wrapping_sub(b.load(Relaxed)) as i64;
        HeapUsage {
            small_out: d(&self.small_taken, &self.small_returned),
            binned,
            large_out: d(&self.large_allocated, &self.large_freed),
            remote_freed: self.small_remote_freed.load(Relaxed) as i64,
        }
    }

    /// The only-growing counters behind [`usage`](Self::usage): bytes of
    /// small objects taken onto this heap's bins, put back on its slabs,
    /// and freed by its thread onto other heaps' slabs; bytes of large
    /// blocks its thread allocated, and freed.
    pub fn totals(&self) -> [u64; 5] {
        [
            &self.small_taken,
            &self.small_returned,
            &self.small_remote_freed,
            &self.large_allocated,
            &self.large_freed,
        ]
        .map(|c| c.load(Relaxed))
    }

    /// Counts `bytes` of another heap's small object freed by `h`'s thread
    /// (`h` is the calling thread's heap or the empty heap). So the bytes
    /// in use drop at the free, not when the owner collects it.
    ///
    /// # Safety
    /// `h` is the calling thread's heap or the empty heap.
    #[inline(always)]
    pub unsafe fn note_remote_freed(h: *const Heap, bytes: usize) {
        // SAFETY: heaps live forever; the owner alone writes its counter.
        unsafe {
            if (*h).is_empty_heap() {
                (*h).small_remote_freed.fetch_add(bytes as u64, Relaxed);
            } else {
                bump(&(*h).small_remote_freed, bytes as u64);
            }
        }
    }

    /// Frees `p`, a valid object of another heap's slab `s` carrying the
    /// free key, from the thread whose heap is `h`: onto `h`'s batch of
    /// remote frees, or straight to the slab from a thread without a heap.
    ///
    /// # Safety
    /// `h` is the calling thread's heap (or the empty heap); `s` is not
    /// `h`'s; nobody uses `p`.
    #[inline]
    pub unsafe fn free_remote(h: *const Heap, p: *mut u8, s: *mut Slab) {
        // SAFETY: the calling thread owns h's Local (contract); the empty
        // heap's is never written.
        unsafe {
            if (*h).is_empty_heap() {
                if slab::push_remote(s, p, p) {
                    Heap::notify_owner(s);
                }
            } else {
                (*(*h).local.get()).remote.push(p, s, Heap::notify_owner);
            }
        }
    }

    /// The allocation fast path: pops an object of `class` from its bin,
    /// or returns null (the slow path's turn).
    ///
    /// # Safety
    /// `h` is the calling thread's heap (or the empty heap, whose bins are
    /// empty), and `class < NR_CLASSES`.
    #[inline(always)]
    pub unsafe fn alloc_fast(h: *const Heap, class: usize) -> *mut u8 {
        // SAFETY: the owner reaches its own bin through the raw pointer;
        // an empty bin is not written.
        unsafe { (*Heap::bin(h, class)).pop() }
    }

    /// The owner frees `p`, whose bin is full, straight onto slab `s`
    /// (marked with `key`, counted as returned). True when the slab then
    /// needs [`Owned::slab_given_back`] (it became empty, or was full).
    /// Kept apart from `Owned` so the common case needs no page allocator.
    ///
    /// # Safety
    /// The calling thread owns `h`, and `h` owns `s`; `p` is a live object
    /// of `s` that nobody uses.
    #[inline]
    pub unsafe fn give_back_to_slab(h: &Heap, p: *mut u8, s: *mut Slab, key: usize) -> bool {
        // SAFETY: p is ours to mark and relink; owner-only slab fields
        // (contract).
        unsafe {
            FreeObject::at(p).mark(key);
            h.note_small_returned(slab::object_size(s));
            slab::give_back(s, p)
        }
    }

    /// The bin of `class`, for the owner's fast paths.
    ///
    /// # Safety
    /// As [`alloc_fast`](Self::alloc_fast): the pointer is only used by the
    /// owning thread, and never to write to the empty heap.
    #[inline(always)]
    pub unsafe fn bin(h: *const Heap, class: usize) -> *mut Bin {
        // SAFETY: forwarded contract; class is in range.
        unsafe {
            let local = (*h).local.get();
            (*local).bins.as_mut_ptr().add(class)
        }
    }

    /// The owner's handle.
    ///
    /// # Safety
    /// The calling thread owns the heap (it is its thread's heap, or the
    /// caller holds it off the abandoned list), and holds no other handle.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn owned(&self) -> Owned<'_> {
        Owned {
            heap: self,
            // SAFETY: the owner alone reaches `local` (contract).
            local: unsafe { &mut *self.local.get() },
        }
    }

    /// Whether this is the static empty heap.
    #[inline]
    pub fn is_empty_heap(&self) -> bool {
        ptr::eq(self, &EMPTY_HEAP)
    }

    /// The pageset this heap's thread goes through (null: its CPU's). Read
    /// by its owner.
    ///
    /// # Safety
    /// The calling thread owns the heap.
    #[inline]
    pub unsafe fn pageset(&self) -> *mut Pageset {
        // SAFETY: owner-only field (contract).
        unsafe { (*self.local.get()).pageset }
    }

    /// Gives back the parked slabs if the parking lock is free right now
    /// (anyone may: the tick, an allocation at the memory limit) straight
    /// to the zone. Returns how many slabs went back.
    pub fn release_parked(&self, pages: &Pages<'_>) -> usize {
        let mut s = self.parked.take_all(false);
        let mut n = 0;
        while !s.is_null() {
            // SAFETY: take_all handed us empty slabs of this heap, off
            // every list; each goes back whole.
            unsafe {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                let order = u32::from((*s).order);
                pages.free_to_zone(slab::fini(s), order);
                s = next;
            }
            bump(&self.slabs_retired, 1);
            n += 1;
        }
        n
    }

    /// Tells the owner of full slab `s` that a remote free gave it room.
    ///
    /// # Safety
    /// `s` is a slab whose FULL_NOTIFY this thread just cleared.
    #[cold]
    pub unsafe fn notify_owner(s: *mut Slab) {
        // SAFETY: heaps live forever; the slab stays IN_FULL (and so off
        // every list) until its owner pops it from the delayed stack.
        unsafe {
            let owner = (*s).owner.load(Acquire).cast::<Heap>();
            let stack = &(*owner).delayed;
            let mut head = stack.load(Relaxed);
            loop {
                (*s).next = head;
                match stack.compare_exchange_weak(head, s, Release, Relaxed) {
                    Ok(_) => return,
                    Err(x) => head = x,
                }
            }
        }
    }
}

impl Default for Heap {
    fn default() -> Self {
        Self::new()
    }
}

/// The owner's handle on a heap: shared fields through `heap`, owner-only
/// ones through `local`.
pub struct Owned<'a> {
    heap: &'a Heap,
    local: &'a mut Local,
}

impl Owned<'_> {
    /// The heap.
    pub fn heap(&self) -> &Heap {
        self.heap
    }

    /// The owner-only state.
    pub fn local(&mut self) -> &mut Local {
        self.local
    }

    fn owner_tag(&self) -> *mut u8 {
        self.heap as *const Heap as *mut u8
    }

    /// Counts `n` objects of slab `s` freed remotely and collected (their
    /// bytes were counted by their freer, see `note_remote_freed`).
    fn note_collected(&self, _s: *mut Slab, n: u32) {
        if n > 0 {
            bump(&self.heap.remote_collected, u64::from(n));
        }
    }

    /// Hands the remote frees waiting in batches to their slabs.
    #[inline]
    pub fn flush_remote(&mut self) {
        if !self.local.remote.is_empty() {
            // SAFETY: the batch is ours (owner handle).
            unsafe { self.local.remote.flush(Heap::notify_owner) };
        }
    }

    /// Allocates an object of `class`: the fast path, then the slow path.
    /// Null when out of memory (tests and the replay, which drive heaps as
    /// values).
    pub fn alloc(&mut self, class: usize, pages: &Pages<'_>) -> *mut u8 {
        // SAFETY: the bin is ours and holds free objects.
        let p = unsafe { self.local.bins[class].pop() };
        if p.is_null() {
            self.alloc_slow(class, pages)
        } else {
            p
        }
    }

    /// The allocation slow path: the bin of `class` is empty. Refills it
    /// and pops. Null when out of memory.
    pub fn alloc_slow(&mut self, class: usize, pages: &Pages<'_>) -> *mut u8 {
        self.flush_remote();
        let epoch = pages.zone().epoch();
        if epoch != self.local.epoch_seen {
            self.local.epoch_seen = epoch;
            self.on_tick(pages);
        }
        if !self.refill(class, pages) {
            return ptr::null_mut();
        }
        // SAFETY: refill put objects of ours on the bin.
        unsafe { self.local.bins[class].pop() }
    }

    /// Refills the empty bin of `class` with every free object of the
    /// current slab — its own list, else its remote list, else a page of
    /// its untouched tail — moving to a partial slab, a parked one or a new
    /// one as each runs dry. False when out of memory.
    fn refill(&mut self, class: usize, pages: &Pages<'_>) -> bool {
        // SAFETY: every slab reached is owned by this heap.
        unsafe {
            loop {
                let cur = self.local.current[class];
                if cur != empty_slab() {
                    if (*cur).free.is_null() {
                        let n = slab::collect_thread_free(cur);
                        self.note_collected(cur, n);
                        if n == 0 && !slab::extend(cur) {
                            if !slab::mark_full(cur) {
                                continue; // remote frees arrived meanwhile
                            }
                            self.local.current[class] = empty_slab();
                        }
                    }
                    if self.local.current[class] == cur {
                        let (head, n) = slab::take_all(cur);
                        bump(
                            &self.heap.small_taken,
                            u64::from(n) * u64::from(CLASS_SIZE[class]),
                        );
                        let bin = &mut self.local.bins[class];
                        bin.head = head;
                        bin.set_count(n);
                        return true;
                    }
                }
                self.process_delayed(pages);
                let next = self.local.partial[class].pop_front();
                if !next.is_null() {
                    self.local.current[class] = next;
                    continue;
                }
                let order = u32::from(SLAB_ORDER[class]);
                let parked = self.heap.parked.take(order);
                if !parked.is_null() {
                    if (*parked).class as usize != class {
                        slab::reinit(parked, class);
                    }
                    self.local.current[class] = parked;
                    continue;
                }
                self.grow_park_high(PAGE_SIZE << order, pages);
                let head = pages.alloc(order, MigrateType::Unmovable);
                if head.is_null() {
                    return false;
                }
                let s = slab::init(head, class, order, self.owner_tag());
                bump(&self.heap.slabs_created, 1);
                self.local.current[class] = s;
            }
        }
    }

    /// Gives the objects of the bin of `class` past its first `keep` back
    /// to their slabs.
    pub fn flush(&mut self, class: usize, keep: u32, pages: &Pages<'_>) {
        // SAFETY: the bin's list is well formed and ours.
        let rest = unsafe { self.local.bins[class].split_after(keep) };
        // SAFETY: the objects split off are free objects we now own.
        unsafe { self.give_back_all(rest, pages) };
    }

    /// Gives every bin back to the slabs.
    pub fn flush_bins(&mut self, pages: &Pages<'_>) {
        for class in 0..NR_CLASSES {
            if self.local.bins[class].count() > 0 {
                self.flush(class, 0, pages);
            }
        }
    }

    /// Gives a list of free objects of this heap's slabs (linked through
    /// word 0, carrying the free key) back onto their slabs' own lists.
    ///
    /// # Safety
    /// The objects are free objects of this heap's slabs that the caller
    /// owns, each counted as in use by its slab.
    unsafe fn give_back_all(&mut self, mut p: *mut u8, pages: &Pages<'_>) {
        // SAFETY: each object is free and ours (contract); its page
        // descriptor names its live slab.
        unsafe {
            let mut bytes = 0;
            while !p.is_null() {
                let next = FreeObject::at(p).next();
                let s = (*desc_of(p as usize)).head.load(Relaxed).cast::<Slab>();
                debug_assert_eq!((*s).owner.load(Relaxed), self.owner_tag());
                bytes += slab::object_size(s);
                if slab::give_back(s, p) {
                    self.slab_given_back(s, pages);
                }
                p = next;
            }
            self.heap.note_small_returned(bytes);
        }
    }

    /// Slab `s` of this heap just got an object back and became empty, or
    /// was full: it comes back from full onto the partial list, and an
    /// empty slab that is not current is parked or given back.
    ///
    /// # Safety
    /// This heap owns `s`.
    pub unsafe fn slab_given_back(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: owner-only access to s.
        unsafe {
            let class = (*s).class as usize;
            if (*s).flags & IN_FULL != 0 {
                // Back from full, unless a remote free already queued it on
                // the delayed stack (then it comes back from there).
                if slab::unmark_full(s) {
                    if (*s).used == 0 {
                        self.park_or_retire(s, pages);
                    } else {
                        self.local.partial[class].push_front(s);
                    }
                }
                return;
            }
            if (*s).used == 0 && self.local.current[class] != s {
                self.local.partial[class].remove(s);
                self.park_or_retire(s, pages);
            }
        }
    }

    /// Moves slabs that got remote frees while full back to the partial
    /// lists.
    fn process_delayed(&mut self, pages: &Pages<'_>) {
        if self.heap.delayed.load(Relaxed).is_null() {
            return;
        }
        let mut s = self.heap.delayed.swap(ptr::null_mut(), Acquire);
        // SAFETY: the stack was filled by remote freers with full slabs of
        // this heap; once swapped out it is ours.
        unsafe {
            while !s.is_null() {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                (*s).flags &= !IN_FULL;
                self.note_collected(s, slab::collect_thread_free(s));
                if (*s).used == 0 {
                    self.park_or_retire(s, pages);
                } else {
                    self.local.partial[(*s).class as usize].push_front(s);
                }
                s = next;
            }
        }
    }

    /// Parks an empty slab, or gives it back if the heap already keeps
    /// `park_high` bytes of them.
    ///
    /// # Safety
    /// `s` is a slab of this heap with no live object, on no list and not
    /// current.
    unsafe fn park_or_retire(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: forwarded contract.
        unsafe {
            if !self.heap.parked.park(s, self.local.park_high) {
                self.local.park_missed += PAGE_SIZE << (*s).order;
                self.retire(s, pages);
            }
        }
    }

    /// Gives an empty slab back to the page allocator.
    ///
    /// # Safety
    /// `s` is a slab of this heap with no live object, on no list and not
    /// current.
    unsafe fn retire(&mut self, s: *mut Slab, pages: &Pages<'_>) {
        // SAFETY: forwarded contract; the block goes back whole.
        unsafe {
            let order = u32::from((*s).order);
            pages.free(slab::fini(s), order);
        }
        bump(&self.heap.slabs_retired, 1);
    }

    /// A new slab of `bytes` is needed: if slabs were given back for lack
    /// of parking room since the last tick, make room for this one more
    /// (the refill half of the `high` auto-tuning, applied to parked
    /// slabs).
    fn grow_park_high(&mut self, bytes: usize, pages: &Pages<'_>) {
        let l = &mut *self.local;
        if l.park_missed > 0 && !pages.below_high() {
            let grow = bytes.min(l.park_missed);
            l.park_missed -= grow;
            l.park_high = (l.park_high + grow).min(PARK_HIGH_MAX);
        }
    }

    /// What the heap does once per tick, when its owner next takes the
    /// slow path: the bins, parked slabs and cached blocks go back, and
    /// `park_high` loses 1/8, down to PARK_HIGH_MIN.
    fn on_tick(&mut self, pages: &Pages<'_>) {
        self.flush_bins(pages);
        self.release_parked_owned(pages);
        let l = &mut *self.local;
        l.park_high = (l.park_high - l.park_high / 8).max(PARK_HIGH_MIN);
        l.park_missed = 0;
    }

    /// Gives every parked slab back, waiting for the parking lock.
    fn release_parked_owned(&mut self, pages: &Pages<'_>) {
        let mut s = self.heap.parked.take_all(true);
        while !s.is_null() {
            // SAFETY: take_all handed us empty slabs of this heap, off every
            // list.
            unsafe {
                let next = (*s).next;
                (*s).next = ptr::null_mut();
                self.retire(s, pages);
                s = next;
            }
        }
    }

    /// Collects remote frees on every slab and gives every empty slab
    /// back, the current ones included (thread exit, trim, reclaim, the
    /// sweep of abandoned heaps). Returns how many slabs went back.
    pub fn collect(&mut self, pages: &Pages<'_>) -> usize {
        self.flush_remote();
        let before = self.heap.slabs_retired.load(Relaxed);
        self.flush_bins(pages);
        self.process_delayed(pages);
        self.release_parked_owned(pages);
        // SAFETY: every slab reached is owned by this heap.
        unsafe {
            for class in 0..NR_CLASSES {
                let cur = self.local.current[class];
                if cur != empty_slab() {
                    self.note_collected(cur, slab::collect_thread_free(cur));
                    if (*cur).used == 0 {
                        self.local.current[class] = empty_slab();
                        self.retire(cur, pages);
                    }
                }
                let mut s = self.local.partial[class].first();
                while !s.is_null() {
                    let next = (*s).next;
                    self.note_collected(s, slab::collect_thread_free(s));
                    if (*s).used == 0 {
                        self.local.partial[class].remove(s);
                        self.retire(s, pages);
                    }
                    s = next;
                }
            }
        }
        (self.heap.slabs_retired.load(Relaxed) - before) as usize
    }

    /// Forgets tuning state before the heap goes to another thread: the
    /// thread that adopts it starts its own.
    pub fn reset_tuning(&mut self) {
        self.local.park_high = PARK_HIGH_MIN;
        self.local.park_missed = 0;
    }

    /// Checks the owner-side invariants (bins hold objects of live slabs of
    /// their class or larger, slabs on the right lists, parked bytes within
    /// `park_high`). Returns the objects on the bins. Only while no other
    /// thread uses the heap.
    pub fn check(&mut self) -> usize {
        let me = self.owner_tag();
        let mut binned = 0;
        for (class, bin) in self.local.bins.iter().enumerate() {
            let mut p = bin.head;
            let mut n = 0;
            while !p.is_null() {
                n += 1;
                assert!(n <= bin.count(), "bin longer than its count");
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
                        slab::object_at(s, p).is_some(),
                        "a bin object off an object start"
                    );
                    p = FreeObject::at(p).next();
                }
            }
            assert_eq!(n, bin.count(), "bin count");
            binned += n as usize;
        }
        // SAFETY: the slabs on our lists are ours; quiescent.
        unsafe {
            for class in 0..NR_CLASSES {
                let cur = self.local.current[class];
                if cur != empty_slab() {
                    assert_eq!((*cur).owner.load(Relaxed), me);
                    assert_eq!((*cur).class as usize, class);
                }
                self.local.partial[class].check();
                let mut s = self.local.partial[class].first();
                while !s.is_null() {
                    assert_eq!((*s).owner.load(Relaxed), me, "partial slab of another heap");
                    assert!((*s).flags & IN_FULL == 0);
                    assert!((*s).used > 0, "an empty slab on the partial list");
                    s = (*s).next;
                }
            }
        }
        let mut parked = 0;
        self.heap.parked.for_each(|e, order| {
            // SAFETY: under the parking lock the slab is stable.
            unsafe {
                assert_eq!((*e).used, 0, "a parked slab with live objects");
                assert_eq!((*e).order as usize, order, "parked on the wrong list");
                assert_eq!((*e).owner.load(Relaxed), me);
            }
            parked += PAGE_SIZE << order;
        });
        assert_eq!(parked, self.heap.parked.bytes(), "parked bytes miscounted");
        assert!(parked <= self.local.park_high);
        assert!(self.local.park_high <= PARK_HIGH_MAX);
        binned
    }
}
