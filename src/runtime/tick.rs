//! When the maintenance tick runs (`maint.rs` says what it does).
//!
//! By default a background thread runs it every `PCPALLOC_DECAY_MS` (1 s).
//! The thread is created lazily — once the heap and the huge blocks have
//! grown past [`BACKGROUND_MIN_BYTES`] or a second thread allocates — so a
//! small single-threaded program never gets one; until then, and always with
//! `PCPALLOC_BACKGROUND=0`, the tick runs from allocation slow paths when
//! it is due. The thread blocks every signal, never allocates, and is
//! recreated in a forked child when needed.
//!
//! The tick lock keeps two ticks from overlapping and lets tests hold the
//! allocator still; it is the outermost lock of the list in `fork.rs`.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::*};

use crate::maint::{self, TickWork};
use crate::runtime::settings::SETTINGS;
use crate::sync::{Guard, Locked};
use crate::sys;

use super::process::{self, HEAPS, HUGE, PAGES};

/// The heap size from which a background thread is worth having.
pub const BACKGROUND_MIN_BYTES: usize = 16 << 20;

const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;

static THREAD: AtomicU8 = AtomicU8::new(NOT_STARTED);
static LAST_TICK_NS: AtomicU64 = AtomicU64::new(0);
static SLOW_CALLS: AtomicU32 = AtomicU32::new(0);

/// Held by the tick while it runs (see the module docs).
pub(super) static TICK_LOCK: Locked<()> = Locked::new(());

/// Keeps the maintenance tick from running until the guard is dropped.
pub fn pause() -> Guard<'static, ()> {
    TICK_LOCK.lock()
}

/// One maintenance tick now. Returns the bytes given back to the OS.
pub fn tick() -> usize {
    if !process::is_ready() {
        return 0;
    }
    let _running = TICK_LOCK.lock();
    let released = maint::tick(
        &PAGES,
        &HEAPS,
        &HUGE,
        TickWork {
            release_memory: true,
            home: core::ptr::null(),
            collapse: THREAD.load(Relaxed) == RUNNING,
        },
    );
    super::late::collect();
    released
}

/// Ticks run so far (the zone's epoch).
pub fn ticks() -> u64 {
    u64::from(PAGES.zone.epoch())
}

/// Called on allocation slow paths: starts the background thread when it
/// becomes worthwhile, or runs a due tick inline when there is none.
#[inline]
pub fn on_slow_path() {
    if THREAD.load(Relaxed) == RUNNING {
        return;
    }
    on_slow_path_cold();
}

/// [`on_slow_path`], then `p`: a fast path's tail call, which keeps
/// nothing live across the call.
#[inline(always)]
pub fn on_slow_path_then<T>(p: *mut T) -> *mut T {
    if THREAD.load(Relaxed) == RUNNING {
        return p;
    }
    on_slow_path_cold_then(p.cast()).cast()
}

#[cold]
#[inline(never)]
fn on_slow_path_cold_then(p: *mut u8) -> *mut u8 {
    on_slow_path_cold();
    p
}

/// Slow-path calls between looks at the clock.
const CLOCK_EVERY: u32 = 64;

#[cold]
#[inline(never)]
fn on_slow_path_cold() {
    let n = SLOW_CALLS.load(Relaxed);
    SLOW_CALLS.store(n.wrapping_add(1), Relaxed); // racy on purpose: a hint
    if !n.is_multiple_of(CLOCK_EVERY) {
        return;
    }
    if SETTINGS.background.load(Relaxed)
        && THREAD.load(Relaxed) == NOT_STARTED
        && (PAGES.managed_bytes() + HUGE.bytes() >= BACKGROUND_MIN_BYTES
            || process::threads_seen() >= 2)
    {
        start(false);
        return;
    }
    tick_if_due();
}

/// Free memory waiting for the tick from which it is worth starting the
/// background thread for it (or, without one, giving it back at once).
const WAITING_MIN_BYTES: usize = 4 << 20;

/// Memory went where only a tick gives it back to the OS — a huge block
/// into its cache, a large block to the zone: make sure a tick will come
/// if that is worth it. With the background thread, that is starting it
/// if it is not running yet; without one (`PCPALLOC_BACKGROUND=0`) the
/// tick runs now if due. One load when the thread runs.
#[inline]
pub fn memory_waiting() {
    if THREAD.load(Relaxed) == RUNNING {
        return;
    }
    memory_waiting_cold();
}

#[cold]
#[inline(never)]
fn memory_waiting_cold() {
    if waiting_bytes() < WAITING_MIN_BYTES {
        return;
    }
    let saved = sys::errno();
    if SETTINGS.background.load(Relaxed) && THREAD.load(Relaxed) == NOT_STARTED {
        start(true);
    }
    if THREAD.load(Relaxed) != RUNNING {
        tick_if_due();
    }
    sys::set_errno(saved);
}

/// Memory a tick would give back, as two loads can tell: free pages still
/// resident and cached huge blocks (pages on pagesets are left out: adding
/// them up takes every pageset's lock).
fn waiting_bytes() -> usize {
    PAGES.zone.dirty_free_pages() * crate::geometry::PAGE_SIZE + HUGE.cached_bytes()
}

/// A thread just handed its heap back (its exit hook). Its memory is in
/// pagesets, the zone and the abandoned heap: with the background thread
/// (started now if it is not running) the next ticks give it back; without
/// one, this exit is the last time the allocator may run, so what waits
/// beyond the high watermark goes back now.
pub fn after_thread_exit() {
    if THREAD.load(Relaxed) == RUNNING {
        return;
    }
    if SETTINGS.background.load(Relaxed) && THREAD.load(Relaxed) == NOT_STARTED {
        start(true);
        if THREAD.load(Relaxed) == RUNNING {
            return;
        }
    }
    tick_if_due();
    let keep = PAGES
        .zone
        .wmark(crate::page_alloc::zone::watermark::WMARK_HIGH)
        * crate::geometry::PAGE_SIZE;
    let waiting = waiting_bytes() + PAGES.pagesets.total_count() * crate::geometry::PAGE_SIZE;
    if waiting >= keep + WAITING_MIN_BYTES {
        let _running = TICK_LOCK.lock();
        let everywhere = PAGES.through(core::ptr::null(), false);
        HEAPS.collect_abandoned(&everywhere);
        PAGES.drain_all();
        HUGE.trim(&PAGES.zone.budget);
        PAGES.zone.release_idle(
            0,
            PAGES
                .zone
                .wmark(crate::page_alloc::zone::watermark::WMARK_HIGH),
        );
    }
}

/// Runs the tick now if one is due (no background thread).
fn tick_if_due() {
    let now = sys::coarse_now_ns();
    let period = u64::from(SETTINGS.decay_ms.load(Relaxed)) * 1_000_000;
    let last = LAST_TICK_NS.load(Relaxed);
    if last == 0 {
        LAST_TICK_NS.store(now, Relaxed);
    } else if now.saturating_sub(last) >= period
        && LAST_TICK_NS
            .compare_exchange(last, now, Relaxed, Relaxed)
            .is_ok()
    {
        tick();
    }
}

/// When starting the thread last failed (0: never), so a failure is
/// retried a tick later rather than at once or never.
static LAST_START_FAIL_NS: AtomicU64 = AtomicU64::new(0);

/// Starts the background thread if it is not running. Creating a thread
/// allocates (glibc's `pthread_create` callocs its thread's TLS vector):
/// at a memory limit that can fail; allocation slow paths try again a
/// tick later, frees that leave memory waiting (`retry_now`) at once.
fn start(retry_now: bool) {
    let failed = LAST_START_FAIL_NS.load(Relaxed);
    if failed != 0 && !retry_now {
        let period = u64::from(SETTINGS.decay_ms.load(Relaxed)) * 1_000_000;
        if sys::coarse_now_ns().saturating_sub(failed) < period {
            return;
        }
    }
    if THREAD
        .compare_exchange(NOT_STARTED, STARTING, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    let saved = sys::errno();
    // SAFETY: plain pthread calls with valid out-parameters; the new thread
    // inherits a fully blocked signal mask, ours is restored right after.
    let ok = unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        libc::pthread_attr_setstacksize(&mut attr, 128 << 10);
        let mut t: libc::pthread_t = 0;
        let rc = libc::pthread_create(&mut t, &attr, thread_main, core::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        rc == 0
    };
    sys::set_errno(saved);
    if ok {
        // The thread may have marked itself already.
        let _ = THREAD.compare_exchange(STARTING, RUNNING, AcqRel, Relaxed);
    } else {
        LAST_START_FAIL_NS.store(sys::coarse_now_ns().max(1), Relaxed);
        THREAD.store(NOT_STARTED, Release);
    }
}

extern "C" fn thread_main(_: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: prctl PR_SET_NAME with a NUL-terminated name is harmless.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"pcpalloc-tick".as_ptr()) };
    // The thread marks itself running, not only its creator: a creator
    // held off (a loaded machine) or gone (a signal handler that leaves
    // start() after pthread_create) must not leave it STARTING for good.
    let _ = THREAD.compare_exchange(STARTING, RUNNING, AcqRel, Relaxed);
    loop {
        let ms = u64::from(SETTINGS.decay_ms.load(Relaxed));
        let ts = libc::timespec {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
        };
        // SAFETY: ts is valid; an early wake-up only makes a tick early.
        unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
        // Only a forked child resets the state (NOT_STARTED), and this
        // thread is not there. Before the thread marked itself, it could
        // wake to its creator's STARTING and leave, and the process then
        // stayed marked RUNNING with no thread: no tick ever again.
        if THREAD.load(Acquire) != RUNNING {
            return core::ptr::null_mut();
        }
        tick();
    }
}

/// Whether the background thread is running.
pub fn background_running() -> bool {
    THREAD.load(Relaxed) == RUNNING
}

/// In a forked child: the thread did not survive; start a new one when it
/// is next needed.
pub(super) fn after_fork_child() {
    THREAD.store(NOT_STARTED, Relaxed);
    LAST_TICK_NS.store(0, Relaxed);
}
