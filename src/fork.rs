//! fork() in a multi-threaded program: every lock is taken before fork,
//! released in the parent and reset in the child, so the child — which has
//! only the forking thread — finds every structure consistent. Heaps of
//! the threads that did not survive are marked lost (their slabs stay
//! theirs, as glibc's arenas of dead threads do), and the maintenance
//! thread is started again in the child when it is next needed.
//!
//! Locks are taken in the crate's lock order (see `sync`): abandoned heaps,
//! pagesets, zone, huge registry, metadata.

use crate::large;
use crate::maint;
use crate::meta;
use crate::pcp::pool;
use crate::slab::heap;
use crate::state::{self, ZONE};

extern "C" fn prepare() {
    heap::before_fork();
    pool::before_fork();
    core::mem::forget(ZONE.lock());
    large::before_fork();
    meta::before_fork();
}

extern "C" fn parent() {
    // SAFETY: prepare() took every one of these locks in this thread.
    unsafe {
        meta::after_fork_parent();
        large::after_fork(false);
        ZONE.lock_stats().unlock();
        pool::after_fork(false);
        heap::after_fork(false);
    }
}

extern "C" fn child() {
    // SAFETY: we are the only thread of the child; prepare() took these
    // locks in the parent before the fork.
    unsafe {
        meta::after_fork_child();
        large::after_fork(true);
        ZONE.lock_stats().force_unlock();
        pool::after_fork(true);
        heap::after_fork(true);
    }
    state::after_fork_child();
    maint::after_fork_child();
}

/// Registers the handlers (once, after initialisation).
pub fn register() {
    // SAFETY: the handlers are C-ABI functions that never unwind.
    unsafe {
        libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
    }
}
