//! A thread heap's parked slabs: emptied slabs (every slab is one order,
//! `SLAB_ORDER`) kept ready for any class, so a class that shrinks and
//! grows again does not send its slabs through the pageset each time (see
//! `park_high.rs` for how much is kept: `park_high`).
//!
//! The owner parks and takes slabs; the maintenance tick takes them all
//! back each tick, so an idle thread does not sit on them. Both sides go
//! through a lock that is only ever *tried* by the owner (busy: it gives
//! the slab back, or makes a new one, instead of waiting) and held only
//! for list operations — never while another lock is taken, so it is a
//! leaf of the lock order.
//!
//! Invariants (under the lock): every slab on `list` is an empty slab of
//! this heap, on no other list; `bytes` is their total size
//! (`SLAB_BYTES` each).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::geometry::PAGE_SIZE;
use crate::page::PageList;

use crate::slab::classes::SLAB_ORDER;
use crate::slab::slab::Slab;
use crate::sync::TryLock;

/// Bytes of one parked slab.
const SLAB_BYTES: usize = PAGE_SIZE << SLAB_ORDER;

/// Parked slabs. See the module docs.
pub struct Parked {
    lock: TryLock,
    list: UnsafeCell<PageList<Slab>>,
    /// Written only under `lock`; read without it as a hint.
    bytes: AtomicUsize,
}

// SAFETY: the list is only touched under `lock`.
unsafe impl Sync for Parked {}

impl Parked {
    /// No parked slab.
    pub const fn new() -> Parked {
        Parked {
            lock: TryLock::new(),
            list: UnsafeCell::new(PageList::new()),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the list under the lock if it is free right now (or,
    /// with `wait`, once it is); `busy` otherwise.
    fn with<R>(&self, wait: bool, busy: R, f: impl FnOnce(&mut PageList<Slab>) -> R) -> R {
        if wait {
            self.lock.lock();
        } else if !self.lock.try_lock() {
            return busy;
        }
        // SAFETY: we hold the lock, which guards the list.
        let r = f(unsafe { &mut *self.list.get() });
        // SAFETY: taken above.
        unsafe { self.lock.unlock() };
        r
    }

    /// Parks `s` if that keeps the total at or below `limit` bytes and the
    /// lock is free. False: the caller gives the slab back.
    ///
    /// # Safety
    /// `s` is an empty slab of the calling thread's heap (whose `Parked`
    /// this is), on no list and not current.
    pub unsafe fn park(&self, s: *mut Slab, limit: usize) -> bool {
        self.with(false, false, |list| {
            let bytes = self.bytes.load(Relaxed);
            if bytes + SLAB_BYTES > limit {
                return false;
            }
            self.bytes.store(bytes + SLAB_BYTES, Relaxed);
            // SAFETY: s is on no list (contract) and joins this one.
            unsafe { list.push_front(s) };
            true
        })
    }

    /// Takes a parked slab, or null (none, or the lock is busy).
    pub fn take(&self) -> *mut Slab {
        if self.bytes.load(Relaxed) == 0 {
            return core::ptr::null_mut();
        }
        self.with(false, core::ptr::null_mut(), |list| {
            // SAFETY: the list holds parked slabs, linked by us.
            let s = unsafe { list.pop_front() };
            if !s.is_null() {
                self.bytes.fetch_sub(SLAB_BYTES, Relaxed);
            }
            s
        })
    }

    /// Empties the list: returns every parked slab, chained through
    /// `next`, for the caller to give back. `wait`: wait for the lock
    /// instead of giving up when it is busy.
    pub fn take_all(&self, wait: bool) -> *mut Slab {
        if self.bytes.load(Relaxed) == 0 {
            return core::ptr::null_mut();
        }
        self.with(wait, core::ptr::null_mut(), |list| {
            let mut chain: *mut Slab = core::ptr::null_mut();
            loop {
                // SAFETY: the list holds parked slabs; once popped a slab
                // is ours to relink.
                unsafe {
                    let s = list.pop_front();
                    if s.is_null() {
                        break;
                    }
                    (*s).next = chain;
                    chain = s;
                }
            }
            self.bytes.store(0, Relaxed);
            chain
        })
    }

    /// Bytes parked (a snapshot).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }

    /// Calls `f` on every parked slab, under the lock (checks).
    pub fn for_each(&self, mut f: impl FnMut(*mut Slab)) {
        self.with(true, (), |list| {
            // SAFETY: under the lock the list and its links are stable.
            unsafe {
                list.check();
                let mut s = list.first();
                while !s.is_null() {
                    f(s);
                    s = (*s).next;
                }
            }
        })
    }

    /// Before fork: takes the lock, so no other thread is mid-operation
    /// when the child's copy is made.
    pub fn lock_for_fork(&self) {
        self.lock.lock();
    }

    /// After fork, in parent and child: releases the lock `lock_for_fork`
    /// took.
    ///
    /// # Safety
    /// Only after [`lock_for_fork`](Self::lock_for_fork) in this thread.
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.lock.unlock() };
    }
}

impl Default for Parked {
    fn default() -> Self {
        Self::new()
    }
}
