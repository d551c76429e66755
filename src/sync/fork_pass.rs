//! The forking thread's way through the locks it holds for a fork (see
//! [`hold_for_fork`]): a leaf the locks of `sync/` ask when they would
//! wait, or unlock.

use core::sync::atomic::{AtomicUsize, Ordering};

// The forking thread's way through the locks it holds for the fork.
//
// From the end of the allocator's prepare handler to the start of its
// parent or child handler, one thread holds every lock of
// `runtime::fork::LOCKS` and every other thread that wants one waits. Fork
// handlers registered before ours run in that window (glibc runs prepare
// handlers in the reverse order of registration, parent and child
// handlers in that order); if one of them allocates, the forking thread
// would wait for itself. So while it holds them it goes through: a lock it
// finds taken — one it holds for the fork, since in that window nobody
// else holds one (the large bins' locks, the only others, are only taken
// remotely through a fork gate, closed and drained by then) — is entered
// without being taken, and the matching unlock leaves it held. The work
// done inside is alone, as under the lock; the child, whose handler resets
// the locks after that work, finds it complete.
//
// The check costs nothing where a lock is free: a thread looks only when
// it would wait, and an unlock looks only while the forking thread is
// inside such a lock (one load of a word that is zero otherwise).

/// The thread (its `pthread_self`) that holds every lock for a fork; 0
/// when none does.
static FORK_HOLDER: AtomicUsize = AtomicUsize::new(0);
/// How deep the fork holder's pass-throughs nest at most (locks nest at
/// most as deep as the lock list is long).
const PASSED_MAX: usize = 32;
/// The locks the fork holder is inside without having taken them, in the
/// order it entered them; only the holder writes them.
static PASSED: [AtomicUsize; PASSED_MAX] = [const { AtomicUsize::new(0) }; PASSED_MAX];
static PASSED_LEN: AtomicUsize = AtomicUsize::new(0);

pub(super) fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions and never fails.
    unsafe { libc::pthread_self() as usize }
}

/// The allocator's fork handlers: `true` at the end of prepare (every lock
/// of the list taken by the calling thread), `false` at the start of parent
/// and child (before they are released or reset).
pub(crate) fn hold_for_fork(on: bool) {
    PASSED_LEN.store(0, Ordering::Relaxed);
    FORK_HOLDER.store(if on { this_thread() } else { 0 }, Ordering::Relaxed);
}

/// Whether the thread that holds the locks for a fork is inside one of
/// them (then an unlock must look whether it is that one).
#[inline(always)]
pub(super) fn passing_for_fork() -> bool {
    PASSED_LEN.load(Ordering::Relaxed) != 0
}

/// A lock at `addr` is taken, and the caller would wait: true (and the
/// caller goes in without taking it) if the caller is the thread that
/// holds every lock for a fork.
#[cold]
#[inline(never)]
pub(super) fn pass_for_fork(addr: usize) -> bool {
    let holder = FORK_HOLDER.load(Ordering::Relaxed);
    if holder == 0 || holder != this_thread() {
        return false;
    }
    let n = PASSED_LEN.load(Ordering::Relaxed);
    if n == PASSED_MAX {
        crate::alert::fatal(
            "fork: too many locks gone through for the fork, at",
            addr as *const u8,
        );
    }
    PASSED[n].store(addr, Ordering::Relaxed);
    PASSED_LEN.store(n + 1, Ordering::Relaxed);
    true
}

/// Before the lock at `addr` is released: true (and it stays held) if the
/// calling thread went through it for a fork.
#[cold]
#[inline(never)]
pub(super) fn unpass_for_fork(addr: usize) -> bool {
    if FORK_HOLDER.load(Ordering::Relaxed) != this_thread() {
        return false;
    }
    let n = PASSED_LEN.load(Ordering::Relaxed);
    let Some(i) = (0..n)
        .rev()
        .find(|&i| PASSED[i].load(Ordering::Relaxed) == addr)
    else {
        return false;
    };
    for j in i..n - 1 {
        PASSED[j].store(PASSED[j + 1].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    PASSED_LEN.store(n - 1, Ordering::Relaxed);
    true
}
