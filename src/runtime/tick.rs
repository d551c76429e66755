//! When the maintenance tick runs (`maint.rs` says what it does).
//!
//! pcpalloc starts no thread unless asked: a program that was
//! single-threaded stays so (`unshare(CLONE_NEWUSER)` and `setns()` refuse a
//! multi-threaded process; a thread also changes what fork copies, what
//! /proc/self/task lists and what a seccomp filter sees), as under glibc,
//! mimalloc or tcmalloc. By default the tick runs from the allocator's own
//! calls — allocation slow paths, frees that leave memory waiting, a
//! thread's exit — once `PCPALLOC_DECAY_MS` (1 s) has passed since the
//! last, and what a free leaves waiting beyond what the caches keep goes
//! back at once (`give_back.rs`), so idle memory goes back with no thread.
//!
//! With `PCPALLOC_BACKGROUND=1` (`Config::background_thread(true)`) a
//! background thread runs the tick every `PCPALLOC_DECAY_MS` instead,
//! created lazily — once the heap and the huge blocks have grown past
//! [`BACKGROUND_MIN_BYTES`], a second thread allocates, or 4 MiB wait to
//! go back — so a small single-threaded program never gets one. That
//! thread's ticks collapse up to 32 dense 2 MiB ranges into huge pages; a
//! tick run inline, one (a collapse copies 2 MiB: copying up to 64 MiB is
//! not for a program's own thread). It blocks every signal, never
//! allocates, and is recreated in a forked child when needed.
//!
//! In a memory cgroup, the heap's growth past a step and each tick read
//! the cgroup's usage, and what the caches hold past what its limit
//! allows goes back ([`after_growth`], `memcg.rs`), with the thread or
//! without.
//!
//! The tick lock keeps two ticks (or a tick and a give-back) from
//! overlapping and lets tests hold the allocator still; it is the
//! outermost lock of the list in `fork.rs`.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::*};

use crate::maint::{self, TickWork};
use crate::settings::SETTINGS;
use crate::sync::{Guard, Locked};
use crate::sys;

use super::process::{self, HEAPS, HUGE, PAGES};
use super::{give_back, memcg, tls};

/// The heap size from which a background thread is worth having.
pub(crate) const BACKGROUND_MIN_BYTES: usize = 16 << 20;

const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;

static THREAD: AtomicU8 = AtomicU8::new(NOT_STARTED);
static LAST_TICK_NS: AtomicU64 = AtomicU64::new(0);

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
    let running = TICK_LOCK.lock();
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
    give_back::on_tick();
    memcg::on_tick(&PAGES.zone.budget);
    give_back_for_memcg();
    drop(running);
    exit_give_back_if_pending();
    released
}

/// Ticks run so far (the zone's epoch).
pub(crate) fn ticks() -> u64 {
    u64::from(PAGES.zone.epoch())
}

/// Called on allocation slow paths: runs a due tick inline, or, with the
/// background thread asked for, starts it when it becomes worthwhile.
#[inline]
pub(crate) fn on_slow_path() {
    if THREAD.load(Relaxed) == RUNNING {
        return;
    }
    on_slow_path_cold();
}

/// [`on_slow_path`], then `p`: a fast path's tail call, which keeps
/// nothing live across the call.
#[inline(always)]
pub(crate) fn on_slow_path_then<T>(p: *mut T) -> *mut T {
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
    // SAFETY: heaps live forever (the empty heap is a static).
    let calls = unsafe { &(*tls::current_heap()).slow_calls };
    let n = calls.load(Relaxed);
    calls.store(n.wrapping_add(1), Relaxed); // the owner's; racy on the empty heap: a hint
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
    // Huge pages between ticks: big huge blocks are looked at for dense
    // use sooner than a tick comes (a block being filled is advised while
    // most of it is still to fault in), and what the heap's growth paid
    // for is collapsed, one 2 MiB range at a time.
    maint::between_ticks(&PAGES, &HUGE);
}

/// Free memory waiting for the tick from which it is worth starting the
/// background thread for it (when it is asked for).
const WAITING_MIN_BYTES: usize = 4 << 20;

/// Memory went where only a tick gives it back to the OS — a huge block
/// into its cache, a large block to the zone, an emptied slab: make sure
/// it goes back. With the background thread, that is starting it if it is
/// not running yet (a tick later gives it back); without one (the
/// default), the tick runs now if due and what waits beyond what the
/// caches keep goes back at once (`give_back.rs`). One load when the
/// thread runs.
#[inline]
pub(crate) fn memory_waiting() {
    if THREAD.load(Relaxed) == RUNNING {
        return;
    }
    memory_waiting_cold();
}

#[cold]
#[inline(never)]
fn memory_waiting_cold() {
    if SETTINGS.background.load(Relaxed)
        && THREAD.load(Relaxed) == NOT_STARTED
        && give_back::waiting_bytes() >= WAITING_MIN_BYTES
    {
        start(true);
    }
    if THREAD.load(Relaxed) != RUNNING {
        let saved = sys::errno();
        tick_if_due();
        sys::set_errno(saved);
        give_back_if_due();
    }
}

/// A thread just handed its heap back (its exit hook): its memory is in
/// pagesets, the zone and the abandoned heap. With the background thread
/// (started now if asked for and not running) the next ticks give it
/// back; without one, the tick runs if due, and what waits beyond what
/// the caches keep goes back now, as after any free (`give_back.rs`).
pub(crate) fn after_thread_exit() {
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
    // What the lists hold counts as what is resident once measured: an
    // exit that leaves no more than the keep and a step gives nothing back.
    if give_back::due_at_exit() {
        give_back::measure_at_exit();
        if give_back::due_at_exit() {
            exit_give_back();
        }
    }
}

/// A thread's exit found its give-back due while the tick lock was taken
/// (a tick, or another thread's give-back): the holder runs it once it
/// lets go of the lock (`exit_give_back_if_pending`).
static EXIT_PENDING: AtomicBool = AtomicBool::new(false);

/// The give-back at a thread's exit (`give_back.rs`). Where the tick lock
/// is taken, the give-back is left to its holder: a storm's threads exit
/// together, and the last one's give-back — the one that sees its wave's
/// memory all freed — was skipped while another's ran (5,000 threads under
/// strace left 20 MiB resident, not 12). A waiting thread marks the
/// give-back pending and tries the lock once more, so either it runs it,
/// or the holder, which looks at the mark after it lets go, does.
#[cold]
#[inline(never)]
fn exit_give_back() {
    if !TICK_LOCK.lock.try_lock() {
        EXIT_PENDING.store(true, SeqCst);
        if !TICK_LOCK.lock.try_lock() {
            return;
        }
    }
    EXIT_PENDING.store(false, SeqCst);
    give_back::give_back_at_exit();
    // SAFETY: taken just above.
    unsafe { TICK_LOCK.lock.unlock() };
    exit_give_back_if_pending();
}

/// Runs the give-back a thread's exit left pending while the lock was
/// held (see [`exit_give_back`]), if it is still due: after any hold of
/// the tick lock but the allocator held still (fork, `pause`).
fn exit_give_back_if_pending() {
    while EXIT_PENDING.load(SeqCst) {
        if !TICK_LOCK.lock.try_lock() {
            // The holder looks at the mark when it lets go.
            return;
        }
        EXIT_PENDING.store(false, SeqCst);
        if give_back::due_at_exit() {
            give_back::give_back_at_exit();
        }
        // SAFETY: taken just above.
        unsafe { TICK_LOCK.lock.unlock() };
    }
}

/// What waits beyond what the caches keep goes back now (`give_back.rs`),
/// unless a tick or another give-back runs (it gives back too) or the
/// allocator is held still (`pause`, fork): the tick lock is only tried.
#[inline]
fn give_back_if_due() {
    if give_back::due() {
        give_back_now();
    }
}

#[cold]
#[inline(never)]
fn give_back_now() {
    if TICK_LOCK.lock.try_lock() {
        give_back::give_back();
        // SAFETY: taken just above.
        unsafe { TICK_LOCK.lock.unlock() };
        exit_give_back_if_pending();
    }
}

/// On the allocation paths that take memory from the zone or map a huge
/// block, after they did (`reclaim::or_reclaim`): once the heap has grown
/// a step since the memory cgroup's usage was last read, it is read again
/// and what the caches hold past the headroom goes back (`memcg.rs`). A
/// load and a compare; nothing without a cgroup limit.
#[inline]
pub(crate) fn after_growth() {
    if memcg::past_mark(&PAGES.zone.budget) {
        after_growth_cold();
    }
}

#[cold]
#[inline(never)]
fn after_growth_cold() {
    // A tick or a give-back under way reads and gives back too; the next
    // allocation past the mark tries again.
    if !TICK_LOCK.lock.try_lock() {
        return;
    }
    let saved = sys::errno();
    memcg::read_usage(&PAGES.zone.budget);
    give_back_for_memcg();
    sys::set_errno(saved);
    // SAFETY: taken just above.
    unsafe { TICK_LOCK.lock.unlock() };
    exit_give_back_if_pending();
}

/// With the tick lock held, after a read of the memory cgroup's usage:
/// what the caches hold past what the headroom allows goes back — all of
/// it, pagesets and heaps' caches too, within the reserve or when they
/// hold more than half the headroom; then the usage is read again, so
/// what went back counts.
fn give_back_for_memcg() {
    let budget = &PAGES.zone.budget;
    if budget.cgroup_target() == crate::page_alloc::zone::NO_LIMIT {
        return;
    }
    if memcg::near_limit(budget) || give_back::over_cgroup_share() {
        give_back::give_back_everything();
    } else if give_back::due() {
        give_back::give_back();
    } else {
        return;
    }
    memcg::note_give_back();
    memcg::read_usage(budget);
}

/// Runs the tick now if one is due (no background thread running). A
/// tick that comes late — the program made no call for a while — also
/// runs the ticks it missed, up to [`CATCH_UP_TICKS`]: what stayed idle
/// that long is as idle as the background thread would have found it.
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
        let missed = now.saturating_sub(last) / period.max(1);
        for _ in 0..missed.min(CATCH_UP_TICKS) {
            tick();
        }
    }
}

/// The most ticks a late tick runs (an idle pageset is drained after
/// three).
const CATCH_UP_TICKS: u64 = 3;

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
        super::valgrind::own_work(tick);
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
