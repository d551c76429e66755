//! Remote frees in batches: a thread freeing another heap's objects keeps
//! them on a chain per slab, and hands each chain to its slab's remote
//! list with one CAS — not one per object.
//!
//! A remote free costs a CAS on the slab's `thread_free` word, a cache
//! line the owner writes too when it collects: in a producer/consumer
//! program (xmalloc-test, larson) every object freed moved that line
//! between the two cores. Here the freeing thread links the object onto a
//! chain in one of [`REMOTE_SLOTS`] slots (picked by the slab's address,
//! as a direct-mapped cache), and the chain goes to the slab at once when
//! it reaches [`REMOTE_BATCH`] objects, when another slab needs its slot,
//! or when the thread flushes: on its allocation slow path, when its heap
//! collects (thread exit, `thread_flush`, a reclaim). snmalloc batches
//! the same way per destination (its remote cache), the BatchIt paper
//! measures why.
//!
//! What waits on a chain is bounded (`REMOTE_SLOTS × REMOTE_BATCH`
//! objects per thread) and already counted as freed by this thread; its
//! slab still counts it in `used`, as it counts an object on the remote
//! list, so the slab cannot be given back under it. Each object carries
//! the free key from the moment it is freed, so a second free of it is
//! reported as before — also when the owner frees a block still waiting on
//! another thread's chain: the owner cannot walk that chain, but every
//! allocation clears the key, so a keyed block not on the owner's lists is
//! one of those (see `free.rs`). A chain whose push leaves its slab with
//! every object free puts the slab on its owner's emptied stack
//! (`remote_list::push_remote`, `emptied.rs`).
//!
//! Owner-only: the slots live in the heap's `Local` and only the heap's
//! thread touches them. A thread without a heap (the empty heap) frees
//! straight to the slab.

use core::ptr;

use crate::geometry::PAGE_DESC_SIZE;

use crate::slab::classes::SLAB_PAGES;
use crate::slab::marks;
use crate::slab::object::FreeObject;
use crate::slab::remote_list::{self, Pushed};
use crate::slab::slab::Slab;

/// Chains a heap keeps at once (a power of two).
pub const REMOTE_SLOTS: usize = 8;
/// Objects a chain collects before it goes to its slab.
pub const REMOTE_BATCH: u32 = 32;
/// Bytes between the head descriptors of neighbouring slabs.
const SLAB_DESC_BYTES: usize = PAGE_DESC_SIZE * SLAB_PAGES;
const _: () = assert!(SLAB_DESC_BYTES.is_power_of_two());

/// One chain: objects of `slab` linked through word 0, newest first.
#[derive(Clone, Copy, Debug)]
struct Chain {
    slab: *mut Slab,
    head: *mut u8,
    tail: *mut u8,
    count: u32,
}

impl Chain {
    /// Puts `p` at the head of the chain.
    ///
    /// # Safety
    /// `p` is a free object of the chain's slab that nobody else uses.
    #[inline(always)]
    unsafe fn append(&mut self, p: *mut u8) {
        // SAFETY: p is ours to relink (contract).
        unsafe { FreeObject::at(p).set_next(self.head) };
        self.head = p;
        self.count += 1;
    }
}

const EMPTY: Chain = Chain {
    slab: ptr::null_mut(),
    head: ptr::null_mut(),
    tail: ptr::null_mut(),
    count: 0,
};

/// The chains of one heap. Invariant: a slot with a null `slab` is empty;
/// otherwise `head ..= tail` holds `count` ≥ 1 objects of `slab`, each
/// with the free key, counted in the slab's `used`; `pending` has bit `i`
/// set exactly when slot `i` is not empty.
#[derive(Debug)]
pub(crate) struct RemoteBatch {
    slots: [Chain; REMOTE_SLOTS],
    pending: u32,
}

impl RemoteBatch {
    /// No chain.
    pub(crate) const fn new() -> RemoteBatch {
        RemoteBatch {
            slots: [EMPTY; REMOTE_SLOTS],
            pending: 0,
        }
    }

    /// The slot of slab `s`: the bits of its descriptor's address just
    /// above those every slab's share (slabs are aligned blocks of
    /// `SLAB_PAGES` pages, so their head descriptors lie `SLAB_DESC_BYTES`
    /// apart; taking the bits of one descriptor's width instead put every
    /// slab in slot 0).
    #[inline(always)]
    fn slot_of(s: *mut Slab) -> usize {
        (s as usize / SLAB_DESC_BYTES) & (REMOTE_SLOTS - 1)
    }

    /// Adds freed object `p` (already carrying the free key) of another
    /// heap's slab `s` to its chain; a chain that fills, or that held
    /// another slab, goes to its slab first, and `notify` is called with
    /// the slab and what its push asks of the owner (a slab that was full,
    /// or whose every object is free now: `slab::Pushed`).
    ///
    /// # Safety
    /// `p` is a valid object of `s` that the calling thread frees, `s` is
    /// not owned by this batch's heap, and the caller owns the batch.
    #[inline]
    pub(crate) unsafe fn push(
        &mut self,
        p: *mut u8,
        s: *mut Slab,
        notify: unsafe fn(*mut Slab, Pushed),
    ) {
        let i = Self::slot_of(s);
        let c = &mut self.slots[i];
        // SAFETY: p is ours to link (contract).
        unsafe {
            if c.slab == s {
                c.append(p);
                if c.count >= REMOTE_BATCH {
                    self.flush_slot(i, notify);
                }
                return;
            }
            if !c.slab.is_null() {
                self.flush_slot(i, notify);
            }
            FreeObject::at(p).set_next(ptr::null_mut());
            self.slots[i] = Chain {
                slab: s,
                head: p,
                tail: p,
                count: 1,
            };
            self.pending |= 1 << i;
        }
    }

    /// [`push`](Self::push)'s common case, inline in the free path: `p`
    /// joins its slot's chain when that chain is `s`'s and stays under
    /// [`REMOTE_BATCH`]. False, nothing done, when the chain is another
    /// slab's, empty, or would reach the batch: `push` then flushes.
    ///
    /// # Safety
    /// As `push`.
    #[inline(always)]
    pub(crate) unsafe fn push_hit(&mut self, p: *mut u8, s: *mut Slab) -> bool {
        let c = &mut self.slots[Self::slot_of(s)];
        if c.slab != s || c.count >= REMOTE_BATCH - 1 {
            return false;
        }
        // SAFETY: p is ours to relink (contract).
        unsafe { c.append(p) };
        true
    }

    /// Whether any chain waits.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Checks the invariant (see the struct) and returns the objects
    /// waiting on the chains: free, but still counted in their slabs'
    /// `used`. Only while the owner does not use the batch.
    pub(crate) fn check(&self) -> usize {
        let mut waiting = 0;
        for (i, c) in self.slots.iter().enumerate() {
            assert_eq!(
                self.pending & (1 << i) != 0,
                !c.slab.is_null(),
                "a chain's pending bit"
            );
            if c.slab.is_null() {
                continue;
            }
            let mut n = 0;
            let mut p = c.head;
            let mut last = p;
            while !p.is_null() {
                n += 1;
                assert!(n <= c.count, "a chain longer than its count");
                assert!(
                    // SAFETY: chained objects are free objects of c.slab.
                    unsafe { marks::object_at(c.slab, p).is_some() },
                    "a chained object off its slab's object starts"
                );
                last = p;
                // SAFETY: as above; the owner alone links them.
                p = unsafe { FreeObject::at(p).next() };
            }
            assert_eq!(n, c.count, "a chain's count");
            assert_eq!(last, c.tail, "a chain's tail");
            waiting += n as usize;
        }
        waiting
    }

    /// Hands every chain to its slab (`notify` as in [`push`](Self::push)).
    ///
    /// # Safety
    /// The caller owns the batch.
    pub(crate) unsafe fn flush(&mut self, notify: unsafe fn(*mut Slab, Pushed)) {
        while self.pending != 0 {
            let i = self.pending.trailing_zeros() as usize;
            // SAFETY: forwarded contract; slot i is not empty.
            unsafe { self.flush_slot(i, notify) };
        }
    }

    /// Hands slot `i`'s chain to its slab (one CAS), then `notify` with
    /// what the push asks.
    ///
    /// # Safety
    /// Slot `i` is not empty.
    #[inline(never)]
    unsafe fn flush_slot(&mut self, i: usize, notify: unsafe fn(*mut Slab, Pushed)) {
        let c = core::mem::replace(&mut self.slots[i], EMPTY);
        self.pending &= !(1 << i);
        debug_assert!(!c.slab.is_null() && c.count > 0);
        // SAFETY: the chain holds objects of c.slab freed by this thread,
        // counted in its `used` (invariant); after the CAS they are the
        // slab's.
        unsafe {
            let pushed = remote_list::push_remote(c.slab, c.head, c.tail, c.count);
            if pushed != Pushed::NONE {
                notify(c.slab, pushed);
            }
        }
    }
}

impl Default for RemoteBatch {
    fn default() -> Self {
        Self::new()
    }
}
