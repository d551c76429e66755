//! Recording the allocation trace (`PCPALLOC_TRACE=PREFIX`; the format is
//! in `trace.rs`): every process writes `PREFIX.<pid>`.
//!
//! Tracing costs nothing when off, because it needs no test on the fast
//! paths: while tracing, a thread's TLS heap pointer stays the static
//! empty heap, whose bins are empty and own no slab, so every allocation
//! and every free of the thread falls through to a slow path — and the
//! slow paths, which find the thread's real heap through its pthread key,
//! record the event and then do what the fast path would have done.
//!
//! Each heap has a buffer of events for its thread; a full buffer is one
//! write(2). A thread's exit writes its buffer out, and so does the
//! process's exit (for every heap); a forked child drops what its
//! buffers hold (the parent writes that) and starts its own file.

use core::sync::atomic::{AtomicBool, AtomicI32, Ordering::*};

use crate::heap::{Heap, HeapRegistry};
use crate::settings::SETTINGS;
use crate::sys;
use crate::trace::{self, Buffer, Event, Op};

use super::files::{self, PidIn};

static TRACING: AtomicBool = AtomicBool::new(false);
static TRACE_FD: AtomicI32 = AtomicI32::new(-1);

/// Whether this process records a trace.
#[inline]
pub(crate) fn tracing() -> bool {
    TRACING.load(Relaxed)
}

/// Whether every allocation and free takes a slow path: while tracing,
/// and under valgrind (`valgrind.rs`), the TLS heap pointer stays the
/// empty heap and the slow paths find the thread's heap by its key.
#[inline]
pub(crate) fn every_op_slow() -> bool {
    tracing() || super::valgrind::on()
}

/// At init: opens `PREFIX.<pid>` if `PCPALLOC_TRACE` is set, and writes
/// its header. A file that cannot be created gets one line on stderr and
/// no trace.
pub(super) fn start() {
    if SETTINGS.trace_prefix.get().is_some() && open_file() {
        TRACING.store(true, Relaxed);
    }
}

fn open_file() -> bool {
    let Some(prefix) = SETTINGS.trace_prefix.get() else {
        return false;
    };
    let fd = files::create_for_this_process(prefix, PidIn::Suffix, true);
    if fd < 0 {
        crate::alert::warn("cannot create the PCPALLOC_TRACE file; not tracing");
        return false;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let h = trace::file_header(pid, sys::nr_cpus_online(), sys::now_ns());
    // SAFETY: FileHeader is repr(C) plain data with no padding.
    let bytes = unsafe {
        core::slice::from_raw_parts(
            (&h as *const trace::FileHeader).cast::<u8>(),
            core::mem::size_of::<trace::FileHeader>(),
        )
    };
    sys::write_fd(fd, bytes);
    TRACE_FD.store(fd, Relaxed);
    true
}

/// Gives heap `h` a buffer for the calling thread (on attach, while
/// tracing). False if metadata memory ran out.
pub(super) fn attach(h: &Heap) -> bool {
    let mut b = h.trace.load(Acquire);
    if b.is_null() {
        b = Buffer::create();
        if b.is_null() {
            return false;
        }
        h.trace.store(b, Release);
    }
    // SAFETY: gettid has no preconditions; buffers live forever.
    unsafe { (*b).set_owner(libc::gettid() as u32) };
    true
}

/// Records an event of the calling thread, whose heap is `h`: `size` and
/// `align` (bytes, 0 for the default) for allocations.
pub(crate) fn record(h: &Heap, op: Op, addr: *const u8, size: usize, align: usize) {
    let b = h.trace.load(Acquire);
    if b.is_null() {
        return;
    }
    let align_log2 = if align > 16 {
        align.trailing_zeros()
    } else {
        0
    };
    let e = Event {
        time_ns: sys::now_ns(),
        addr: addr as u64,
        word: Event::pack(op, sys::current_cpu(), size, align_log2),
    };
    // SAFETY: buffers live forever.
    let b = unsafe { &*b };
    b.lock().push(TRACE_FD.load(Relaxed), b.owner(), e);
}

/// The thread of heap `h` exits: records it and writes its events out.
pub(super) fn thread_exit(h: &Heap) {
    record(h, Op::Exit, core::ptr::null(), 0, 0);
    flush(h);
}

fn flush(h: &Heap) {
    let b = h.trace.load(Acquire);
    if !b.is_null() {
        // SAFETY: buffers live forever.
        unsafe { &*b }.lock().flush(TRACE_FD.load(Relaxed));
    }
}

/// At the process's exit: every heap's events go out.
pub(super) fn flush_all(heaps: &HeapRegistry) {
    heaps.for_each(flush);
}

/// Fork's prepare handler: holds every buffer (a leaf lock each).
pub(super) fn lock_all(heaps: &HeapRegistry) {
    heaps.for_each(|h| {
        let b = h.trace.load(Acquire);
        if !b.is_null() {
            // SAFETY: buffers live forever.
            core::mem::forget(unsafe { &*b }.lock());
        }
    });
}

/// Fork's parent and child handlers: releases what [`lock_all`] took. The
/// child drops the buffered events (its parent writes them) and starts a
/// file of its own (fork's child handler then re-attaches the forking
/// thread's heap, whose thread id changed).
///
/// # Safety
/// [`lock_all`] ran in this thread (before the fork).
pub(super) unsafe fn unlock_all(heaps: &HeapRegistry, child: bool) {
    heaps.for_each(|h| {
        let b = h.trace.load(Acquire);
        if !b.is_null() {
            // SAFETY: buffers live forever; lock_all took this lock.
            unsafe {
                if child {
                    // The guard was forgotten: drop the events through a
                    // fresh view of the (still held) buffer.
                    (*b).discard_locked();
                }
                (*b).unlock_raw();
            }
        }
    });
    if child && tracing() {
        let old = TRACE_FD.swap(-1, Relaxed);
        // SAFETY: old is the parent's descriptor, inherited; closing our
        // copy leaves the parent's open.
        unsafe { libc::close(old) };
        if !open_file() {
            TRACING.store(false, Relaxed);
        }
    }
}
