//! A thread heap's parked slabs: emptied slabs kept per order (one order
//! since every slab is 32 KiB), ready for any class, so a class that
//! shrinks and grows again does
//! not send its slabs through the pageset each time (see `park_high.rs`
//! for how much is kept: `park_high`).
//!
//! The owner parks and takes slabs; the maintenance tick takes them all
//! back each tick, so an idle thread does not sit on them. Both sides go
//! through a lock that is only ever *tried* by the owner (busy: it gives
//! the slab back, or makes a new one, instead of waiting) and held only
//! for list operations — never while another lock is taken, so it is a
//! leaf of the lock order.
//!
//! Invariants (under the lock): every slab on `lists[o]` is an empty slab
//! of order `o` of this heap, on no other list; `bytes` is their total
//! size.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::geometry::{NR_PCP_ORDERS, PAGE_SIZE};
use crate::page::PageList;

use super::slab::Slab;
use crate::sync::TryLock;

type Lists = [PageList<Slab>; NR_PCP_ORDERS];

/// Parked slabs. See the module docs.
pub struct Parked {
    lock: TryLock,
    lists: UnsafeCell<Lists>,
    /// Written only under `lock`; read without it as a hint.
    bytes: AtomicUsize,
}

// SAFETY: the lists are only touched under `lock`.
unsafe impl Sync for Parked {}

impl Parked {
    /// No parked slab.
    pub const fn new() -> Parked {
        Parked {
            lock: TryLock::new(),
            lists: UnsafeCell::new([const { PageList::new() }; NR_PCP_ORDERS]),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the lists under the lock if it is free right now (or,
    /// with `wait`, once it is); `busy` otherwise.
    fn with<R>(&self, wait: bool, busy: R, f: impl FnOnce(&mut Lists) -> R) -> R {
        if wait {
            self.lock.lock();
        } else if !self.lock.try_lock() {
            return busy;
        }
        // SAFETY: we hold the lock, which guards the lists.
        let r = f(unsafe { &mut *self.lists.get() });
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
        // SAFETY: forwarded contract.
        let order = unsafe { (*s).order } as usize;
        let size = PAGE_SIZE << order;
        self.with(false, false, |lists| {
            let bytes = self.bytes.load(Relaxed);
            if bytes + size > limit {
                return false;
            }
            self.bytes.store(bytes + size, Relaxed);
            // SAFETY: s is on no list (contract) and joins this one.
            unsafe { lists[order].push_front(s) };
            true
        })
    }

    /// Takes a parked slab of `order`, or null (none, or the lock is busy).
    pub fn take(&self, order: u32) -> *mut Slab {
        let order = order as usize;
        if self.bytes.load(Relaxed) == 0 {
            return core::ptr::null_mut();
        }
        self.with(false, core::ptr::null_mut(), |lists| {
            // SAFETY: the list holds parked slabs, linked by us.
            let s = unsafe { lists[order].pop_front() };
            if !s.is_null() {
                self.bytes.fetch_sub(PAGE_SIZE << order, Relaxed);
            }
            s
        })
    }

    /// Empties the lists: returns every parked slab, chained through
    /// `next`, for the caller to give back. `wait`: wait for the lock
    /// instead of giving up when it is busy.
    pub fn take_all(&self, wait: bool) -> *mut Slab {
        if self.bytes.load(Relaxed) == 0 {
            return core::ptr::null_mut();
        }
        self.with(wait, core::ptr::null_mut(), |lists| {
            let mut chain: *mut Slab = core::ptr::null_mut();
            for list in lists.iter_mut() {
                loop {
                    // SAFETY: the list holds parked slabs; once popped a
                    // slab is ours to relink.
                    unsafe {
                        let s = list.pop_front();
                        if s.is_null() {
                            break;
                        }
                        (*s).next = chain;
                        chain = s;
                    }
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

    /// Calls `f` on every parked slab with its list's order, under the lock
    /// (checks).
    pub fn for_each(&self, mut f: impl FnMut(*mut Slab, usize)) {
        self.with(true, (), |lists| {
            for (order, list) in lists.iter().enumerate() {
                // SAFETY: under the lock the list and its links are stable.
                unsafe {
                    list.check();
                    let mut s = list.first();
                    while !s.is_null() {
                        f(s, order);
                        s = (*s).next;
                    }
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
