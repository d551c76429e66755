//! What the allocator registers with the C library, and when: the fork
//! handlers, the thread-exit key, and the work at the process's exit.
//!
//! None of it may happen inside `malloc`: glibc calls `malloc` with its
//! own locks held — `pthread_atfork` grows its handler list under the
//! atfork lock, `atexit` its list under the exit-functions lock — so a
//! first `malloc` that registered a handler there would wait forever on a
//! lock its own caller holds. So the registrations run from the library's
//! constructor (an `.init_array` entry: before `main` for a program that
//! links or preloads us, at `dlopen` otherwise), which calls nothing
//! under a lock of glibc's; and the work at exit is a destructor
//! (`.fini_array`), which needs no registration at all and runs after the
//! program's own `atexit` handlers. The thread-exit key is made there too,
//! so it is one of the first keys and `pthread_setspecific` on it never
//! has to allocate; if `malloc` comes first (another library's
//! constructor), the key is made then (see `thread.rs`).

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use super::{fork, process, record, sampled, thread};

static REGISTERED: AtomicBool = AtomicBool::new(false);

/// The library's constructor.
extern "C" fn constructor() {
    register();
    if process::is_ready() {
        sampled::prepare();
    }
}

/// The library's destructor: the report, the trace and the heap profile
/// at exit.
extern "C" fn destructor() {
    if process::is_ready() {
        if record::tracing() {
            record::flush_all(&super::process::HEAPS);
        }
        sampled::at_exit();
        thread::report_at_exit();
    }
}

/// Registers the fork handlers and makes the thread-exit key, once.
pub(crate) fn register() {
    if REGISTERED.swap(true, Relaxed) {
        return;
    }
    fork::register();
    thread::make_key();
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[used]
#[link_section = ".fini_array"]
static DESTRUCTOR: extern "C" fn() = destructor;

/// Keeps the two entries linked: referenced from the first allocation's
/// slow path, the object file holding them is always part of the program
/// (an archive member nothing refers to would be left out by the linker).
#[inline(never)]
pub(crate) fn keep_linked() {
    // SAFETY: reading our own statics.
    unsafe {
        core::ptr::read_volatile(&CONSTRUCTOR);
        core::ptr::read_volatile(&DESTRUCTOR);
    }
}
