//! The thread side of the runtime: a thread's first allocation gives it a
//! heap (adopted or new) and sets the exit hook that hands the heap back;
//! the report at exit.

use core::sync::atomic::{AtomicU8, Ordering::*};

use crate::heap::Heap;
use crate::settings::SETTINGS;
use crate::stats_report::ThreadStats;

use super::files::{self, PidIn};
use super::process::{self, pages_of, HEAPS, PAGES};
use super::{record, report, tick, tls};

/// What an exiting thread's heap keeps of its empty slabs, parked for the
/// thread that adopts it (`HeapRegistry::acquire` takes the heap last
/// abandoned first): a thread pool's next worker, a storm's next wave,
/// finds its slabs' pages resident instead of faulting in fresh ones. A
/// storm of 5,000 short threads (`lc_thread_storm 5000 20 16`) faulted
/// 196-202 k pages giving every empty slab back at exit, 159 k keeping
/// 256 KiB a heap (+0.4-0.8 MiB resident after it), 84-90 k keeping
/// 512 KiB (+8 MiB): 256 KiB is PARK_HIGH_MIN, what any live heap may keep.
const EXIT_PARK_BYTES: usize = crate::heap::heap::PARK_HIGH_MIN;
/// ... while fewer heaps than this are abandoned: the heaps holding slabs
/// so are at most this many (a heap parks only when fewer were abandoned
/// before it), so what they keep is at most 4 MiB whatever the number of
/// threads that exit, until a tick or a give-back with nothing reused
/// (`HeapRegistry::collect_abandoned`) takes it back.
const EXIT_PARK_HEAPS: usize = 16;

const KEY_NONE: u8 = 0;
const KEY_MAKING: u8 = 1;
const KEY_READY: u8 = 2;
static KEY_STATE: AtomicU8 = AtomicU8::new(KEY_NONE);

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
/// thread mode, and set the exit hook for it. While tracing, the TLS
/// pointer is left to the empty heap (see `record.rs`), so every later
/// slow path comes here for the heap kept under the pthread key. Null for
/// a thread past its exit hook (the late heap serves it, see `late.rs`).
#[cold]
#[inline(never)]
fn attach_thread() -> *mut Heap {
    if !process::ensure_init() || tls::exited() {
        return core::ptr::null_mut();
    }
    if record::every_op_slow() {
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
    // The heap is this thread's before anything below can allocate: when
    // pthread_setspecific needs memory (a key past glibc's first 32), its
    // calloc finds the heap here instead of coming back for another.
    tls::set_heap(h);
    let key = thread_key();
    if key != u32::MAX {
        // SAFETY: key was created by pthread_key_create.
        unsafe { libc::pthread_setspecific(key, h.cast()) };
    }
    // SAFETY: heaps live forever.
    let traced = || record::tracing() && record::attach(unsafe { &*h });
    if key != u32::MAX && (super::valgrind::on() || traced()) {
        // Traced, or under valgrind: every event of this thread takes a
        // slow path, which finds the heap through the key.
        tls::set_heap(core::ptr::addr_of!(crate::heap::heap::EMPTY_HEAP) as *mut Heap);
    }
    process::note_thread();
    h
}

/// Makes the pthread key whose destructor is the exit hook, if it is not
/// made yet (the library's constructor calls it, so it is among the
/// process's first keys).
pub(super) fn make_key() {
    thread_key();
}

/// The pthread key whose destructor is the exit hook (`u32::MAX` if the
/// system has none to give).
fn thread_key() -> u32 {
    loop {
        match KEY_STATE.compare_exchange(KEY_NONE, KEY_MAKING, Acquire, Acquire) {
            Ok(_) => {
                let mut key: libc::pthread_key_t = 0;
                // SAFETY: key is a valid out-parameter; the destructor is a
                // C-ABI fn that never unwinds. pthread_key_create takes no
                // lock a malloc caller could hold and never allocates.
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

/// The thread-exit hook (a pthread key destructor): the heap gives back
/// what it can and waits on the abandoned list for the next thread; the
/// thread is marked exited, so what its later destructors allocate comes
/// from the late heap and never brings the key back (see `late.rs`).
/// Never allocates.
extern "C" fn thread_exit_hook(h: *mut libc::c_void) {
    super::valgrind::own_work(|| thread_exit(h.cast::<Heap>()));
}

/// [`thread_exit_hook`]'s work on the exiting thread's heap `h`.
fn thread_exit(h: *mut Heap) {
    // SAFETY: the key's value is the exiting thread's heap, which it still
    // owns; heaps live forever.
    unsafe {
        if h.is_null() || (*h).is_empty_heap() {
            return;
        }
        let saved = crate::sys::errno();
        if record::tracing() {
            record::thread_exit(&*h);
        }
        let pages = pages_of(&*h);
        let mut o = (*h).owned();
        let park = if HEAPS.abandoned_count() < EXIT_PARK_HEAPS {
            EXIT_PARK_BYTES
        } else {
            0
        };
        o.collect_parking(&pages, park);
        let ps = core::mem::replace(&mut o.local().pageset, core::ptr::null_mut());
        if !ps.is_null() {
            PAGES.pagesets.release_thread_pageset(ps, &PAGES.zone);
        }
        o.reset_tuning();
        tls::set_heap(core::ptr::addr_of!(crate::heap::heap::EMPTY_HEAP) as *mut Heap);
        tls::set_exited();
        // An rseq area of our own is unregistered: the kernel writes no
        // more into TLS the thread is about to give up.
        crate::sys::rseq::thread_exit();
        HEAPS.abandon(h);
        tick::after_thread_exit();
        crate::sys::set_errno(saved);
    }
}

/// Gives back what the calling thread's heap caches — the free objects on
/// its bins, its cached large blocks, its parked empty slabs — and
/// collects the frees other threads made of its objects; emptied slabs go
/// back to the page allocator. The heap stays the thread's (jemalloc's
/// `thread.tcache.flush`). A thread without a heap has nothing to give.
pub fn thread_flush() {
    if !process::is_ready() {
        return;
    }
    let h = tls::current_heap();
    // SAFETY: h is this thread's heap (or the empty heap, left alone).
    super::valgrind::own_work(|| unsafe {
        if !(*h).is_empty_heap() {
            let pages = pages_of(&*h);
            (*h).owned().collect(&pages);
        }
    });
}

/// The calling thread's byte counters (see [`ThreadStats`]); zeros for a
/// thread that has not allocated.
pub fn thread_stats() -> ThreadStats {
    let h = tls::current_heap();
    // SAFETY: heaps live forever; only atomics are read.
    let h = unsafe { &*h };
    if h.is_empty_heap() {
        return ThreadStats::default();
    }
    let [taken, returned, remote_freed, large_allocated, large_freed] = h.totals();
    ThreadStats {
        allocated: taken + large_allocated,
        deallocated: returned + remote_freed + large_freed,
        cached: h.usage().binned,
    }
}

/// The report at exit (the library's destructor): to `PCPALLOC_STATS_FILE`
/// (each `%p` replaced by the process id, so forked children write their
/// own), else to the copy of stderr. A file that cannot be opened gets one
/// line on stderr and the report goes there.
pub(super) fn report_at_exit() {
    if !SETTINGS.stats_at_exit.load(Relaxed) {
        return;
    }
    let fd = process::stats_fd();
    let Some(path) = SETTINGS.stats_file.get() else {
        report::print_stats(fd);
        return;
    };
    let file = files::create_for_this_process(path, PidIn::Placeholder, false);
    if file < 0 {
        crate::alert::warn("cannot open PCPALLOC_STATS_FILE; the report goes to stderr");
        report::print_stats(fd);
        return;
    }
    report::print_stats(file);
    // SAFETY: file is the descriptor opened above.
    unsafe { libc::close(file) };
}
