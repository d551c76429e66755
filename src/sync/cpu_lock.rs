//! The lock of a per-CPU pageset: one word that the pageset's own CPU may
//! take with a restartable sequence (`sys/rseq.rs`: look, then one plain
//! store of `LOCAL`) and anyone else takes with a compare-and-swap.
//!
//! The two meet as follows. A taker from elsewhere swaps 0 for its own
//! thread's value; a local section that looked at the word before the swap
//! may still commit after it, overwriting it. So, when the pageset can be
//! entered locally ([`CpuLock::set_fence`]), the taker then forces
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)` on the CPU of that
//! index: every section in flight there is aborted (it restarts and finds
//! the word taken), and a commit that already happened is visible when the
//! call returns. The taker looks again: its own value still there, the
//! lock is its alone; anything else, a local commit won, and the taker
//! holds nothing (the local holder will store 0). Each taker's value is
//! its own (`pthread_self`), so two takers from elsewhere can never both
//! find "theirs" after a local holder came and went between them.
//!
//! Without rseq (`sys::rseq::live` false, or a pageset no section can
//! reach) it is a plain try-lock, as before.

use core::sync::atomic::{AtomicUsize, Ordering};

use super::{
    pass_for_fork, passing_for_fork, spin_briefly, spin_until, this_thread, unpass_for_fork,
};
use crate::sys::rseq;

/// No fence needed: no critical section reaches this lock.
const NO_FENCE: usize = usize::MAX;
/// The value of a plain try-lock's hold (neither `rseq::LOCAL` nor a
/// `pthread_self`, which is an aligned address).
const PLAIN: usize = 2;

/// See the module docs. The word comes first (a pageset's first word).
#[repr(C)]
pub(crate) struct CpuLock {
    word: AtomicUsize,
    /// The index (CPU number or mm_cid) whose sections take this word, or
    /// NO_FENCE.
    fence: AtomicUsize,
}

impl CpuLock {
    /// An unlocked lock that no critical section reaches.
    pub(crate) const fn new() -> CpuLock {
        CpuLock {
            word: AtomicUsize::new(0),
            fence: AtomicUsize::new(NO_FENCE),
        }
    }

    /// The word, for the critical section (`sys::rseq::lock_local`).
    #[inline(always)]
    pub(crate) fn word(&self) -> &AtomicUsize {
        &self.word
    }

    /// Says that critical sections of index `index` take this lock (once,
    /// before any does).
    pub(crate) fn set_fence(&self, index: usize) {
        self.fence.store(index, Ordering::Relaxed);
    }

    /// Takes the lock if it is free right now (from anywhere).
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        if self.word.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let index = self.fence.load(Ordering::Relaxed);
        if index == NO_FENCE || !rseq::live() {
            return self
                .word
                .compare_exchange(0, PLAIN, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
        }
        self.try_lock_fenced(index)
    }

    /// [`try_lock`](Self::try_lock) where critical sections take the lock
    /// too: the swap, then the fence and the second look (module docs).
    #[cold]
    #[inline(never)]
    fn try_lock_fenced(&self, index: usize) -> bool {
        let me = this_thread();
        if self
            .word
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if !rseq::fence(index) {
            // No way to know whether a section committed over us: give
            // the word back if it is still ours.
            let _ = self
                .word
                .compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
            return false;
        }
        self.word.load(Ordering::Acquire) == me
    }

    /// Takes the lock, spinning and yielding until it is free.
    pub(crate) fn lock(&self) {
        if self.try_lock() || pass_for_fork(self.addr()) {
            return;
        }
        spin_until(|| self.try_lock());
    }

    /// Takes the lock if it comes free within a few microseconds
    /// (`super::spin_briefly`); false if not.
    pub(crate) fn lock_briefly(&self) -> bool {
        self.try_lock() || pass_for_fork(self.addr()) || spin_briefly(|| self.try_lock())
    }

    /// Swaps the word for this thread's value, spinning until it is free,
    /// without the fence: [`confirm`](Self::confirm) after one
    /// `sys::rseq::fence_all` for many locks (fork's prepare).
    pub(crate) fn lock_unfenced(&self) {
        let me = this_thread();
        spin_until(|| {
            self.word
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
    }

    /// After [`lock_unfenced`](Self::lock_unfenced) and a fence on every
    /// CPU: makes sure the lock is ours (a local commit that raced the
    /// swap is waited for, and the lock taken again).
    pub(crate) fn confirm(&self) {
        if self.word.load(Ordering::Acquire) != this_thread() {
            self.lock();
        }
    }

    /// Releases the lock, taken by [`try_lock`](Self::try_lock),
    /// [`lock`](Self::lock) or a local critical section.
    ///
    /// # Safety
    /// The caller holds it.
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        if passing_for_fork() && unpass_for_fork(self.addr()) {
            return;
        }
        self.word.store(0, Ordering::Release);
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Resets to unlocked after fork (in the child; in the parent, what
    /// its prepare took).
    ///
    /// # Safety
    /// Only right after fork, before any other use.
    pub(crate) unsafe fn force_unlock(&self) {
        self.word.store(0, Ordering::Release);
    }
}

impl Default for CpuLock {
    fn default() -> Self {
        Self::new()
    }
}
