//! The process side of the runtime: the allocator's parts (page
//! allocator, thread heaps, huge blocks) and their one-time
//! initialisation from the environment.
//!
//! Everything is a const-initialised static; [`ensure_init`] fills in what
//! needs the environment (settings, memory limit, CPUs, cache size) on the
//! first allocation. Initialisation calls nothing that allocates, so it
//! cannot recurse; a recursive call (should a libc function allocate
//! inside it anyway) fails cleanly instead of deadlocking. Other threads
//! arriving meanwhile wait for it to finish.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering::*};

use crate::alert;
use crate::geometry::{MAX_SECTIONS, PAGE_SIZE, SECTION_SIZE};
use crate::heap::{Heap, HeapRegistry};
use crate::large::huge::HugeBlocks;
use crate::page_alloc::pcp::tune;
use crate::page_alloc::zone::{StealRules, ThpPolicy, ZoneConfig, NO_LIMIT};
use crate::page_alloc::{PageAllocator, Pages};
use crate::settings::{self, PcpMode, SETTINGS};
use crate::sys;

/// The allocator's page allocator: its zone and pagesets.
pub static PAGES: PageAllocator = PageAllocator::new();
/// The allocator's thread heaps.
pub static HEAPS: HeapRegistry = HeapRegistry::new();
/// The allocator's huge blocks.
pub(crate) static HUGE: HugeBlocks = HugeBlocks::new();

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static INIT_TID: AtomicI32 = AtomicI32::new(0);
static FREE_KEY: AtomicUsize = AtomicUsize::new(0x5a5a_5a5a_5a5a_5a5b);
static THREAD_MODE: AtomicBool = AtomicBool::new(false);
/// Heaps ever handed to threads (a hint for starting the tick thread).
static THREADS_SEEN: AtomicUsize = AtomicUsize::new(0);

/// The memory the formulas are sized from when neither the cgroup nor
/// /proc tell (16 GiB).
const DEFAULT_SIZE: usize = 16 << 30;

/// The random key stored in free blocks (double-free detection).
#[inline(always)]
pub fn free_key() -> usize {
    FREE_KEY.load(Relaxed)
}

/// Whether initialisation has completed.
#[inline]
pub(crate) fn is_ready() -> bool {
    STATE.load(Acquire) == READY
}

/// Heaps handed to threads so far.
pub(crate) fn threads_seen() -> usize {
    THREADS_SEEN.load(Relaxed)
}

/// Counts a heap handed to a thread.
pub(super) fn note_thread() {
    THREADS_SEEN.fetch_add(1, Relaxed);
}

/// Whether pagesets are per thread (`PCPALLOC_PCP=thread`).
#[inline]
pub(crate) fn thread_mode() -> bool {
    THREAD_MODE.load(Relaxed)
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

/// Initialises the allocator, first running `configure` (which sets the
/// tunables a Rust program's `Config` carries) if initialisation has not
/// started yet; the environment, read next, overrides what it set.
#[cold]
pub fn configure_once(configure: impl FnOnce()) -> bool {
    match STATE.load(Acquire) {
        READY => true,
        FAILED => false,
        _ => init_slow_with(configure),
    }
}

#[cold]
#[inline(never)]
fn init_slow() -> bool {
    init_slow_with(|| {})
}

fn init_slow_with(configure: impl FnOnce()) -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    if STATE
        .compare_exchange(UNINIT, BUSY, Acquire, Acquire)
        .is_ok()
    {
        // Reading files and the environment may leave errno set; the
        // caller's malloc must not.
        let saved = sys::errno();
        INIT_TID.store(tid, Relaxed);
        configure();
        let ok = init();
        STATE.store(if ok { READY } else { FAILED }, Release);
        sys::set_errno(saved);
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
        alert::warn("unsupported page size (pcpalloc needs 4 KiB pages); allocations will fail");
        return false;
    }
    settings::load_from_env();
    // A user-set limit is a wall; without one the OS and the cgroup limit
    // the heap, and the formulas are sized from the cgroup's limit or the
    // machine's RAM. The caches keep clear of the cgroup's limit in any
    // case (`memcg.rs`).
    let user_limit = SETTINGS.memory_limit.load(Relaxed);
    let cgroup_limit = super::memcg::init();
    let size = if user_limit != 0 {
        user_limit
    } else {
        cgroup_limit
            .or_else(|| sys::mem_total_bytes().map(|b| b as usize))
            .unwrap_or(DEFAULT_SIZE)
    };
    let size = size.min(MAX_SECTIONS * SECTION_SIZE / 2);
    PAGES.zone.configure(&ZoneConfig {
        memory_limit: if user_limit != 0 {
            user_limit
        } else {
            NO_LIMIT
        },
        size,
        nr_cpus: sys::nr_cpus_online(),
        high_fraction: SETTINGS.high_fraction.load(Relaxed),
        thp: ThpPolicy::from_u32(SETTINGS.thp.load(Relaxed)),
        group_by_lifetime: SETTINGS.group_by_lifetime.load(Relaxed),
        dirty_ratio: SETTINGS.dirty_ratio.load(Relaxed),
        steal: if SETTINGS.steal_seed_004.load(Relaxed) {
            StealRules::SEED_004
        } else {
            StealRules::BASELINE
        },
    });
    PAGES.zone.mark_process_heap();
    super::memcg::start(&PAGES.zone.budget);
    PAGES.set_knobs(settings::env_knobs());
    let batch = PAGES.zone.pcp_params().batch;
    let fhb = sys::llc_slice_bytes(0).is_some_and(|s| tune::free_high_batch(s, batch));
    if !PAGES.pagesets.init_cpu_sets(sys::nr_cpus_possible(), fhb) {
        return false;
    }
    FREE_KEY.store(random_key(), Relaxed);
    keep_stderr_for_report();
    super::record::start();
    // Asked once, before the first heap: under valgrind every operation
    // takes a slow path (`valgrind.rs`).
    super::valgrind::on();
    let thread_mode = SETTINGS.pcp_mode() == PcpMode::Thread;
    THREAD_MODE.store(thread_mode, Relaxed);
    PAGES.pagesets.set_steal(!thread_mode);
    // Thread pagesets and every heap's large bins are entered by their
    // owner with plain stores when the process can ask for a membarrier.
    crate::sync::membarrier_init();
    // The CPU pagesets' way in, once for the process (`sys/rseq.rs`).
    let entry = sys::rseq::select(SETTINGS.pcp_entry(), super::valgrind::on());
    if entry != sys::rseq::PcpEntry::Getcpu {
        PAGES.pagesets.enable_rseq();
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

/// After fork in the child (see `fork.rs`): a child forked during init
/// would wait forever; mark it failed instead.
pub(super) fn after_fork_child() {
    if STATE.load(Relaxed) == BUSY {
        STATE.store(FAILED, Relaxed);
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

/// Where the report at exit goes (a private copy of stderr).
static STATS_FD: AtomicI32 = AtomicI32::new(2);

/// The descriptor the report at exit goes to.
pub(crate) fn stats_fd() -> i32 {
    STATS_FD.load(Relaxed)
}

/// At init: keeps a private copy of stderr for the report at exit, if it
/// is wanted — programs often close fd 2 in their own exit handlers
/// (gnulib's close_stdout does), which run before the report.
fn keep_stderr_for_report() {
    if SETTINGS.stats_at_exit.load(Relaxed) {
        // SAFETY: fcntl on fd 2 has no memory-safety preconditions.
        let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 100) };
        STATS_FD.store(if fd >= 0 { fd } else { 2 }, Relaxed);
    }
}
