//! Locks that never allocate: a futex mutex that measures its own
//! contention (the zone lock), a try-only lock (pagesets), and a guarded
//! cell built on the mutex.
//!
//! The order in which the allocator's locks nest is written once, as the
//! list `runtime::fork::LOCKS` that fork walks.
//!
//! While a thread holds every one of them for a fork, its own allocations
//! (another library's fork handler that runs between ours) go through
//! them: see [`hold_for_fork`].

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::sys;

pub(crate) mod cpu_lock;
mod fork_pass;

pub(crate) use fork_pass::hold_for_fork;
use fork_pass::{pass_for_fork, passing_for_fork, this_thread, unpass_for_fork};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const LOCKED_WAITERS: u32 = 2;
/// Spins between looks at the clock (and, in [`spin_until`], before
/// yielding): about a microsecond.
const SPIN_LIMIT: u32 = 64;
/// How long a contended [`RawLock`] spins before sleeping on the futex:
/// a few microseconds, as long as a zone-lock hold of a batch takes while
/// its holder runs, and far below a time slice, so a holder preempted
/// (more threads than CPUs) costs a waiter no more than that. Sleeping
/// sooner costs a futex wait and wake, and a context switch each way:
/// pingpong's consumers, freeing to the zone while its producers refill
/// from it, spent 0.2-0.3 s in the kernel that way (1.07 s against 0.99 s
/// with this spin).
const SPIN_NS: u64 = 4_000;
/// Rounds of SPIN_LIMIT pauses a contended lock spins at most, whatever
/// the clock says.
const SPIN_ROUNDS_MAX: u32 = 64;

/// A futex-based mutex (Drepper's three-state design) that counts how often
/// it was taken, how often it was contended, and how long waiters waited.
/// Those three are the "zone lock contention" figures of the seeds.
pub struct RawLock {
    state: AtomicU32,
    /// Times the lock was taken. Written only by the holder.
    pub acquisitions: AtomicU64,
    /// Times a taker found it held. Written only by the holder.
    pub contended: AtomicU64,
    /// Nanoseconds takers spent waiting. Written only by the holder.
    pub wait_ns: AtomicU64,
}

impl RawLock {
    /// An unlocked lock with zero counters.
    pub const fn new() -> RawLock {
        RawLock {
            state: AtomicU32::new(UNLOCKED),
            acquisitions: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
        }
    }

    /// Takes the lock, waiting as long as needed.
    #[inline]
    pub fn lock(&self) {
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        bump(&self.acquisitions, 1);
    }

    /// Takes the lock if it is free right now.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let ok = self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if ok {
            bump(&self.acquisitions, 1);
        }
        ok
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        if pass_for_fork(self.addr()) {
            return;
        }
        let start = sys::now_ns();
        // Spin briefly while the holder is likely still running; then
        // sleep. From there on the lock is only ever taken in the
        // "waiters" state, so whoever releases it wakes the next sleeper
        // (taking it as plain LOCKED there could strand one).
        let spun = spin_briefly_from(start, || {
            self.state.load(Ordering::Relaxed) == UNLOCKED
                && self
                    .state
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        });
        if !spun {
            while self.state.swap(LOCKED_WAITERS, Ordering::Acquire) != UNLOCKED {
                futex_wait(&self.state, LOCKED_WAITERS);
            }
        }
        let waited = sys::now_ns().saturating_sub(start);
        bump(&self.contended, 1);
        bump(&self.wait_ns, waited);
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The caller holds it.
    #[inline]
    pub unsafe fn unlock(&self) {
        if passing_for_fork() && unpass_for_fork(self.addr()) {
            return;
        }
        if self.state.swap(UNLOCKED, Ordering::Release) == LOCKED_WAITERS {
            futex_wake(&self.state);
        }
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Whether someone holds the lock right now (for assertions).
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Resets the lock to unlocked in a forked child, whose only thread may
    /// have inherited it held by a thread that no longer exists.
    ///
    /// # Safety
    /// Only in the child after fork, before any other use.
    pub unsafe fn force_unlock(&self) {
        self.state.store(UNLOCKED, Ordering::Relaxed);
    }
}

impl Default for RawLock {
    fn default() -> Self {
        Self::new()
    }
}

/// Adds to a counter that only one thread at a time writes (the lock
/// holder), without a read-modify-write atomic.
#[inline]
pub(crate) fn bump(c: &AtomicU64, by: u64) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: word is a valid aligned u32; FUTEX_WAIT returns at once if it
    // no longer holds `expected`. A null timeout waits indefinitely. errno
    // is put back: `free` must not change it.
    unsafe {
        let saved = *libc::__errno_location();
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        );
        *libc::__errno_location() = saved;
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: word is a valid aligned u32; waking has no other effect.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// Spins, then yields, until `done` says so.
pub(crate) fn spin_until(mut done: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins += 1;
        if spins < SPIN_LIMIT {
            core::hint::spin_loop();
        } else {
            sys::yield_now();
        }
    }
}

/// Spins while `done` says no, for about [`SPIN_NS`] at most: true once it
/// said yes. For maintenance that can do without what it waits for (an
/// exiting thread's measurement, a drain before the zone grows): a
/// holder that stays longer was preempted in its hold — more threads
/// than CPUs — and yielding to it until it runs again (`spin_until`) cost
/// a thread storm 10-12 k `sched_yield`s, each a context switch, on the
/// path of its threads' exits.
pub(crate) fn spin_briefly(done: impl FnMut() -> bool) -> bool {
    spin_briefly_from(sys::now_ns(), done)
}

/// [`spin_briefly`] from `start` (a `sys::now_ns` reading): up to
/// [`SPIN_NS`] after it, and at most [`SPIN_ROUNDS_MAX`] rounds should the
/// clock not move.
fn spin_briefly_from(start: u64, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..SPIN_ROUNDS_MAX {
        for _ in 0..SPIN_LIMIT {
            if done() {
                return true;
            }
            core::hint::spin_loop();
        }
        if sys::now_ns().saturating_sub(start) >= SPIN_NS {
            break;
        }
    }
    done()
}

/// A lock that the fast paths only ever try (the pageset lock). Waiting
/// for it, which only maintenance, drain-all and fork do, spins and yields.
pub(crate) struct TryLock {
    held: AtomicBool,
}

impl TryLock {
    /// An unlocked lock.
    pub(crate) const fn new() -> TryLock {
        TryLock {
            held: AtomicBool::new(false),
        }
    }

    /// Takes the lock if it is free right now.
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        !self.held.load(Ordering::Relaxed)
            && self
                .held
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Takes the lock, spinning and yielding until it is free.
    pub(crate) fn lock(&self) {
        if self.try_lock() || pass_for_fork(self.addr()) {
            return;
        }
        spin_until(|| self.try_lock());
    }

    /// Releases the lock.
    ///
    /// # Safety
    /// The caller holds it.
    #[inline]
    pub(crate) unsafe fn unlock(&self) {
        if passing_for_fork() && unpass_for_fork(self.addr()) {
            return;
        }
        self.held.store(false, Ordering::Release);
    }

    fn addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Resets to unlocked in a forked child.
    ///
    /// # Safety
    /// Only in the child after fork, before any other use.
    pub(crate) unsafe fn force_unlock(&self) {
        self.held.store(false, Ordering::Relaxed);
    }
}

impl Default for TryLock {
    fn default() -> Self {
        Self::new()
    }
}

/// A lock biased towards one owner thread (the pageset of a thread, in
/// `PCPALLOC_PCP=thread` mode): the owner enters and leaves with plain
/// stores, no atomic read-modify-write; anyone else (the maintenance tick,
/// drain-all, stats, fork) takes the inner lock, raises a flag and forces a
/// memory barrier on every thread with `membarrier(2)` before waiting for
/// the owner to step out. This is the asymmetric Dekker handshake used by
/// userspace RCU: the rare side pays for both.
///
/// If the kernel lacks MEMBARRIER_CMD_PRIVATE_EXPEDITED, the owner simply
/// takes the inner lock as everyone else does.
pub(crate) struct BiasedLock {
    lock: TryLock,
    owner_in: AtomicBool,
    remote_wants: AtomicBool,
}

/// How the owner entered a [`BiasedLock`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// With plain stores (the biased fast path).
    Biased,
    /// Through the inner lock.
    Locked,
}

static MEMBARRIER_OK: AtomicBool = AtomicBool::new(false);
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Registers the process for expedited membarrier (once at init, and again
/// in a forked child). Biased locking is used only if this succeeds.
pub(crate) fn membarrier_init() {
    // Failure just leaves biased locking off.
    let ok = sys::membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0);
    MEMBARRIER_OK.store(ok, Ordering::Relaxed);
}

fn membarrier() -> bool {
    sys::membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)
}

impl BiasedLock {
    /// An unlocked lock.
    pub(crate) const fn new() -> BiasedLock {
        BiasedLock {
            lock: TryLock::new(),
            owner_in: AtomicBool::new(false),
            remote_wants: AtomicBool::new(false),
        }
    }

    /// The owner enters. Never fails; usually only plain stores.
    #[inline]
    pub(crate) fn owner_enter(&self) -> Entry {
        if self.owner_try_enter_biased() {
            return Entry::Biased;
        }
        self.owner_lock()
    }

    /// The owner enters only if it may with plain stores (membarrier
    /// works and no remote wants in): the fast paths' way, which leave the
    /// rest to a slow path that calls [`owner_enter`](Self::owner_enter).
    /// Leave with [`owner_exit_biased`](Self::owner_exit_biased).
    #[inline(always)]
    pub(crate) fn owner_try_enter_biased(&self) -> bool {
        if MEMBARRIER_OK.load(Ordering::Relaxed) {
            self.owner_in.store(true, Ordering::Relaxed);
            core::sync::atomic::compiler_fence(Ordering::SeqCst);
            // Acquire: see everything a remote did before it left.
            if !self.remote_wants.load(Ordering::Acquire) {
                return true;
            }
            self.owner_in.store(false, Ordering::Release);
        }
        false
    }

    /// The owner leaves after [`owner_try_enter_biased`] said yes.
    ///
    /// # Safety
    /// Paired with an `owner_try_enter_biased` that returned true.
    ///
    /// [`owner_try_enter_biased`]: Self::owner_try_enter_biased
    #[inline(always)]
    pub(crate) unsafe fn owner_exit_biased(&self) {
        self.owner_in.store(false, Ordering::Release);
    }

    /// The owner's way in when it is not alone (a remote holds or wants
    /// the lock) or membarrier is off: the plain lock, kept out of line so
    /// its spinning does not weigh on the callers' fast paths.
    #[cold]
    #[inline(never)]
    fn owner_lock(&self) -> Entry {
        self.lock.lock();
        Entry::Locked
    }

    /// The owner leaves.
    ///
    /// # Safety
    /// Paired with the `owner_enter` that returned `e`.
    #[inline]
    pub(crate) unsafe fn owner_exit(&self, e: Entry) {
        match e {
            Entry::Biased => self.owner_in.store(false, Ordering::Release),
            // SAFETY: owner_enter took the lock.
            Entry::Locked => unsafe { self.lock.unlock() },
        }
    }

    /// Anyone but the owner: waits until it has the lock to itself.
    pub(crate) fn remote_lock(&self, biased: bool) {
        self.lock.lock();
        if biased && MEMBARRIER_OK.load(Ordering::Relaxed) {
            self.remote_wants.store(true, Ordering::Relaxed);
            if !membarrier() {
                core::sync::atomic::fence(Ordering::SeqCst);
            }
            spin_until(|| !self.owner_in.load(Ordering::Acquire));
        }
    }

    /// Anyone but the owner, for work that may be skipped: as
    /// [`remote_lock`](Self::remote_lock) with biasing, but gives up
    /// (false, nothing held) when the membarrier call fails — a fence on
    /// this side alone would not keep out an owner whose store is still
    /// in its store buffer.
    pub(crate) fn try_remote_lock(&self) -> bool {
        self.lock.lock();
        if MEMBARRIER_OK.load(Ordering::Relaxed) {
            self.remote_wants.store(true, Ordering::Relaxed);
            if !membarrier() {
                self.remote_wants.store(false, Ordering::Relaxed);
                // SAFETY: taken above.
                unsafe { self.lock.unlock() };
                return false;
            }
            spin_until(|| !self.owner_in.load(Ordering::Acquire));
        }
        true
    }

    /// Whether nobody is in: neither the owner nor a holder of the lock.
    /// Meaningful only where no other thread can enter meanwhile (a forked
    /// child, for the heaps of threads that did not survive).
    pub(crate) fn is_free(&self) -> bool {
        !self.owner_in.load(Ordering::Relaxed) && !self.lock.held.load(Ordering::Relaxed)
    }

    /// Tries the shared way in (per-CPU pagesets are never biased).
    #[inline]
    pub(crate) fn try_lock(&self) -> bool {
        self.lock.try_lock()
    }

    /// Releases what `remote_lock` (or `try_lock`) took.
    ///
    /// # Safety
    /// The caller holds it through `remote_lock` or `try_lock`.
    pub(crate) unsafe fn remote_unlock(&self) {
        // Gone through for a fork (see `hold_for_fork`): the fork's own
        // hold stays, `remote_wants` with it.
        if passing_for_fork() && unpass_for_fork(self.lock.addr()) {
            return;
        }
        self.remote_wants.store(false, Ordering::Release);
        // SAFETY: held (contract).
        unsafe { self.lock.unlock() }
    }

    /// Resets everything in a forked child.
    ///
    /// # Safety
    /// Only in the child after fork.
    pub(crate) unsafe fn force_unlock(&self) {
        self.owner_in.store(false, Ordering::Relaxed);
        self.remote_wants.store(false, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { self.lock.force_unlock() }
    }
}

impl Default for BiasedLock {
    fn default() -> Self {
        Self::new()
    }
}

/// Data guarded by a [`RawLock`]; the guard is the only way in, so a
/// function taking `&mut T` is known to run under the lock.
pub(crate) struct Locked<T> {
    /// The lock (public for its counters and for fork handling).
    pub lock: RawLock,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialised by `lock`.
unsafe impl<T: Send> Sync for Locked<T> {}
// SAFETY: moving the cell moves the data, which is Send.
unsafe impl<T: Send> Send for Locked<T> {}

impl<T> Locked<T> {
    /// Wraps `data` with an unlocked lock.
    pub(crate) const fn new(data: T) -> Locked<T> {
        Locked {
            lock: RawLock::new(),
            data: UnsafeCell::new(data),
        }
    }

    /// Takes the lock.
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        self.lock.lock();
        Guard { owner: self }
    }

    /// Takes the lock if it is free right now.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        // A guard exists only once the lock is taken: dropping one
        // unlocks (so not `then_some`, which would make and drop it).
        if self.lock.try_lock() {
            Some(Guard { owner: self })
        } else {
            None
        }
    }
}

/// Proof that the lock of a [`Locked`] is held.
pub struct Guard<'a, T> {
    owner: &'a Locked<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held.
        unsafe { &*self.owner.data.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while the lock is held, and it is
        // borrowed mutably, so this is the only reference.
        unsafe { &mut *self.owner.data.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard holds the lock.
        unsafe { self.owner.lock.unlock() }
    }
}

/// A gate fork closes on work that must not be cut in half by it: work
/// that holds something fork cannot take as a lock (blocks isolated off
/// the free lists, a remote side of a bins' lock) enters the gate, and
/// fork's handlers close it and wait for the work inside to finish. Work
/// that finds the gate closed is skipped: it is never needed for
/// correctness, only to give memory back or move it along.
///
/// Inside the gate a thread may take only locks that come after the
/// gate's place in `runtime::fork::LOCKS`.
pub(crate) struct ForkGate {
    /// Threads inside, and [`ForkGate::CLOSED`] while a fork waits for
    /// them or runs.
    word: core::sync::atomic::AtomicUsize,
}

impl ForkGate {
    const CLOSED: usize = 1 << (usize::BITS - 1);

    pub(crate) const fn new() -> ForkGate {
        ForkGate {
            word: core::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Enters, unless a fork closed the gate: then `None`. The guard
    /// leaves when dropped.
    #[inline]
    pub(crate) fn enter(&self) -> Option<ForkGateGuard<'_>> {
        if self.word.fetch_add(1, Ordering::Acquire) & Self::CLOSED != 0 {
            self.word.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(ForkGateGuard { gate: self })
    }

    /// Whether no thread is inside (racy: a hint).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.word.load(Ordering::Relaxed) == 0
    }

    /// Before fork: closes the gate and waits for the threads inside.
    pub(crate) fn close_for_fork(&self) {
        self.word.fetch_or(Self::CLOSED, Ordering::AcqRel);
        spin_until(|| self.word.load(Ordering::Acquire) & !Self::CLOSED == 0);
    }

    /// After fork: opens the gate again (in the child, where nobody is
    /// inside, with no count left).
    pub(crate) fn open_after_fork(&self, child: bool) {
        if child {
            self.word.store(0, Ordering::Release);
        } else {
            self.word.fetch_and(!Self::CLOSED, Ordering::Release);
        }
    }
}

impl Default for ForkGate {
    fn default() -> Self {
        Self::new()
    }
}

/// A thread inside a [`ForkGate`]; leaves when dropped.
pub(crate) struct ForkGateGuard<'a> {
    gate: &'a ForkGate,
}

impl Drop for ForkGateGuard<'_> {
    fn drop(&mut self) {
        self.gate.word.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutex_counts_contention() {
        static L: Locked<u64> = Locked::new(0);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..20_000 {
                        *L.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*L.lock(), 80_000);
        assert_eq!(L.lock.acquisitions.load(Ordering::Relaxed), 80_001);
    }

    #[test]
    fn trylock_excludes() {
        let l = TryLock::new();
        assert!(l.try_lock());
        assert!(!l.try_lock());
        // SAFETY: held just above.
        unsafe { l.unlock() };
        assert!(l.try_lock());
    }
}
