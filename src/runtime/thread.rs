//! The thread side of the runtime: a thread's first allocation gives it a
//! heap (adopted or new) and registers the exit hook that hands the heap
//! back; the first thread also registers the fork handlers and the report
//! at exit.

use core::sync::atomic::{AtomicI32, AtomicU8, Ordering::*};

use crate::pages::Pages;
use crate::slab::{self, Heap};
use crate::tunables::SETTINGS;

use super::files::{self, PidIn};
use super::process::{self, HEAPS, PAGES};
use super::{fork, record, report, tls};

const KEY_NONE: u8 = 0;
const KEY_MAKING: u8 = 1;
const KEY_READY: u8 = 2;
static KEY_STATE: AtomicU8 = AtomicU8::new(KEY_NONE);
static POST_INIT: AtomicU8 = AtomicU8::new(0);
/// Where the exit report goes (a private copy of stderr).
static STATS_FD: AtomicI32 = AtomicI32::new(2);

/// The calling thread's heap, set up on its first call. Null if the
/// allocator could not initialise or metadata memory ran out.
#[inline]
pub fn thread_heap() -> *mut Heap {
    let h = tls::heap();
    // SAFETY: tls::heap is this thread's heap or the static empty heap.
    if unsafe { !(*h).is_empty_heap() } {
        return h;
    }
    attach_thread()
}

/// A thread's first allocation: adopt or make a heap, give it a pageset in
/// thread mode, and register the exit hook for it. While tracing, the TLS
/// pointer is left to the empty heap (see `record.rs`), so every later
/// slow path comes here for the heap kept under the pthread key.
#[cold]
#[inline(never)]
fn attach_thread() -> *mut Heap {
    if !process::ensure_init() {
        return core::ptr::null_mut();
    }
    if record::tracing() {
        let h = tls::keyed_heap();
        if !h.is_null() {
            return h;
        }
    }
    let h = HEAPS.acquire();
    if h.is_null() {
        return h;
    }
    if process::thread_mode() {
        // SAFETY: h was just handed to this thread.
        let mut o = unsafe { (*h).owned() };
        if o.local().pageset.is_null() {
            o.local().pageset = PAGES.pagesets.acquire_thread_pageset();
        }
    }
    let key = thread_key();
    if key != u32::MAX {
        // SAFETY: key was created by pthread_key_create.
        unsafe { libc::pthread_setspecific(key, h.cast()) };
    }
    // SAFETY: heaps live forever.
    let traced = key != u32::MAX && record::tracing() && record::attach(unsafe { &*h });
    if !traced {
        // Without a key (or a buffer) this thread is not traced: its
        // events go through the fast paths unrecorded.
        tls::set_heap(h);
    }
    process::note_thread();
    if POST_INIT.load(Relaxed) == 0 && POST_INIT.compare_exchange(0, 1, AcqRel, Relaxed).is_ok() {
        post_init();
    }
    h
}

/// The pthread key whose destructor is the exit hook, made on the first
/// attach (`u32::MAX` if the system has none to give).
fn thread_key() -> u32 {
    loop {
        match KEY_STATE.compare_exchange(KEY_NONE, KEY_MAKING, Acquire, Acquire) {
            Ok(_) => {
                let mut key: libc::pthread_key_t = 0;
                // SAFETY: key is a valid out-parameter; the destructor is a
                // C-ABI fn that never unwinds.
                if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit_hook)) } == 0 {
                    tls::THREAD_KEY.store(key, Relaxed);
                }
                KEY_STATE.store(KEY_READY, Release);
            }
            Err(KEY_READY) => return tls::THREAD_KEY.load(Relaxed),
            Err(_) => crate::sys::yield_now(),
        }
    }
}

/// What may allocate (pthread_atfork, atexit), so it waits until the first
/// thread has a heap.
fn post_init() {
    fork::register();
    if record::tracing() {
        // SAFETY: atexit with a C-ABI fn that never unwinds.
        unsafe { libc::atexit(flush_trace) };
    }
    if SETTINGS.stats_at_exit.load(Relaxed) {
        // Keep a private copy of stderr: programs often close fd 2 in their
        // own exit handlers (gnulib's close_stdout does), which run before
        // ours.
        // SAFETY: fcntl on fd 2 and atexit with a C-ABI fn that never
        // unwinds.
        unsafe {
            let fd = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100);
            STATS_FD.store(if fd >= 0 { fd } else { 2 }, Relaxed);
            libc::atexit(stats_at_exit);
        }
    }
}

/// The page allocator as heap `h`'s thread sees it (its pageset in thread
/// mode, its CPU's otherwise).
///
/// # Safety
/// The calling thread owns `h`.
#[inline]
pub unsafe fn pages_of(h: &Heap) -> Pages<'static> {
    // SAFETY: forwarded contract.
    let ps = unsafe { h.pageset() };
    PAGES.through(ps, !ps.is_null())
}

/// The thread-exit hook (a pthread key destructor): the heap gives back
/// what it can and waits on the abandoned list for the next thread. Never
/// allocates.
extern "C" fn thread_exit_hook(h: *mut libc::c_void) {
    let h = h.cast::<Heap>();
    // SAFETY: the key's value is the exiting thread's heap, which it still
    // owns; heaps live forever.
    unsafe {
        if h.is_null() || (*h).is_empty_heap() {
            return;
        }
        if record::tracing() {
            record::thread_exit(&*h);
        }
        let pages = pages_of(&*h);
        let mut o = (*h).owned();
        o.collect(&pages);
        let ps = core::mem::replace(&mut o.local().pageset, core::ptr::null_mut());
        if !ps.is_null() {
            PAGES.pagesets.release_thread_pageset(ps, &PAGES.zone);
        }
        o.reset_tuning();
        if tls::heap() == h {
            tls::set_heap(core::ptr::addr_of!(slab::heap::EMPTY_HEAP) as *mut Heap);
        }
        HEAPS.abandon(h);
    }
}

/// The report at exit: to `PCPALLOC_STATS_FILE` (each `%p` replaced by
/// the process id, so forked children write their own), else to the copy
/// of stderr. A file that cannot be opened gets one line on stderr and
/// the report goes there.
extern "C" fn stats_at_exit() {
    let fd = STATS_FD.load(Relaxed);
    let Some(path) = SETTINGS.stats_file.get() else {
        report::print_stats(fd);
        return;
    };
    let file = files::create_for_this_process(path, PidIn::Placeholder, false);
    if file < 0 {
        crate::report::warn("cannot open PCPALLOC_STATS_FILE; the report goes to stderr");
        report::print_stats(fd);
        return;
    }
    report::print_stats(file);
    // SAFETY: file is the descriptor opened above.
    unsafe { libc::close(file) };
}

/// At the process's exit: every heap's trace events go out.
extern "C" fn flush_trace() {
    record::flush_all(&HEAPS);
}
