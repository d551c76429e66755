//! The memory cgroup the process runs in (the kernel's memcg): its limit
//! sizes the caches, and near it what the caches hold goes back to the OS
//! before the kernel kills the process for it.
//!
//! A memory cgroup's limit (`memory.max` or `memory.high`, v1's
//! `memory.limit_in_bytes`; `sys/memcg.rs` finds the level that binds) is
//! on what the process holds resident, cached or not: the kernel cannot
//! tell a free block waiting in a cache from a live one, and without swap
//! it cannot reclaim either. glibc keeps little; a program that fits in
//! its cgroup under glibc was killed under pcpalloc for the blocks its
//! caches kept (a phased program that peaked at 215 MiB under glibc was
//! killed at 237 MiB with 350 MiB held uncapped).
//!
//! So the budget is given a *target*, the limit less a reserve
//! ([`reserve`]: what the program's other memory, our metadata and a
//! step's growth may take between two looks), and what the cgroup holds
//! (its usage less its page cache, which the kernel drops rather than
//! kill anyone). Between two reads the budget counts what was charged
//! since on top (`Budget::cgroup_pressure`), so the *headroom* under the
//! target is known at the cost of a load and a subtraction. Every cache
//! keeps to half the headroom: the zone's resident free pages (the dirty
//! limit), the huge-block cache, what a free leaves waiting (`give_back`
//! keeps), the pagesets (the zone is under its high watermark when the
//! headroom is short, `Budget::room`). Far from the limit that changes
//! nothing; close to it the caches empty.
//!
//! The usage is read (two small files) at each tick and whenever the
//! budget has grown a step since the last read ([`past_mark`], asked by
//! `tick::after_growth` on the allocation paths that take memory from the
//! zone or map a huge block: a load and a compare); the step is a quarter
//! of the headroom, between 1 and 64 MiB, so reads are rare far from the
//! limit and come every MiB of growth at it. After a read, what waits past
//! what the headroom allows goes back there and then (`give_back.rs`);
//! within the reserve of the target ([`near_limit`]), everything cached
//! goes (the caller's caches, every pageset, every heap's parked slabs and
//! large bins, the huge blocks' cache, the zone's resident free pages) —
//! the kernel's memcg reclaim, done by the allocator that knows which
//! pages are free.
//!
//! A limit that changes while the program runs is followed: every tick
//! re-reads the limit of the level followed, and every
//! [`REFIND_TICKS`] ticks the levels are walked again (a limit set on
//! another level, a process moved to another cgroup). `PCPALLOC_CGROUP`
//! names the directory to follow instead, or `none` to follow no cgroup.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::page_alloc::zone::{Budget, NO_LIMIT};
use crate::sys::{self, MemCgroup};

use crate::settings::SETTINGS;

/// Ticks between two walks of the cgroup levels.
pub(crate) const REFIND_TICKS: u32 = 8;
/// The least and the most step of growth between two reads of the usage.
const STEP_MIN: usize = 1 << 20;
const STEP_MAX: usize = 64 << 20;
/// The least and the most reserve under the limit.
const RESERVE_MIN: usize = 4 << 20;
const RESERVE_MAX: usize = 128 << 20;
/// The reserve is this share of the limit (1/32), within its bounds.
const RESERVE_SHIFT: u32 = 5;

/// The level followed. Written at init, before any other thread can read
/// it, and afterwards only with the tick lock held (`tick.rs`), which
/// every reader holds too.
struct Followed(UnsafeCell<Option<MemCgroup>>);

// SAFETY: see the type's docs: init, then the tick lock.
unsafe impl Sync for Followed {}

static FOLLOWED: Followed = Followed(UnsafeCell::new(None));
/// The budget's `used` past which the next allocation reads the usage
/// again (`usize::MAX`: never, no cgroup limit followed).
static MARK: AtomicUsize = AtomicUsize::new(usize::MAX);
/// The limit followed in bytes (0: none), and the reserve under it.
static LIMIT: AtomicUsize = AtomicUsize::new(0);
static RESERVE: AtomicUsize = AtomicUsize::new(0);
/// Ticks seen, for [`REFIND_TICKS`].
static TICKS: AtomicU32 = AtomicU32::new(0);
/// Reads of the usage, and the give-backs they led to.
static READS: AtomicU64 = AtomicU64::new(0);
static GIVE_BACKS: AtomicU64 = AtomicU64::new(0);

/// The reserve under a limit of `limit` bytes (see the module docs).
pub fn reserve(limit: usize) -> usize {
    (limit >> RESERVE_SHIFT).clamp(RESERVE_MIN, RESERVE_MAX)
}

/// The level followed.
///
/// # Safety
/// The caller holds the tick lock, or is initialising the process.
unsafe fn followed() -> &'static mut Option<MemCgroup> {
    // SAFETY: the caller's contract serialises every access.
    unsafe { &mut *FOLLOWED.0.get() }
}

/// The directory `PCPALLOC_CGROUP` names: `None` for the process's own
/// cgroup, `Some(None)` for none.
fn named() -> Option<Option<&'static [u8]>> {
    match SETTINGS.cgroup.get().map(|c| c.to_bytes()) {
        Some(b"none") => Some(None),
        Some(dir) => Some(Some(dir)),
        None => None,
    }
}

/// Finds the level to follow (at init, before anything else runs).
/// Returns its limit in bytes: the memory the zone's formulas are sized
/// from.
pub(crate) fn init() -> Option<usize> {
    // SAFETY: initialisation: nothing else reads it yet.
    let m = unsafe { followed() };
    match named() {
        Some(None) => return None,
        Some(dir) => sys::find_mem_cgroup(dir, m),
        None => sys::find_mem_cgroup(None, m),
    }
    m.as_ref()?.limit().map(|l| l as usize)
}

/// After the zone is configured: `budget`'s target, and the first read of
/// the usage.
pub(crate) fn start(budget: &Budget) {
    // SAFETY: initialisation: nothing else reads it yet.
    follow(unsafe { followed() }, budget);
}

/// Reads the limit of `m` and what it holds; sets `budget`'s target and
/// the next mark. No cgroup, or no limit: the budget has no target.
fn follow(m: &Option<MemCgroup>, budget: &Budget) {
    let Some(limit) = m.as_ref().and_then(|m| m.limit()) else {
        budget.set_cgroup_target(NO_LIMIT);
        LIMIT.store(0, Relaxed);
        MARK.store(usize::MAX, Relaxed);
        return;
    };
    let limit = limit.min(NO_LIMIT as u64 - 1) as usize;
    let reserve = reserve(limit);
    LIMIT.store(limit, Relaxed);
    RESERVE.store(reserve, Relaxed);
    budget.set_cgroup_target(limit.saturating_sub(reserve));
    read_level(m, budget);
}

/// Reads what `m` holds into `budget` and sets the next mark: a step of
/// growth away.
fn read_level(m: &Option<MemCgroup>, budget: &Budget) {
    let Some(m) = m else {
        MARK.store(usize::MAX, Relaxed);
        return;
    };
    if let Some(u) = m.usage() {
        budget.note_cgroup_usage(u as usize);
        READS.fetch_add(1, Relaxed);
    }
    let step = (budget.headroom() / 4).clamp(STEP_MIN, STEP_MAX);
    MARK.store(budget.used().saturating_add(step), Relaxed);
}

/// Reads what the level followed holds into `budget` (see the module
/// docs). The caller holds the tick lock.
pub(crate) fn read_usage(budget: &Budget) {
    // SAFETY: the caller holds the tick lock.
    read_level(unsafe { followed() }, budget);
}

/// Whether `budget` has grown a step since the usage was last read: a
/// load and a compare.
#[inline]
pub(crate) fn past_mark(budget: &Budget) -> bool {
    budget.used() > MARK.load(Relaxed)
}

/// Whether the headroom left under `budget`'s target is within the
/// reserve: everything cached goes back (see the module docs).
#[inline]
pub(crate) fn near_limit(budget: &Budget) -> bool {
    budget.headroom() < RESERVE.load(Relaxed)
}

/// Counts a give-back a read led to.
pub(crate) fn note_give_back() {
    GIVE_BACKS.fetch_add(1, Relaxed);
}

/// The tick (the tick lock is held): the limit and the usage are read
/// again — the levels walked again every [`REFIND_TICKS`] ticks.
pub(crate) fn on_tick(budget: &Budget) {
    let ticks = TICKS.load(Relaxed).wrapping_add(1);
    TICKS.store(ticks, Relaxed);
    // SAFETY: the tick lock is held.
    let m = unsafe { followed() };
    if ticks.is_multiple_of(REFIND_TICKS) {
        match named() {
            Some(None) => {}
            Some(dir) => sys::find_mem_cgroup(dir, m),
            None => sys::find_mem_cgroup(None, m),
        }
    }
    follow(m, budget);
}

/// The memory cgroup's counters: the limit followed (0: none), what the
/// cgroup holds as `budget` tells it, the reads and the give-backs they
/// led to.
pub(crate) fn counters(budget: &Budget) -> [u64; 4] {
    let limit = LIMIT.load(Relaxed);
    let usage = if limit == 0 {
        0
    } else {
        budget.cgroup_pressure()
    };
    [
        limit as u64,
        usage as u64,
        READS.load(Relaxed),
        GIVE_BACKS.load(Relaxed),
    ]
}
