//! Thread heaps: per size class, the current slab and a list of partial
//! slabs, plus the delayed-free stack (see `slab.rs`).
//!
//! Every thread gets a heap on its first allocation. Heaps are never freed:
//! when a thread exits, its heap gives back what it can (empty slabs, its
//! pageset in thread mode) and goes on the abandoned list, slabs and all;
//! the next new thread adopts it whole. So a slab's owner never changes
//! while the slab lives, remote frees always reach a valid heap, and a
//! program that churns threads reuses the same few heaps. The maintenance
//! tick also sweeps abandoned heaps, so their emptied slabs go back.
//!
//! Slab states, for one heap and class:
//!
//! ```text
//!   new ──► current ──(exhausted)──► full (IN_FULL, on no list)
//!             ▲  ▲                      │ local free / delayed notice
//!             │  └──────── partial ◄────┘
//!             └─ (current exhausted, take next partial)
//!   partial or full ──(no live object)──► back to the page allocator
//! ```
//!
//! A heap also keeps one freed large block per order 0..=3 in
//! `block_cache`, so a thread that frees and allocates page-sized buffers
//! in turn (the common alloc/free pair) does not go through the pageset
//! lock each time — SLUB keeps a per-CPU slab in front of the page
//! allocator for the same reason. It is bounded (60 KiB), given back on
//! the same tick boundaries as parked slabs, and at thread exit.
//!
//! Emptied slabs are parked (`parked.rs`: per order) rather than sent
//! straight back: a class that shrinks and grows again — a loop allocating and
//! freeing a few thousand objects — would otherwise pay a round trip
//! through the pageset per slab (and, when a burst of slab frees trips
//! free_high, through the zone lock). Any class of the same slab order can
//! take a parked slab: it is set up again for the new class, so a program
//! whose size mix drifts keeps reusing them. How much is parked is tuned
//! the way a pageset's `high` is: `park_high` starts at PARK_HIGH_MIN;
//! each slab given back for lack of room is remembered, and each new slab
//! the heap then has to ask for grows `park_high` by its size, up to what
//! was given back (the refill half), to PARK_HIGH_MAX at most and not
//! while the zone is below its high watermark; it decays by 1/8 a tick.
//! Parked slabs go back once a tick — the tick takes them from every heap,
//! so an idle thread does not keep them, and the owner gives back what is
//! left when it notices the tick on its slow path — and collect() (thread
//! exit, trim, the sweep of abandoned heaps) gives them all back. When the
//! memory limit is reached, an allocation takes every heap's parked slabs
//! back before it fails.
//!
//! Invariants: a slab of this heap that is not current and not IN_FULL is
//! on `partial[class]` and has a free object, or parked and has none;
//! `aux` counts the slab's live objects plus those waiting on
//! `thread_free`; the parked slabs add up to at most `park_high` ≤
//! PARK_HIGH_MAX.

use core::ptr::{self, addr_of};
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering::*};

use crate::config::PAGE_SIZE;
use crate::page::{flags, MigrateType, Page, PageList};
use crate::pages;
use crate::pcp::{pool, Pageset};
use crate::state::{self, ZONE};
use crate::sync::{bump, Locked};
use crate::tunables::{PcpMode, SETTINGS};

use super::classes::{NR_CLASSES, SLAB_ORDER};
use super::parked::Parked;
use super::slab;
use super::tls;

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

/// A thread heap. See the module docs.
#[repr(C, align(64))]
pub struct Heap {
    /// The current slab of each class (EMPTY_SLAB when none). Hot: first.
    pub current: [*mut Page; NR_CLASSES],
    /// Partial slabs per class, excluding the current one.
    pub partial: [PageList; NR_CLASSES],
    /// Emptied slabs kept for reuse (see `parked.rs`).
    pub parked: Parked,
    /// How many bytes of empty slabs may be parked: auto-tuned like a
    /// pageset's `high` (see `park_or_retire`).
    pub park_high: usize,
    /// Bytes of slabs given back this tick because `park_high` was
    /// reached, and not yet made room for.
    pub park_missed: usize,
    /// The maintenance tick count when parked slabs were last given back.
    tick_seen: u64,
    /// One freed large block per order 0..=3 (kind Cached), reused by this
    /// thread's next allocation of that order before asking the pageset.
    pub block_cache: [*mut Page; crate::config::NR_PCP_ORDERS],
    /// Slabs that had a remote free while full (stack through `next`).
    pub delayed: AtomicPtr<Page>,
    /// The thread's pageset in thread mode, else null.
    pub pageset: *mut Pageset,
    /// HEAP_* state.
    pub state: AtomicU8,
    /// Next heap on the list of all heaps.
    next_all: AtomicPtr<Heap>,
    /// Next heap on the abandoned list.
    next_abandoned: *mut Heap,
    /// Slabs this heap created.
    pub slabs_created: AtomicU64,
    /// Slabs this heap gave back to the page allocator.
    pub slabs_retired: AtomicU64,
    /// Objects freed by other threads and collected here.
    pub remote_collected: AtomicU64,
}

// SAFETY: a heap's non-atomic fields are used only by its owning thread
// (or by whoever holds it off the abandoned list); others touch atomics.
unsafe impl Sync for Heap {}
// SAFETY: as above.
unsafe impl Send for Heap {}

/// The slab every empty bin points at: its free list is empty, so the fast
/// path falls through to the slow path. Never written.
pub static EMPTY_SLAB: Page = Page::zeroed();

/// The heap of a thread that has not allocated yet (see `tls.rs`).
pub static EMPTY_HEAP: Heap = Heap::new();

static ALL_HEAPS: AtomicPtr<Heap> = AtomicPtr::new(ptr::null_mut());
static ABANDONED: Locked<usize> = Locked::new(0);

#[inline(always)]
fn empty_slab() -> *mut Page {
    addr_of!(EMPTY_SLAB) as *mut Page
}

#[inline(always)]
fn empty_heap() -> *mut Heap {
    addr_of!(EMPTY_HEAP) as *mut Heap
}

impl Heap {
    /// A heap with no slabs.
    pub const fn new() -> Heap {
        Heap {
            current: [addr_of!(EMPTY_SLAB) as *mut Page; NR_CLASSES],
            partial: [const { PageList::new() }; NR_CLASSES],
            parked: Parked::new(),
            park_high: PARK_HIGH_MIN,
            park_missed: 0,
            tick_seen: 0,
            block_cache: [ptr::null_mut(); crate::config::NR_PCP_ORDERS],
            delayed: AtomicPtr::new(ptr::null_mut()),
            pageset: ptr::null_mut(),
            state: AtomicU8::new(HEAP_EMPTY),
            next_all: AtomicPtr::new(ptr::null_mut()),
            next_abandoned: ptr::null_mut(),
            slabs_created: AtomicU64::new(0),
            slabs_retired: AtomicU64::new(0),
            remote_collected: AtomicU64::new(0),
        }
    }
}

impl Default for Heap {
    fn default() -> Self {
        Self::new()
    }
}

/// Pops the current slab's next free object (the fast path's body).
///
/// # Safety
/// `slab` is owned by the calling heap and its `free` list is non-empty.
#[inline(always)]
pub unsafe fn pop(slab: *mut Page) -> *mut u8 {
    // SAFETY: the owner's list holds free objects of this slab.
    unsafe {
        let p = (*slab).free;
        let obj = p as *mut usize;
        (*slab).free = obj.read() as *mut u8;
        (*slab).aux += 1;
        obj.add(1).write(0);
        p
    }
}

/// The calling thread's heap, set up if this is its first allocation. Null
/// if the allocator could not initialise or metadata memory ran out.
pub fn current_or_init() -> *mut Heap {
    let h = tls::heap();
    if h != empty_heap() {
        return h;
    }
    heap_init()
}

#[cold]
#[inline(never)]
fn heap_init() -> *mut Heap {
    if !state::ensure_init() {
        return ptr::null_mut();
    }
    let h = acquire_heap();
    if h.is_null() {
        return h;
    }
    // SAFETY: h is ours (freshly made or taken off the abandoned list).
    unsafe {
        if SETTINGS.pcp_mode() == PcpMode::Thread && (*h).pageset.is_null() {
            (*h).pageset = pool::acquire_thread_pageset(state::free_high_batch());
        }
        (*h).state.store(HEAP_ACTIVE, Release);
    }
    tls::set_heap(h);
    state::register_thread(h.cast());
    h
}

fn acquire_heap() -> *mut Heap {
    {
        let mut a = ABANDONED.lock();
        let h = *a as *mut Heap;
        if !h.is_null() {
            // SAFETY: heaps on the abandoned list are ours to take.
            *a = unsafe { (*h).next_abandoned } as usize;
            return h;
        }
    }
    let h = crate::meta::alloc(core::mem::size_of::<Heap>(), 64).cast::<Heap>();
    if h.is_null() {
        return h;
    }
    // SAFETY: fresh, aligned metadata memory.
    unsafe { h.write(Heap::new()) };
    let mut head = ALL_HEAPS.load(Acquire);
    loop {
        // SAFETY: h is ours until published.
        unsafe { (*h).next_all.store(head, Relaxed) };
        match ALL_HEAPS.compare_exchange_weak(head, h, AcqRel, Acquire) {
            Ok(_) => return h,
            Err(x) => head = x,
        }
    }
}

/// The thread-exit hook (a pthread key destructor): the heap gives back
/// what it can and waits on the abandoned list for the next thread. Never
/// allocates.
///
/// # Safety
/// `h` is the exiting thread's heap.
pub unsafe fn thread_exit(h: *mut Heap) {
    if h.is_null() || h == empty_heap() {
        return;
    }
    // SAFETY: the exiting thread still owns h.
    unsafe {
        collect(h);
        if !(*h).pageset.is_null() {
            pool::release_thread_pageset((*h).pageset, &ZONE);
            (*h).pageset = ptr::null_mut();
        }
        if tls::heap() == h {
            tls::set_heap(empty_heap());
        }
        // The thread that adopts the heap starts its own tuning.
        (*h).park_high = PARK_HIGH_MIN;
        (*h).park_missed = 0;
        abandon(h);
    }
}

/// Puts `h` on the abandoned list.
///
/// # Safety
/// The caller owns `h` and will not touch it again.
unsafe fn abandon(h: *mut Heap) {
    let mut a = ABANDONED.lock();
    // SAFETY: ours until pushed.
    unsafe {
        (*h).state.store(HEAP_ABANDONED, Release);
        (*h).next_abandoned = *a as *mut Heap;
    }
    *a = h as usize;
}

/// Sweeps every abandoned heap (maintenance tick, trim): collects remote
/// frees and gives emptied slabs back. Each heap is taken off the list
/// while it is swept, so a thread adopting heaps meanwhile never sees it.
pub fn collect_abandoned() {
    let mut list = {
        let mut a = ABANDONED.lock();
        core::mem::replace(&mut *a, 0) as *mut Heap
    };
    let mut done: *mut Heap = ptr::null_mut();
    let mut tail: *mut Heap = ptr::null_mut();
    while !list.is_null() {
        // SAFETY: the heaps are off the list and so ours for now.
        unsafe {
            let next = (*list).next_abandoned;
            collect(list);
            (*list).next_abandoned = done;
            if done.is_null() {
                tail = list;
            }
            done = list;
            list = next;
        }
    }
    if !done.is_null() {
        let mut a = ABANDONED.lock();
        // SAFETY: tail is the last heap of our private chain.
        unsafe { (*tail).next_abandoned = *a as *mut Heap };
        *a = done as usize;
    }
}

/// Collects remote frees on every slab of `h` and gives empty slabs back,
/// the current ones included.
///
/// # Safety
/// The caller owns `h` (its thread, or it holds it off the abandoned list).
pub unsafe fn collect(h: *mut Heap) {
    // SAFETY: owner-only access to h's lists and slabs.
    unsafe {
        process_delayed(h);
        release_empty(h);
        flush_block_cache(h);
        for class in 0..NR_CLASSES {
            let cur = (*h).current[class];
            if cur != empty_slab() {
                note_collected(h, slab::collect_thread_free(cur));
                if (*cur).aux == 0 {
                    (*h).current[class] = empty_slab();
                    retire(h, cur);
                }
            }
            let mut s = (*h).partial[class].first();
            while !s.is_null() {
                let next = (*s).next;
                note_collected(h, slab::collect_thread_free(s));
                if (*s).aux == 0 {
                    (*h).partial[class].remove(s);
                    retire(h, s);
                }
                s = next;
            }
        }
    }
}

#[inline]
fn note_collected(h: *mut Heap, n: u32) {
    if n > 0 {
        // SAFETY: h is a live heap; only its owner writes this counter.
        bump(unsafe { &(*h).remote_collected }, u64::from(n));
    }
}

/// Moves slabs that got remote frees while full back to the partial lists.
///
/// # Safety
/// The caller owns `h`.
unsafe fn process_delayed(h: *mut Heap) {
    // SAFETY: owner-only; the stack was filled by remote freers and is ours
    // once swapped out.
    unsafe {
        if (*h).delayed.load(Relaxed).is_null() {
            return;
        }
        let mut s = (*h).delayed.swap(ptr::null_mut(), Acquire);
        while !s.is_null() {
            let next = (*s).next;
            (*s).next = ptr::null_mut();
            (*s).flags &= !flags::IN_FULL;
            note_collected(h, slab::collect_thread_free(s));
            if (*s).aux == 0 {
                park_or_retire(h, s);
            } else {
                (*h).partial[(*s).class as usize].push_front(s);
            }
            s = next;
        }
    }
}

/// Parks an empty slab on its order's empty list, or gives it back if the
/// heap already keeps `park_high` bytes of them.
///
/// # Safety
/// `s` is a slab of `h` with no live object, on no list and not current.
unsafe fn park_or_retire(h: *mut Heap, s: *mut Page) {
    // SAFETY: forwarded contract; owner-only fields.
    unsafe {
        if !(*h).parked.park(s, (*h).park_high) {
            (*h).park_missed += PAGE_SIZE << (*s).order;
            retire(h, s);
        }
    }
}

/// A new slab of `bytes` is needed: if slabs were given back for lack of
/// parking room since the last tick, make room for this one more (the
/// refill half of the `high` auto-tuning, applied to parked slabs).
///
/// # Safety
/// The caller owns `h`.
unsafe fn grow_park_high(h: *mut Heap, bytes: usize) {
    // SAFETY: owner-only fields.
    unsafe {
        if (*h).park_missed > 0 && !ZONE.below_high() {
            let grow = bytes.min((*h).park_missed);
            (*h).park_missed -= grow;
            (*h).park_high = ((*h).park_high + grow).min(PARK_HIGH_MAX);
        }
    }
}

/// The tick's half: `park_high` loses 1/8, down to PARK_HIGH_MIN.
///
/// # Safety
/// The caller owns `h`.
unsafe fn decay_park_high(h: *mut Heap) {
    // SAFETY: owner-only fields.
    unsafe {
        let high = (*h).park_high;
        (*h).park_high = (high - high / 8).max(PARK_HIGH_MIN);
        (*h).park_missed = 0;
    }
}

/// Gives the cached large blocks back to the pageset.
///
/// # Safety
/// The caller owns `h`.
pub unsafe fn flush_block_cache(h: *mut Heap) {
    // SAFETY: owner-only fields; cached blocks are ours, kind Cached.
    unsafe {
        for order in 0..crate::config::NR_PCP_ORDERS {
            let d = (*h).block_cache[order];
            if !d.is_null() {
                (*h).block_cache[order] = ptr::null_mut();
                (*d).set_kind(crate::page::PageKind::None);
                (*d).flags = 0;
                (*d).aux = 0;
                pages::free_pages(d, order as u32, (*h).pageset);
            }
        }
    }
}

/// Gives every parked empty slab back.
///
/// # Safety
/// The caller owns `h`.
unsafe fn release_empty(h: *mut Heap) {
    // SAFETY: forwarded contract.
    unsafe { retire_chain(h, (*h).parked.take_all(true), false) };
}

/// Gives back the parked slabs of every heap whose parking lock is free —
/// the maintenance tick's share, so a thread that went idle does not keep
/// them — straight to the zone. Returns how many slabs went back.
pub fn release_parked_everywhere() -> usize {
    let mut n = 0;
    for_each(|h| {
        // SAFETY: heaps live forever; take_all hands us their parked slabs.
        unsafe {
            let chain = (*h).parked.take_all(false);
            if !chain.is_null() {
                n += retire_chain(h, chain, true);
            }
        }
    });
    n
}

/// Gives back a chain (through `next`) of empty slabs of `h`, to the
/// heap's pageset or, with `to_zone`, to the zone. Returns the count.
///
/// # Safety
/// The slabs are empty slabs of `h` that the caller took off every list.
unsafe fn retire_chain(h: *mut Heap, mut s: *mut Page, to_zone: bool) -> usize {
    let mut n = 0;
    // SAFETY: forwarded contract; each block goes back whole.
    unsafe {
        while !s.is_null() {
            let next = (*s).next;
            (*s).next = ptr::null_mut();
            if to_zone {
                let order = u32::from((*s).order);
                slab::fini(s);
                ZONE.free(s, order);
                bump(&(*h).slabs_retired, 1);
            } else {
                retire(h, s);
            }
            n += 1;
            s = next;
        }
    }
    n
}

/// Gives an empty slab back to the page allocator.
///
/// # Safety
/// `s` is a slab of `h` with no live object, on no list and not current.
unsafe fn retire(h: *mut Heap, s: *mut Page) {
    // SAFETY: forwarded contract; the block goes back whole.
    unsafe {
        let order = u32::from((*s).order);
        slab::fini(s);
        pages::free_pages(s, order, (*h).pageset);
        bump(&(*h).slabs_retired, 1);
    }
}

/// The allocation slow path: the current slab of `class` is empty. Refills
/// it from remote frees or its untouched tail, else moves to a partial
/// slab, else makes a new slab. Null when out of memory.
///
/// # Safety
/// `h` is the calling thread's heap (possibly the empty heap).
#[cold]
#[inline(never)]
pub unsafe fn alloc_slow(h: *mut Heap, class: usize) -> *mut u8 {
    let h = if h == empty_heap() { heap_init() } else { h };
    if h.is_null() {
        return ptr::null_mut();
    }
    crate::maint::on_slow_path();
    // SAFETY: h is this thread's heap; every slab reached is owned by it.
    unsafe {
        let tick = crate::maint::TICKS.load(Relaxed);
        if tick != (*h).tick_seen {
            (*h).tick_seen = tick;
            release_empty(h);
            flush_block_cache(h);
            decay_park_high(h);
        }
        loop {
            let cur = (*h).current[class];
            if cur != empty_slab() {
                if !(*cur).free.is_null() {
                    return pop(cur);
                }
                let n = slab::collect_thread_free(cur);
                if n > 0 {
                    note_collected(h, n);
                    return pop(cur);
                }
                if slab::extend(cur) {
                    return pop(cur);
                }
                if !slab::mark_full(cur) {
                    continue; // remote frees arrived meanwhile
                }
                (*h).current[class] = empty_slab();
            }
            process_delayed(h);
            let next = (*h).partial[class].pop_front();
            if !next.is_null() {
                (*h).current[class] = next;
                continue;
            }
            let order = u32::from(SLAB_ORDER[class]);
            let parked = (*h).parked.take(order);
            if !parked.is_null() {
                if (*parked).class as usize != class {
                    slab::reinit(parked, class);
                }
                (*h).current[class] = parked;
                continue;
            }
            grow_park_high(h, PAGE_SIZE << order);
            let mut head = pages::alloc_pages(order, MigrateType::Unmovable, (*h).pageset);
            if head.is_null() && release_parked_everywhere() > 0 {
                head = pages::alloc_pages(order, MigrateType::Unmovable, (*h).pageset);
            }
            if head.is_null() {
                return ptr::null_mut();
            }
            slab::init(head, class, order, h.cast());
            bump(&(*h).slabs_created, 1);
            (*h).current[class] = head;
        }
    }
}

/// The local free slow path: the slab just became empty, or it was full.
///
/// # Safety
/// `h` is the calling thread's heap and owns `s`.
#[cold]
#[inline(never)]
pub unsafe fn free_local_slow(h: *mut Heap, s: *mut Page) {
    // SAFETY: owner-only access to h and s.
    unsafe {
        let class = (*s).class as usize;
        if (*s).flags & flags::IN_FULL != 0 {
            // Back from full, unless a remote free already queued it on the
            // delayed stack (then it comes back from there).
            if slab::unmark_full(s) {
                if (*s).aux == 0 {
                    park_or_retire(h, s);
                } else {
                    (*h).partial[class].push_front(s);
                }
            }
            return;
        }
        if (*s).aux == 0 && (*h).current[class] != s {
            (*h).partial[class].remove(s);
            park_or_retire(h, s);
        }
    }
}

/// Tells the owner of a full slab that a remote free gave it room.
///
/// # Safety
/// `s` is a slab whose FULL_NOTIFY this thread just cleared.
#[cold]
pub unsafe fn notify_owner(s: *mut Page) {
    // SAFETY: heaps live forever; the slab stays IN_FULL (and so off every
    // list) until its owner pops it from the delayed stack.
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

/// Calls `f` on every heap ever created.
pub fn for_each(mut f: impl FnMut(*mut Heap)) {
    let mut h = ALL_HEAPS.load(Acquire);
    while !h.is_null() {
        f(h);
        // SAFETY: heaps live forever.
        h = unsafe { (*h).next_all.load(Acquire) };
    }
}

/// Takes the abandoned-list lock before fork.
pub fn before_fork() {
    core::mem::forget(ABANDONED.lock());
    // No heap is created while ABANDONED is held (acquire_heap takes it
    // first), so after_fork releases exactly the locks taken here.
    // SAFETY: heaps live forever.
    for_each(|h| unsafe { (*h).parked.before_fork() });
}

/// After fork: releases the lock (parent) or resets it and marks every
/// other thread's heap lost (child: those threads do not exist there).
///
/// # Safety
/// Only right after fork, having called [`before_fork`].
pub unsafe fn after_fork(child: bool) {
    if child {
        let me = tls::heap();
        for_each(|h| {
            // SAFETY: heaps live forever; state is atomic.
            let st = unsafe { &(*h).state };
            if h != me && st.load(Relaxed) == HEAP_ACTIVE {
                st.store(HEAP_LOST, Relaxed);
            }
        });
    }
    // SAFETY: held since before_fork in this thread. The parent must wake
    // threads that queued on the lock meanwhile; the child has none.
    unsafe {
        for_each(|h| (*h).parked.after_fork());
        if child {
            ABANDONED.lock.force_unlock();
        } else {
            ABANDONED.lock.unlock();
        }
    }
}
