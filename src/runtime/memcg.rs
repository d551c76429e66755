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
//! budget has grown a step since the last read ([`after_alloc`], on the
//! allocation paths that take memory from the zone or map a huge block: a
//! load and a compare); the step is a quarter of the headroom, between 1
//! and 64 MiB, so reads are rare far from the limit and come every MiB of
//! growth at it. After a read, what waits past what the headroom allows
//! goes back there and then (`give_back.rs`); within the reserve of the
//! target, everything cached goes (the caller's caches, every pageset,
//! every heap's parked slabs and large bins, the huge blocks' cache, the
//! zone's resident free pages) — the kernel's memcg reclaim, done by the
//! allocator that knows which pages are free.
//!
//! A limit that changes while the program runs is followed: every tick
//! re-reads the limit of the level followed, and every
//! [`REFIND_TICKS`] ticks the levels are walked again (a limit set on
//! another level, a process moved to another cgroup). `PCPALLOC_CGROUP`
//! names the directory to follow instead, or `none` to follow no cgroup.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::page_alloc::zone::NO_LIMIT;
use crate::sys::{self, MemCgroup};

use super::give_back;
use super::process::PAGES;
use super::settings::SETTINGS;
use super::tick::TICK_LOCK;

/// Ticks between two walks of the cgroup levels.
pub const REFIND_TICKS: u32 = 8;
/// The least and the most step of growth between two reads of the usage.
const STEP_MIN: usize = 1 << 20;
const STEP_MAX: usize = 64 << 20;
/// The least and the most reserve under the limit.
const RESERVE_MIN: usize = 4 << 20;
const RESERVE_MAX: usize = 128 << 20;
/// The reserve is this share of the limit (1/32), within its bounds.
const RESERVE_SHIFT: u32 = 5;

/// The level followed. Written at init, before any other thread can read
/// it, and afterwards only with the tick lock held, which every reader
/// holds too.
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

/// Finds the level to follow (at init, before anything else runs).
/// Returns its limit in bytes: the memory the zone's formulas are sized
/// from.
pub fn init() -> Option<usize> {
    let named = SETTINGS.cgroup.get().map(|c| c.to_bytes());
    if named == Some(b"none") {
        return None;
    }
    let m = sys::find_mem_cgroup(named)?;
    let limit = m.limit()? as usize;
    // SAFETY: initialisation: nothing else reads it yet.
    unsafe { *followed() = Some(m) };
    Some(limit)
}

/// After the zone is configured: the budget's target, and the first read
/// of the usage.
pub fn start() {
    // SAFETY: initialisation: nothing else reads it yet.
    let m = unsafe { followed() };
    follow(m);
}

/// Reads the limit of `m` and what it holds; sets the budget's target and
/// the next mark. No cgroup, or no limit: the budget has no target.
fn follow(m: &Option<MemCgroup>) {
    let budget = &PAGES.zone.budget;
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
    if let Some(m) = m {
        read_usage(m);
    }
}

/// Reads what `m` holds into the budget and sets the next mark: a step
/// of growth away.
fn read_usage(m: &MemCgroup) {
    let budget = &PAGES.zone.budget;
    if let Some(u) = m.usage() {
        budget.note_cgroup_usage(u as usize);
        READS.fetch_add(1, Relaxed);
    }
    let step = (budget.headroom() / 4).clamp(STEP_MIN, STEP_MAX);
    MARK.store(budget.used().saturating_add(step), Relaxed);
}

/// Whether the headroom left is within the reserve: everything cached
/// goes back (see the module docs).
#[inline]
pub fn near_limit() -> bool {
    PAGES.zone.budget.headroom() < RESERVE.load(Relaxed)
}

/// On the allocation paths that take memory from the zone or map a huge
/// block, after they did: past the mark, the usage is read and what the
/// caches hold past the headroom goes back. A load and a compare.
#[inline]
pub fn after_alloc() {
    if PAGES.zone.budget.used() > MARK.load(Relaxed) {
        after_alloc_cold();
    }
}

#[cold]
#[inline(never)]
fn after_alloc_cold() {
    // A tick or a give-back under way reads and gives back too; the next
    // allocation past the mark tries again.
    if !TICK_LOCK.lock.try_lock() {
        return;
    }
    let saved = sys::errno();
    // SAFETY: the tick lock is held.
    if let Some(m) = unsafe { followed() }.as_ref() {
        read_usage(m);
        give_back_if_due(m);
    } else {
        MARK.store(usize::MAX, Relaxed);
    }
    sys::set_errno(saved);
    // SAFETY: taken just above.
    unsafe { TICK_LOCK.lock.unlock() };
}

/// What the caches hold past what the headroom allows goes back — all
/// of it, pagesets and heaps' caches too, within the reserve or when
/// they hold more than half the headroom; then the usage is read again,
/// so what went back counts. The tick lock is held.
fn give_back_if_due(m: &MemCgroup) {
    if near_limit() || give_back::over_cgroup_share() {
        give_back::give_back_everything();
    } else if give_back::due() {
        give_back::give_back();
    } else {
        return;
    }
    GIVE_BACKS.fetch_add(1, Relaxed);
    read_usage(m);
}

/// The tick (the tick lock is held): the limit and the usage are read
/// again — the levels walked again every [`REFIND_TICKS`] ticks — and
/// what waits past the headroom goes back.
pub fn on_tick() {
    let ticks = TICKS.load(Relaxed).wrapping_add(1);
    TICKS.store(ticks, Relaxed);
    // SAFETY: the tick lock is held.
    let m = unsafe { followed() };
    if ticks.is_multiple_of(REFIND_TICKS) {
        let named = SETTINGS.cgroup.get().map(|c| c.to_bytes());
        if named != Some(b"none") {
            *m = sys::find_mem_cgroup(named);
        }
    }
    follow(m);
    if let Some(m) = m.as_ref() {
        give_back_if_due(m);
    }
}

/// The memory cgroup's counters: the limit followed (0: none), what the
/// cgroup held at the last read, the reads and the give-backs they led
/// to.
pub fn counters() -> [u64; 4] {
    let limit = LIMIT.load(Relaxed);
    let usage = if limit == 0 {
        0
    } else {
        PAGES.zone.budget.cgroup_pressure()
    };
    [
        limit as u64,
        usage as u64,
        READS.load(Relaxed),
        GIVE_BACKS.load(Relaxed),
    ]
}
