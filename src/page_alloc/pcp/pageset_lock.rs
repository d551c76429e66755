//! How a pageset is entered and locked: the owner of a thread's own
//! pageset without atomics, anyone else by a try on the alloc/free paths,
//! maintenance by waiting (or briefly, to skip it), fork by its two steps
//! (the locks themselves are `sync/cpu_lock.rs` and `sync::BiasedLock`).

use core::sync::atomic::Ordering::Relaxed;

use super::pageset::{Held, Pageset, PagesetGuard};
use crate::sync::bump;

impl Pageset {
    /// Makes this a thread's own pageset (its owner enters without atomic
    /// operations) or a shared one (per CPU).
    pub fn set_biased(&self, on: bool) {
        self.biased.store(on, Relaxed);
    }

    /// Whether this is a thread's own pageset.
    #[inline]
    pub fn is_biased(&self) -> bool {
        self.biased.load(Relaxed)
    }

    /// The way in on the alloc/free paths: the owner of a thread pageset
    /// always gets in; on a shared pageset the lock is only tried.
    #[inline]
    pub fn enter(&self, owner: bool) -> Option<PagesetGuard<'_>> {
        if owner {
            Some(PagesetGuard {
                ps: self,
                how: Held::Owner(self.lock.owner_enter()),
            })
        } else if self.biased.load(Relaxed) {
            // `then`, not `then_some`: a guard made eagerly would be
            // dropped on failure, releasing the holder's lock.
            self.lock.try_lock().then(|| PagesetGuard {
                ps: self,
                how: Held::Remote,
            })
        } else {
            self.cpu_lock.try_lock().then(|| PagesetGuard {
                ps: self,
                how: Held::Cpu,
            })
        }
    }

    /// The guard of a shared pageset whose lock word a critical section
    /// of its own CPU took (`PagesetPool::enter_cpu`), restarted `aborts`
    /// times on the way.
    ///
    /// # Safety
    /// The calling thread's critical section stored `rseq::LOCAL` into
    /// this pageset's `cpu_lock` word and nobody released it since.
    #[inline(always)]
    pub(super) unsafe fn entered_locally(&self, aborts: u32) -> PagesetGuard<'_> {
        if aborts != 0 {
            bump(&self.rseq_aborts, u64::from(aborts));
        }
        PagesetGuard {
            ps: self,
            how: Held::Cpu,
        }
    }

    /// The word a critical section takes (`cpu_lock`'s).
    #[inline(always)]
    pub(super) fn cpu_lock_word(&self) -> &core::sync::atomic::AtomicUsize {
        self.cpu_lock.word()
    }

    /// Says that the critical sections of `index` enter this (shared)
    /// pageset: taking it from elsewhere then costs a fence.
    pub(super) fn set_rseq_index(&self, index: usize) {
        self.cpu_lock.set_fence(index);
    }

    /// Waits for the pageset (maintenance, drain-all, stats, fork, tests).
    pub fn lock(&self) -> PagesetGuard<'_> {
        if self.biased.load(Relaxed) {
            self.lock.remote_lock(true);
            PagesetGuard {
                ps: self,
                how: Held::Remote,
            }
        } else {
            self.cpu_lock.lock();
            PagesetGuard {
                ps: self,
                how: Held::Cpu,
            }
        }
    }

    /// [`lock`](Self::lock) if the pageset comes free within a few
    /// microseconds (`sync::spin_briefly`): None if its holder stays
    /// longer, for maintenance that can skip it. A thread's own pageset
    /// is waited for as by `lock`.
    pub fn lock_briefly(&self) -> Option<PagesetGuard<'_>> {
        if self.biased.load(Relaxed) {
            return Some(self.lock());
        }
        self.cpu_lock.lock_briefly().then(|| PagesetGuard {
            ps: self,
            how: Held::Cpu,
        })
    }

    /// Fork's prepare, first step: takes the lock without the fence
    /// (`CpuLock::lock_unfenced`) for a shared pageset, whole for a
    /// thread's.
    pub(super) fn lock_for_fork(&self) {
        if self.biased.load(Relaxed) {
            core::mem::forget(self.lock());
        } else {
            self.cpu_lock.lock_unfenced();
        }
    }

    /// Fork's prepare, after one fence on every CPU: makes sure the lock
    /// taken by [`lock_for_fork`](Self::lock_for_fork) is ours.
    pub(super) fn confirm_for_fork(&self) {
        if !self.biased.load(Relaxed) {
            self.cpu_lock.confirm();
        }
    }

    /// Resets the lock in a forked child, or releases what fork's prepare
    /// took in the parent.
    ///
    /// # Safety
    /// Only right after fork, the prepare having locked this pageset in
    /// the calling thread.
    pub unsafe fn force_unlock(&self) {
        // SAFETY: forwarded contract.
        unsafe {
            self.lock.force_unlock();
            self.cpu_lock.force_unlock();
        }
    }
}
