//! fork() in a multi-threaded program, and the allocator's one list of
//! locks.
//!
//! Every lock is taken before fork, in the order of [`LOCKS`], released in
//! the parent and reset in the child, so the child — which has only the
//! forking thread — finds every structure consistent and no lock held by a
//! thread it does not have. Heaps of the threads that did not survive are
//! marked lost (their slabs stay theirs, as glibc's arenas of dead threads
//! do), and the maintenance thread is started again in the child when it
//! is next needed.
//!
//! Other libraries' fork handlers may allocate, or take a lock of their
//! own under which other threads allocate. glibc's own malloc takes its
//! locks inside `fork()` after every prepare handler and releases them
//! before any parent or child handler; ours are ordinary handlers, and
//! glibc runs prepare handlers in the reverse order of registration and
//! parent and child handlers in that order. So ours are registered before
//! anyone else's ([`register_after_ours`], which libpcpalloc.so's
//! `__register_atfork` calls: every object's `pthread_atfork` is a stub
//! calling that exported function), and run last before fork and first
//! after it. Where something registered earlier anyway (an object whose
//! registration no preloaded library sees, the constructors of a Rust
//! program that come before ours), the forking thread's own allocations
//! in its handlers go through the locks it holds for the fork
//! (`sync::hold_for_fork`); another thread's lock taken in such a handler
//! may still deadlock, as it would with any handler order.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{
    AtomicU8, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use crate::heap::block_bins;
use crate::heap_profile;
use crate::meta;
use crate::slab::marks;
use crate::sync;

use super::process::{self, HEAPS, HUGE, PAGES};
use super::{give_back, late, record, tick, tls};

/// One lock (or family of locks) of the allocator.
pub(crate) struct LockClass {
    take: fn(),
    /// Releases what `take` took: `false` in the parent (waking anyone
    /// queued), `true` in the child (resetting).
    release: unsafe fn(bool),
}

/// Every lock of the allocator, outermost first: a thread holding one of
/// them only ever waits for locks further down the list. This is the lock
/// order, written once; fork walks it.
///
/// 1. the tick lock: held for a whole tick, which takes everything below;
/// 2. the exits' measuring gate (`give_back.rs`): an exiting thread takes
///    the pagesets' unmeasured large blocks off their lists to measure
///    them without the pageset lock; fork closes the gate and waits for
///    those under way, so the child finds every block on its list;
/// 3. the large bins' fork gate (`heap/block_bins/`): a remote drain —
///    the tick's, a reclaim's, a trim's — holds one heap's bins and frees
///    into the pagesets and the zone; fork closes the gate and waits for
///    the drains under way (each owner's own side of its bins takes no
///    lock: a thread that does not survive the fork leaves its bins to the
///    child's `drain_lost_block_bins`, which takes them only if they were
///    left whole);
/// 4. the late heap's lock (`late.rs`): a heap is acquired and pages are
///    allocated under it;
/// 5. the heap registry: the abandoned-heap list, then each heap's parked
///    slabs (a leaf while held on the allocation path: only ever tried);
/// 6. the pagesets: the pool's free list, then each pageset (only ever
///    tried on allocation and free paths; busy → straight to the zone);
/// 7. the zone's release gate (`page_alloc/zone/release.rs`): a release
///    (or a shrink) isolates free blocks off the lists, gives them back
///    without the zone lock and takes the lock again to put them back (or
///    offline); fork closes the gate and waits for those under way, so the
///    child finds no block isolated (inside, only the zone lock is taken);
/// 8. the zone lock;
/// 9. the huge-block cache and list (a leaf: nothing is taken under it);
/// 10. the heap profile's table (`heap_profile/table.rs`: its stacks and
///     records are made in the metadata arena under it);
/// 11. the slabs' marks for sampled objects (`slab/marks.rs`: a leaf,
///     taken on the sample path and a sampled object's free);
/// 12. the heap profile's look at the loader's unload count
///     (`heap_profile/cfi.rs`: a leaf, only ever tried on the sample path;
///     held here so no thread is inside `dl_iterate_phdr`, whose lock
///     glibc does not reset in the child, through a sample at the fork);
/// 13. the metadata arena (heaps and pagesets are made under 5 and 6);
/// 14. the trace buffers, one per heap (a leaf each: an event is pushed,
///     and a full buffer written, under it and nothing else).
///
/// Remote frees of small objects take no lock; a huge block is found
/// through the chunk map, without one.
pub(crate) static LOCKS: [LockClass; 14] = [
    LockClass {
        take: || core::mem::forget(tick::TICK_LOCK.lock()),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { release_raw(&tick::TICK_LOCK.lock, child) }
        },
    },
    LockClass {
        take: give_back::close_measure_gate,
        release: give_back::open_measure_gate,
    },
    LockClass {
        take: || block_bins::FORK_GATE.close_for_fork(),
        release: |child| block_bins::FORK_GATE.open_after_fork(child),
    },
    LockClass {
        take: late::lock_for_fork,
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { late::unlock_after_fork(child) }
        },
    },
    LockClass {
        take: || HEAPS.lock_all(),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { HEAPS.unlock_all(child) }
        },
    },
    LockClass {
        take: || PAGES.pagesets.lock_all(),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { PAGES.pagesets.unlock_all(child) }
        },
    },
    LockClass {
        take: || PAGES.zone.close_release_gate(),
        release: |child| PAGES.zone.open_release_gate(child),
    },
    LockClass {
        take: || core::mem::forget(PAGES.zone.lock()),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { release_raw(PAGES.zone.lock_stats(), child) }
        },
    },
    LockClass {
        take: || HUGE.lock_for_fork(),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { HUGE.unlock_after_fork(child) }
        },
    },
    LockClass {
        take: heap_profile::table::lock_for_fork,
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { heap_profile::table::unlock_after_fork(child) }
        },
    },
    LockClass {
        take: || core::mem::forget(marks::MARKS.lock()),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { release_raw(&marks::MARKS.lock, child) }
        },
    },
    LockClass {
        take: heap_profile::cfi::lock_for_fork,
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { heap_profile::cfi::unlock_after_fork(child) }
        },
    },
    LockClass {
        take: meta::lock_for_fork,
        release: |child| {
            // SAFETY: the caller (fork's handlers) took it with `take`.
            unsafe { meta::unlock_after_fork(child) }
        },
    },
    LockClass {
        take: || record::lock_all(&HEAPS),
        release: |child| {
            // SAFETY: the caller (fork's handlers) took them with `take`.
            unsafe { record::unlock_all(&HEAPS, child) }
        },
    },
];

/// Releases (parent) or resets (child) a mutex taken before fork.
///
/// # Safety
/// The calling thread took `lock` before fork.
unsafe fn release_raw(lock: &sync::RawLock, child: bool) {
    // SAFETY: forwarded contract.
    unsafe {
        if child {
            lock.force_unlock();
        } else {
            lock.unlock();
        }
    }
}

extern "C" fn prepare() {
    for l in &LOCKS {
        (l.take)();
    }
    sync::hold_for_fork(true);
}

extern "C" fn parent() {
    sync::hold_for_fork(false);
    for l in LOCKS.iter().rev() {
        // SAFETY: prepare() took every lock of the list in this thread.
        unsafe { (l.release)(false) };
    }
}

extern "C" fn child() {
    sync::hold_for_fork(false);
    for l in LOCKS.iter().rev() {
        // SAFETY: we are the only thread of the child; prepare() took every
        // lock of the list in the parent before the fork.
        unsafe { (l.release)(true) };
    }
    let me = tls::current_heap();
    HEAPS.mark_lost_except(me);
    // SAFETY: heaps live forever.
    if record::tracing() && unsafe { !(*me).is_empty_heap() } {
        // The forking thread has a new thread id in the child.
        // SAFETY: as above.
        record::attach(unsafe { &*me });
    }
    tls::set_alive();
    process::after_fork_child();
    tick::after_fork_child();
    // The registration is the process's (its mm's): the child asks again.
    sync::membarrier_init();
    crate::sys::rseq::after_fork_child();
    // The large bins of the threads that did not come along, when nobody
    // was in them at the fork, go back to the pages.
    // SAFETY: the child's only thread, every lock released above.
    unsafe { HEAPS.drain_lost_block_bins(&PAGES.through(core::ptr::null(), false)) };
}

/// A fork handler as the C library takes it.
pub type Handler = Option<unsafe extern "C" fn()>;
/// glibc's `__register_atfork(prepare, parent, child, dso_handle)`.
type RegisterFn = unsafe extern "C" fn(Handler, Handler, Handler, *mut c_void) -> c_int;

const NOT_REGISTERED: u8 = 0;
const REGISTERING: u8 = 1;
const REGISTERED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(NOT_REGISTERED);

/// The C library's `__register_atfork` — the next definition after the
/// object calling (for libpcpalloc.so, libc's rather than its own) — or
/// none (a C library without it: then `pthread_atfork`). Looked up once;
/// dlvsym and dlsym do not allocate when they find the symbol.
fn libc_register_atfork() -> Option<RegisterFn> {
    const UNKNOWN: usize = 1;
    static FOUND: AtomicUsize = AtomicUsize::new(UNKNOWN);
    let mut f = FOUND.load(Relaxed);
    if f == UNKNOWN {
        #[cfg(target_env = "gnu")]
        // SAFETY: looking up a symbol by NUL-terminated names.
        let p = unsafe {
            let p = libc::dlvsym(
                libc::RTLD_NEXT,
                c"__register_atfork".as_ptr(),
                c"GLIBC_2.3.2".as_ptr(),
            );
            if p.is_null() {
                libc::dlsym(libc::RTLD_NEXT, c"__register_atfork".as_ptr())
            } else {
                p
            }
        };
        #[cfg(not(target_env = "gnu"))]
        let p = core::ptr::null_mut::<c_void>();
        f = p as usize;
        FOUND.store(f, Relaxed);
    }
    // SAFETY: a non-null result is glibc's __register_atfork, whose type
    // this is.
    (f != 0).then(|| unsafe { core::mem::transmute::<usize, RegisterFn>(f) })
}

/// Registers the handlers, once: from the library's constructor (see
/// `hooks.rs`), or before the first registration of anyone else's
/// ([`register_after_ours`]), whichever comes first.
pub(crate) fn register() {
    match STATE.compare_exchange(NOT_REGISTERED, REGISTERING, Acquire, Acquire) {
        Ok(_) => {}
        Err(REGISTERED) => return,
        // Another thread is registering them: theirs must not go first.
        Err(_) => return sync::spin_until(|| STATE.load(Acquire) == REGISTERED),
    }
    // SAFETY: the handlers are C-ABI functions that never unwind. A null
    // DSO handle is never unregistered: the library is never unloaded.
    unsafe {
        match libc_register_atfork() {
            Some(reg) => reg(
                Some(prepare),
                Some(parent),
                Some(child),
                core::ptr::null_mut(),
            ),
            None => libc::pthread_atfork(Some(prepare), Some(parent), Some(child)),
        };
    }
    STATE.store(REGISTERED, Release);
}

/// libpcpalloc.so's `__register_atfork`, which every object's
/// `pthread_atfork` calls: registers ours first if nobody did yet, then
/// the caller's handlers with the C library.
///
/// # Safety
/// As `__register_atfork`: the handlers are callable until `dso_handle`'s
/// object is unloaded.
pub unsafe fn register_after_ours(
    prepare: Handler,
    parent: Handler,
    child: Handler,
    dso_handle: *mut c_void,
) -> c_int {
    register();
    match libc_register_atfork() {
        // SAFETY: forwarded contract.
        Some(reg) => unsafe { reg(prepare, parent, child, dso_handle) },
        None => libc::ENOSYS,
    }
}
