//! Global state and one-time initialisation.
//!
//! Everything is a const-initialised static; `ensure_init` fills in what
//! needs the environment (tunables, memory limit, CPUs, cache size) on the
//! first allocation. Initialisation calls nothing that allocates, so it
//! cannot recurse; should a libc ever allocate inside it anyway, that
//! nested call is served from a small bootstrap arena (its blocks are
//! never freed) instead of deadlocking. Other threads arriving meanwhile
//! wait for it to finish.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU8, AtomicUsize, Ordering::*};

use crate::config::PAGE_SIZE;
use crate::pcp::{pool, tune};
use crate::report;
use crate::sys;
use crate::tunables::{self, SETTINGS};
use crate::zone::{StealRules, Zone, ZoneConfig};

/// The allocator's zone.
pub static ZONE: Zone = Zone::new();

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static INIT_TID: AtomicI32 = AtomicI32::new(0);
static FREE_KEY: AtomicUsize = AtomicUsize::new(0x5a5a_5a5a_5a5a_5a5b);
static FREE_HIGH_BATCH: AtomicBool = AtomicBool::new(false);
static THREAD_KEY: AtomicU32 = AtomicU32::new(u32::MAX);
static POST_INIT: AtomicU8 = AtomicU8::new(0);
/// Heaps ever handed to threads (a hint for starting the tick thread).
pub static THREADS_SEEN: AtomicUsize = AtomicUsize::new(0);

/// Fallback memory limit when neither the cgroup nor /proc tell (1 TiB).
const DEFAULT_LIMIT: usize = 1 << 40;

/// The random key stored in free blocks (double-free detection).
#[inline(always)]
pub fn free_key() -> usize {
    FREE_KEY.load(Relaxed)
}

/// Whether pagesets keep a batch before free_high draining.
pub fn free_high_batch() -> bool {
    FREE_HIGH_BATCH.load(Relaxed)
}

/// Whether initialisation has completed.
#[inline]
pub fn is_ready() -> bool {
    STATE.load(Acquire) == READY
}

/// Initialises the allocator if needed. False if it cannot run (an
/// unsupported page size, or a recursive call during initialisation).
#[inline]
pub fn ensure_init() -> bool {
    match STATE.load(Acquire) {
        READY => true,
        FAILED => false,
        _ => init_slow(),
    }
}

#[cold]
#[inline(never)]
fn init_slow() -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    if STATE
        .compare_exchange(UNINIT, BUSY, Acquire, Acquire)
        .is_ok()
    {
        INIT_TID.store(tid, Relaxed);
        let ok = init();
        STATE.store(if ok { READY } else { FAILED }, Release);
        return ok;
    }
    if INIT_TID.load(Relaxed) == tid {
        return false; // recursion from inside init
    }
    loop {
        match STATE.load(Acquire) {
            READY => return true,
            FAILED => return false,
            _ => sys::yield_now(),
        }
    }
}

fn init() -> bool {
    if sys::page_size() != PAGE_SIZE {
        report::warn("unsupported page size (pcpalloc needs 4 KiB pages); allocations will fail");
        return false;
    }
    tunables::load_from_env();
    let mut limit = SETTINGS.memory_limit.load(Relaxed);
    if limit == 0 {
        limit = sys::memory_limit_bytes().map_or(DEFAULT_LIMIT, |b| b as usize);
    }
    let limit = limit.min(crate::config::MAX_SECTIONS * crate::config::SECTION_SIZE / 2);
    let cpus = sys::nr_cpus_online();
    ZONE.configure(&ZoneConfig {
        memory_limit: limit,
        nr_cpus: cpus,
        high_fraction: SETTINGS.high_fraction.load(Relaxed),
        steal: if SETTINGS.steal_seed_004.load(Relaxed) {
            StealRules::SEED_004
        } else {
            StealRules::BASELINE
        },
    });
    let batch = ZONE.pcp_params().batch;
    let fhb = sys::llc_slice_bytes(0).is_some_and(|s| tune::free_high_batch(s, batch));
    FREE_HIGH_BATCH.store(fhb, Relaxed);
    if !pool::init_cpu_sets(sys::nr_cpus_possible(), |_| fhb) {
        return false;
    }
    FREE_KEY.store(random_key(), Relaxed);
    if SETTINGS.pcp_mode() == tunables::PcpMode::Thread {
        crate::sync::membarrier_init();
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: key is a valid out-parameter; the destructor is a C-ABI fn.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit_hook)) } == 0 {
        THREAD_KEY.store(key, Relaxed);
    }
    true
}

/// 64 random bits from the kernel's AT_RANDOM bytes (no syscall), mixed
/// with an address so two processes from one exec image differ too.
fn random_key() -> usize {
    // SAFETY: getauxval has no preconditions; AT_RANDOM points at 16 bytes.
    let p = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const u8;
    let mut k: usize = 0x9E37_79B9_7F4A_7C15;
    if !p.is_null() {
        // SAFETY: AT_RANDOM names 16 readable bytes.
        k ^= unsafe { (p as *const usize).read_unaligned() };
    }
    k ^= &k as *const usize as usize;
    k | 1
}

/// Called when a thread gets its heap: registers the exit hook for it and,
/// the first time, the fork and exit handlers (which may allocate, so they
/// wait until the thread has a heap).
pub fn register_thread(heap: *mut u8) {
    THREADS_SEEN.fetch_add(1, Relaxed);
    let key = THREAD_KEY.load(Relaxed);
    if key != u32::MAX {
        // SAFETY: key was created by pthread_key_create.
        unsafe { libc::pthread_setspecific(key, heap.cast()) };
    }
    if POST_INIT.load(Relaxed) == 0 && POST_INIT.compare_exchange(0, 1, AcqRel, Relaxed).is_ok() {
        crate::fork::register();
        if SETTINGS.stats_at_exit.load(Relaxed) {
            // Keep a private copy of stderr: programs often close fd 2 in
            // their own exit handlers (gnulib's close_stdout does), which
            // run before ours.
            // SAFETY: fcntl on fd 2 and atexit with a C-ABI fn that never
            // unwinds.
            unsafe {
                let fd = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100);
                STATS_FD.store(if fd >= 0 { fd } else { 2 }, Relaxed);
                libc::atexit(stats_at_exit);
            }
        }
    }
}

extern "C" fn thread_exit_hook(heap: *mut libc::c_void) {
    // SAFETY: the key's value is the exiting thread's heap.
    unsafe { crate::slab::heap::thread_exit(heap.cast()) }
}

static STATS_FD: AtomicI32 = AtomicI32::new(2);

extern "C" fn stats_at_exit() {
    crate::stats::print_to_fd(STATS_FD.load(Relaxed));
}

/// After fork in the child: nothing of the init state needs resetting, but
/// a child forked during init would wait forever; mark it failed instead.
pub fn after_fork_child() {
    if STATE.load(Relaxed) == BUSY {
        STATE.store(FAILED, Relaxed);
    }
    if SETTINGS.pcp_mode() == tunables::PcpMode::Thread {
        crate::sync::membarrier_init();
    }
}
