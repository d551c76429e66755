//! Thread heaps: per size class a bin of free objects (the thread cache,
//! `bin.rs`), the current slab bins are refilled from and a list of
//! partial slabs; plus the delayed and emptied stacks (see
//! `remote_list.rs`), the parked empty slabs.
//!
//! A heap is a value over a page allocator it is handed
//! ([`Pages`](crate::page_alloc::Pages)) on every call that may need
//! pages; it names no global. The runtime gives every thread one on its
//! first allocation ([`super::heaps`] keeps them all); tests and the
//! replay make their own.
//!
//! This file holds the heap, its owner-only state ([`Local`]), the entry
//! points the small-object fast paths inline, and the owner's handle
//! ([`Owned`]). Its other jobs are in their own files: `refill.rs`
//! (refilling bins from slabs, giving objects and slabs back),
//! `park_high.rs` (how many emptied slabs a heap keeps parked:
//! `park_high`'s auto-tuning), `check.rs` (the invariant checker),
//! `counters.rs` (what a heap counts, and the bytes in use) and
//! `blocks.rs` (the entry points of its large bins, the block
//! cache).
//!
//! Allocation pops the class's bin; an empty bin is refilled with every
//! free object of the current slab (its own list, then its remote list,
//! then a page of its untouched tail). Free pushes on the bin; an object
//! whose bin is full goes straight back onto its slab's own list
//! (`free.rs`). Slab states, for one heap and class:
//!
//! ```text
//!   new ──► current ──(exhausted)──► full (IN_FULL, on no list)
//!             ▲  ▲                      │ objects given back / delayed notice
//!             │  └──────── partial ◄────┘
//!             └─ (current exhausted, take next partial)
//!   partial or full ──(no live object)──► parked, or back to the pages
//! ```
//!
//! Ownership: the owner-only state ([`Local`]: the bins, the chains of
//! remote frees, the tuning) is reached through an [`Owned`] handle, which
//! only the owning thread (or whoever holds the heap off the abandoned
//! list) makes. The slabs in use ([`Lists`]: current and partial slabs)
//! are behind the heap's `slow` lock, a [`BiasedLock`]: the owner enters
//! it on its slow paths with plain stores ([`Heap::lock_lists`]), and
//! another thread may take it while the owner is out of them
//! ([`Heap::try_lock_lists_remote`]) to give back slabs whose every object
//! is free (`emptied.rs`). The owner's fast paths take no lock and touch
//! no list: they pop and push bins, and the bin-full free writes a slab's
//! `free` and `used` — of a slab with a live object, which no collector
//! takes. Other threads touch only the atomics (the delayed and emptied
//! stacks, the counters, the lock) and the parked lists (under their
//! lock).
//!
//! Invariants: a slab of this heap that is not current and not IN_FULL is
//! on `partial[class]` and has a free object (or is QUEUED: on the emptied
//! stack, possibly with every object free), or parked and has none;
//! `used` counts the slab's live objects plus those on bins, on chains
//! and waiting on `thread_free`; the parked slabs add up to at most
//! `park_high` ≤ PARK_HIGH_MAX; a slab on the emptied stack has QUEUED set
//! and is not parked (see `remote_list.rs`).

use core::cell::UnsafeCell;
use core::ptr::{self, addr_of};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering::*};

use crate::heap_profile::Sampler;
use crate::page::PageList;
use crate::page_alloc::pcp::tuner::Tuner;
use crate::page_alloc::pcp::Pageset;
use crate::sync::{bump, BiasedLock, Entry};
use crate::trace::Buffer;

use super::bin::{Bins, BIN_LIMIT};
use super::block_bins::BlockBins;
use super::lifetime::Lifetimes;
use super::parked::Parked;
use super::remote::RemoteBatch;
use crate::slab::classes::NR_CLASSES;
use crate::slab::object::FreeObject;
use crate::slab::remote_list::{self, Pushed};
use crate::slab::slab::{self, Slab};

/// Bytes of empty slabs a heap may always keep parked (`park_high`'s
/// floor; see `park_high.rs`).
pub const PARK_HIGH_MIN: usize = 256 << 10;
/// The most `park_high` grows to.
pub const PARK_HIGH_MAX: usize = 4 << 20;

/// Heap state: the static empty heap.
pub(crate) const HEAP_EMPTY: u8 = 0;
/// Heap state: owned by a live thread.
pub(crate) const HEAP_ACTIVE: u8 = 1;
/// Heap state: its thread exited; waiting to be adopted.
pub(crate) const HEAP_ABANDONED: u8 = 2;
/// Heap state: owned by a thread that did not survive fork; never reused.
pub(crate) const HEAP_LOST: u8 = 3;

/// The owner-only part of a heap.
#[repr(C)]
pub struct Local {
    /// Free objects per class. Hot: first, at offset 0 of the heap.
    pub bins: Bins,
    /// How many bytes of empty slabs may be parked (`high`), auto-tuned
    /// by the pagesets' tuner, in bytes (see `park_high.rs`).
    pub park: Tuner,
    /// The zone epoch (ticks run) this heap last acted on.
    pub(super) epoch_seen: u32,
    /// The zone epoch of the owner's last sweep of its lists for slabs
    /// whose every object is free (`emptied.rs`).
    pub(super) swept_at: u32,
    /// The thread's pageset in thread mode, else null (this CPU's).
    pub pageset: *mut Pageset,
    /// The runtime's reclaim epoch this heap last collected for (see
    /// `runtime/reclaim.rs`).
    pub reclaim_seen: u32,
    /// Other heaps' objects this thread freed, waiting to go back to their
    /// slabs in batches (`remote.rs`).
    pub(super) remote: RemoteBatch,
    /// Per class, how its slabs come back: the lifetime signal that picks
    /// a new slab's migratetype (`lifetime.rs`).
    pub(super) lifetimes: Lifetimes,
    /// The heap profile's countdowns for this thread (`crate::heap_profile`).
    pub profile: Sampler<NR_CLASSES>,
}

/// A heap's slabs in use: what its owner's slow paths change, and
/// another thread may too while the owner is out of them. Reached only
/// through a [`ListsGuard`] (the heap's `slow` lock held).
pub(crate) struct Lists {
    /// The slab of each class bins are refilled from (the empty slab when
    /// none).
    pub current: [*mut Slab; NR_CLASSES],
    /// Partial slabs per class, excluding the current one.
    pub(super) partial: [PageList<Slab>; NR_CLASSES],
}

/// A thread heap. See the module docs.
#[repr(C, align(64))]
pub struct Heap {
    /// Owner-only state; first, so the fast paths reach the bins at a
    /// fixed offset from the heap pointer.
    pub(super) local: UnsafeCell<Local>,
    /// The slabs in use, behind `slow`.
    pub(super) lists: UnsafeCell<Lists>,
    /// Slabs that had a remote free while full (stack through `next`).
    pub delayed: AtomicPtr<Slab>,
    /// Slabs a remote free left with every object free (stack through
    /// `remote_list::emptied_link`; each QUEUED).
    pub emptied: AtomicPtr<Slab>,
    /// Guards `lists`: the owner's slow paths, or another thread giving
    /// back emptied slabs while the owner is out of them.
    pub(super) slow: BiasedLock,
    /// The zone epoch the owner last saw on an allocation slow path (a
    /// copy of `Local::epoch_seen` other threads read: is the owner idle?).
    pub(super) slow_epoch: AtomicU32,
    /// Slow paths taken by the owner, for the tick's looks at the clock
    /// (`runtime/tick.rs`, every 64th): the owner's own count, where one
    /// counter of the process moved its cache line between CPUs at every
    /// slow path of every thread (1.9% of the page band's samples). The
    /// empty heap's is shared by the threads without a heap (a hint).
    pub slow_calls: AtomicU32,
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
    /// Slabs this heap created in reclaimable pageblocks, for a class
    /// found short-lived (`lifetime.rs`).
    pub slabs_short_lived: AtomicU64,
    /// Objects freed by other threads and collected here.
    pub remote_collected: AtomicU64,
    /// Small-object allocation slow paths taken while the heap profile
    /// sampled (`runtime/sampled.rs`): a bin out of pop credit, a sample,
    /// or a refill. Written by the owner alone.
    pub profile_slow_paths: AtomicU64,
    /// Bytes of objects taken off this heap's slabs (onto its bins), and
    /// objects of each class put back on them — counted as objects, so the
    /// free that finds its bin full adds one to a word it indexes already
    /// instead of looking the class's size up (bytes = count × class
    /// size). Written by the owner alone (load and store, no
    /// read-modify-write), so each only grows; see [`Heap::usage`].
    pub(super) small_taken: AtomicU64,
    pub(super) returned_objects: [AtomicU64; NR_CLASSES],
    /// Other heaps' small objects this heap's thread freed (onto their
    /// slabs' remote lists), per class — objects, as `returned_objects`,
    /// so the remote free adds one to a word its class indexes. Written by
    /// the owner alone — except on the empty heap, shared by every thread
    /// without a heap, where they are added to atomically.
    pub(super) remote_freed_objects: [AtomicU64; NR_CLASSES],
    /// Bytes of large blocks this heap's thread allocated, and freed.
    pub(super) large_allocated: AtomicU64,
    pub(super) large_freed: AtomicU64,
    /// The trace buffer of the heap's thread, while tracing (null
    /// otherwise; made on the first event and kept with the heap).
    pub trace: AtomicPtr<Buffer>,
    /// Freed large blocks of up to 256 KiB kept for this thread
    /// (`block_bins/`).
    pub block_bins: BlockBins,
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
pub(crate) static EMPTY_HEAP: Heap = Heap::with_limits([0; NR_CLASSES]);

#[inline(always)]
pub(super) fn empty_slab() -> *mut Slab {
    addr_of!(EMPTY_SLAB) as *mut Slab
}

impl Heap {
    /// A heap with no slabs.
    pub const fn new() -> Heap {
        Heap::with_limits(BIN_LIMIT)
    }

    const fn with_limits(limits: [u32; NR_CLASSES]) -> Heap {
        Heap {
            local: UnsafeCell::new(Local {
                bins: Bins::new(limits),
                park: Tuner::new(PARK_HIGH_MIN as i32),
                epoch_seen: 0,
                swept_at: 0,
                pageset: ptr::null_mut(),
                reclaim_seen: 0,
                remote: RemoteBatch::new(),
                lifetimes: Lifetimes::new(),
                profile: Sampler::new(),
            }),
            lists: UnsafeCell::new(Lists {
                current: [addr_of!(EMPTY_SLAB) as *mut Slab; NR_CLASSES],
                partial: [const { PageList::new() }; NR_CLASSES],
            }),
            delayed: AtomicPtr::new(ptr::null_mut()),
            emptied: AtomicPtr::new(ptr::null_mut()),
            slow: BiasedLock::new(),
            slow_epoch: AtomicU32::new(0),
            slow_calls: AtomicU32::new(0),
            parked: Parked::new(),
            state: AtomicU8::new(HEAP_EMPTY),
            next_all: AtomicPtr::new(ptr::null_mut()),
            next_abandoned: UnsafeCell::new(ptr::null_mut()),
            slabs_created: AtomicU64::new(0),
            slabs_retired: AtomicU64::new(0),
            slabs_short_lived: AtomicU64::new(0),
            remote_collected: AtomicU64::new(0),
            profile_slow_paths: AtomicU64::new(0),
            small_taken: AtomicU64::new(0),
            returned_objects: [const { AtomicU64::new(0) }; NR_CLASSES],
            remote_freed_objects: [const { AtomicU64::new(0) }; NR_CLASSES],
            large_allocated: AtomicU64::new(0),
            large_freed: AtomicU64::new(0),
            trace: AtomicPtr::new(ptr::null_mut()),
            block_bins: BlockBins::new(),
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
                Heap::free_remote_alone(p, s);
            } else {
                (*(*h).local.get()).remote.push(p, s, Heap::notify_owner);
            }
        }
    }

    /// A thread without a heap frees `p` of slab `s` straight onto the
    /// slab's remote list.
    ///
    /// # Safety
    /// As [`free_remote`](Self::free_remote).
    #[cold]
    #[inline(never)]
    unsafe fn free_remote_alone(p: *mut u8, s: *mut Slab) {
        // SAFETY: forwarded contract.
        unsafe {
            let pushed = remote_list::push_remote(s, p, p, 1);
            if pushed != Pushed::NONE {
                Heap::notify_owner(s, pushed);
            }
        }
    }

    /// [`free_remote`](Self::free_remote)'s common case, inline in the free
    /// path: `p`, marked with `key` and counted, joins the chain of its
    /// slab in `h`'s batch of remote frees. False, nothing done, for the
    /// empty heap (no heap, exited, tracing) or when the batch must flush
    /// or change slabs — the whole path's work.
    ///
    /// # Safety
    /// As `free_remote`; `p` is a valid object of `s` without the key.
    #[inline(always)]
    pub unsafe fn free_remote_hit(h: *const Heap, p: *mut u8, s: *mut Slab, key: usize) -> bool {
        // SAFETY: the calling thread owns h's Local (contract), and the
        // empty heap's is not reached.
        unsafe {
            if (*h).is_empty_heap() || !(*(*h).local.get()).remote.push_hit(p, s) {
                return false;
            }
            FreeObject::at(p).mark(key);
            Heap::note_remote_freed(h, usize::from((*s).class));
            true
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
        unsafe { (*Heap::bins(h)).pop(class) }
    }

    /// [`alloc_fast`](Self::alloc_fast) from the bin `offset` bytes in
    /// (`classes::bin_offset_of`): malloc's fast path.
    ///
    /// # Safety
    /// As `alloc_fast`, and `offset` is a class's bin offset.
    #[inline(always)]
    pub unsafe fn alloc_fast_at(h: *const Heap, offset: usize) -> *mut u8 {
        // SAFETY: as in alloc_fast.
        unsafe { (*Heap::bins(h)).pop_at(offset) }
    }

    /// The owner frees `p`, whose bin is full, straight onto slab `s` of
    /// class `class` (marked with `key`, counted as returned). True when
    /// the slab then needs [`Owned::slab_given_back`] (it became empty, or
    /// was full). Kept apart from `Owned` so the common case needs no page
    /// allocator.
    ///
    /// # Safety
    /// The calling thread owns `h`, and `h` owns `s`; `p` is a live object
    /// of `s` that nobody uses; `class` is `s`'s class.
    #[inline]
    pub unsafe fn give_back_to_slab(
        h: &Heap,
        p: *mut u8,
        s: *mut Slab,
        class: usize,
        key: usize,
    ) -> bool {
        // SAFETY: p is ours to mark and relink; owner-only slab fields
        // and counters (contract); class < NR_CLASSES (a slab's class).
        unsafe {
            debug_assert_eq!(class, usize::from((*s).class));
            FreeObject::at(p).mark(key);
            bump(h.returned_objects.get_unchecked(class), 1);
            slab::give_back(s, p)
        }
    }

    /// The heap profile's sampler, for the owner's slow path to read
    /// before it makes a handle (the empty heap's too: it never drew).
    ///
    /// # Safety
    /// `h` is a live heap; the owner alone writes the sampler.
    #[inline(always)]
    pub unsafe fn sampler(h: *const Heap) -> *const Sampler<NR_CLASSES> {
        // SAFETY: forwarded contract.
        unsafe { addr_of!((*(*h).local.get()).profile) }
    }

    /// The sampler, for its owner's large allocation path to count on.
    ///
    /// # Safety
    /// As [`bins`](Self::bins): the pointer is only used by the owning
    /// thread, and never to write to the empty heap (whose sampler never
    /// drew, so no count is made on it).
    #[inline(always)]
    pub unsafe fn sampler_mut(h: *const Heap) -> *mut Sampler<NR_CLASSES> {
        // SAFETY: forwarded contract.
        unsafe { addr_of!((*(*h).local.get()).profile) as *mut Sampler<NR_CLASSES> }
    }

    /// The bins, for the owner's fast paths.
    ///
    /// # Safety
    /// As [`alloc_fast`](Self::alloc_fast): the pointer is only used by the
    /// owning thread, and never to write to the empty heap.
    #[inline(always)]
    pub unsafe fn bins(h: *const Heap) -> *mut Bins {
        // SAFETY: forwarded contract.
        unsafe { addr_of!((*(*h).local.get()).bins) as *mut Bins }
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

    /// Tells the owner of slab `s` what a push on its remote list asks
    /// (`pushed`): a full slab that got room goes on the owner's delayed
    /// stack, a slab whose every object is now free on its emptied stack.
    ///
    /// # Safety
    /// `pushed` is what this thread's `remote_list::push_remote` on `s`
    /// returned.
    #[cold]
    #[inline(never)]
    pub unsafe fn notify_owner(s: *mut Slab, pushed: Pushed) {
        // SAFETY: forwarded contract.
        unsafe {
            if pushed.full() {
                Heap::notify_full(s);
            } else if pushed.emptied() {
                Heap::notify_emptied(s);
            }
        }
    }

    /// Tells the owner of full slab `s` that a remote free gave it room.
    ///
    /// # Safety
    /// `s` is a slab whose FULL_NOTIFY this thread just cleared.
    unsafe fn notify_full(s: *mut Slab) {
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

    /// Puts slab `s`, whose every object a remote free just left free, on
    /// its owner's emptied stack.
    ///
    /// # Safety
    /// `s` is a slab whose QUEUED this thread just set (so nobody gives
    /// it back before the stack's reader takes it off).
    unsafe fn notify_emptied(s: *mut Slab) {
        // SAFETY: heaps live forever; QUEUED keeps the slab alive and its
        // link ours until the stack is taken.
        unsafe {
            let owner = (*s).owner.load(Acquire).cast::<Heap>();
            let stack = &(*owner).emptied;
            let link = remote_list::emptied_link(s);
            let mut head = stack.load(Relaxed);
            loop {
                *link = head;
                match stack.compare_exchange_weak(head, s, Release, Relaxed) {
                    Ok(_) => return,
                    Err(x) => head = x,
                }
            }
        }
    }

    /// The owner enters its slow paths: the guard gives it the lists, and
    /// keeps other threads out of them until dropped. Plain stores unless
    /// another thread holds the lists (then it waits for it).
    ///
    /// # Safety
    /// The calling thread owns the heap and holds no guard of it already.
    #[inline]
    pub(super) unsafe fn lock_lists(&self) -> ListsGuard<'_> {
        ListsGuard {
            heap: self,
            entry: Some(self.slow.owner_enter()),
        }
    }

    /// Another thread takes the lists, once the owner is out of its slow
    /// paths (it waits for that); `None` when the owner cannot be kept out
    /// (no membarrier). The owner's fast paths go on meanwhile: see the
    /// module docs for what the holder may then touch.
    pub(super) fn try_lock_lists_remote(&self) -> Option<ListsGuard<'_>> {
        if !self.slow.try_remote_lock() {
            return None;
        }
        Some(ListsGuard {
            heap: self,
            entry: None,
        })
    }
}

/// Proof that a heap's `slow` lock is held (by its owner, or by another
/// thread), and the way to its [`Lists`]; released when dropped.
pub(crate) struct ListsGuard<'a> {
    heap: &'a Heap,
    /// How the owner entered; `None` for another thread.
    entry: Option<Entry>,
}

impl ListsGuard<'_> {
    /// The lists.
    #[inline]
    pub(crate) fn lists(&mut self) -> &mut Lists {
        // SAFETY: the guard holds the lock that guards them, and lends
        // them out once at a time (borrowed mutably).
        unsafe { &mut *self.heap.lists.get() }
    }
}

impl Drop for ListsGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: paired with the enter that made the guard.
        unsafe {
            match self.entry {
                Some(e) => self.heap.slow.owner_exit(e),
                None => self.heap.slow.remote_unlock(),
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
/// ones through `local`. Its slow paths are in `refill.rs` and
/// `park_high.rs`, its checker in `check.rs`.
pub struct Owned<'a> {
    pub(super) heap: &'a Heap,
    pub(super) local: &'a mut Local,
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

    /// The tag this heap's slabs carry in `owner`: its address.
    pub(super) fn owner_tag(&self) -> *mut u8 {
        self.heap as *const Heap as *mut u8
    }

    /// Counts `n` objects of slab `s` freed remotely and collected (their
    /// bytes were counted by their freer, see `note_remote_freed`).
    pub(super) fn note_collected(&self, _s: *mut Slab, n: u32) {
        if n > 0 {
            bump(&self.heap.remote_collected, u64::from(n));
        }
    }
}
